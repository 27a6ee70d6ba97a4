import { createHash } from "node:crypto";
import type { Db } from "../db/client.ts";
import type { PassageDraft } from "./passages.ts";

/**
 * The passages of knowledge too large to send whole, in Postgres (knowledge_versions and
 * knowledge_passages), shared by every worker process. A version is written once, with all
 * its passages in one transaction, under an advisory lock per business number; readers ask
 * for their own version's passages, so they never see half of one. A version stays while some
 * process serves it (each touches its own) and is deleted once none has for a while: a worker
 * a poll behind the others, or one still running last deploy's files, keeps its passages.
 *
 * Passages are indexed and searched with one Postgres text-search configuration, the
 * `language` (KNOWLEDGE_LANGUAGE): a version's passages are all built with the language its
 * version was made for (knowledge.ts mixes it into the version).
 */

export interface StoredPassage {
  id: string;
  source: string;
  title: string;
  text: string;
}

export interface ServedVersion {
  phoneNumberId: string;
  version: string;
}

/** The first key of the two-key advisory locks on knowledge ('know'); the second is the number's hash. */
const KNOWLEDGE_LOCK = 0x6b6e6f77;

/** Every process writing the same version writes the same ids, and a passage keeps its id for as long as its version is stored. */
export function passageId(phoneNumberId: string, version: string, seq: number): string {
  const hex = createHash("sha256").update(`${phoneNumberId}\0${version}\0${seq}`).digest("hex");
  // Shaped as an RFC 9562 version 8 (application-defined) UUID.
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${((Number.parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16)}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

export async function isIndexed(db: Db, served: ServedVersion): Promise<boolean> {
  const rows = await db.$queryRaw<{ found: boolean }[]>`
    SELECT true AS found FROM knowledge_versions WHERE phone_number_id = ${served.phoneNumberId} AND version = ${served.version}`;
  return rows.length > 0;
}

/**
 * Stores a version's passages unless another process already has; "already" when it had. The
 * lock makes a second process wait for the first, then find its work done.
 */
export async function indexVersion(db: Db, served: ServedVersion, drafts: readonly PassageDraft[], language: string): Promise<"indexed" | "already"> {
  const { phoneNumberId, version } = served;
  // One statement carries every passage; Postgres writes thousands in well under this.
  return db.$transaction(
    async (tx) => {
      await tx.$executeRaw`SELECT pg_advisory_xact_lock(${KNOWLEDGE_LOCK}::int4, hashtext(${phoneNumberId}))`;
      const touched = await tx.$executeRaw`
        UPDATE knowledge_versions SET used_at = now() WHERE phone_number_id = ${phoneNumberId} AND version = ${version}`;
      if (touched > 0) return "already";
      await tx.$executeRaw`
        INSERT INTO knowledge_versions (phone_number_id, version, passage_count) VALUES (${phoneNumberId}, ${version}, ${drafts.length})`;
      // One statement whatever the count: its text never varies, so it is prepared once (src/db/client.ts).
      // The title (file path and heading) weighs more than the text; its punctuation is spaced
      // out so "returns.md" is found by "returns".
      await tx.$executeRaw`
        INSERT INTO knowledge_passages (id, phone_number_id, version, source, title, seq, text, language, search)
        SELECT p.id, ${phoneNumberId}, ${version}, p.source, p.title, p.seq, p.text, ${language},
          setweight(to_tsvector(l.config, regexp_replace(p.title, '[[:punct:]]+', ' ', 'g')), 'A')
          || setweight(to_tsvector(l.config, p.text), 'B')
        FROM unnest(
          ${drafts.map((_, seq) => passageId(phoneNumberId, version, seq))}::uuid[],
          ${drafts.map((draft) => draft.source)}::text[],
          ${drafts.map((draft) => draft.title)}::text[],
          ${drafts.map((_, seq) => seq)}::int4[],
          ${drafts.map((draft) => draft.text)}::text[]
        ) AS p(id, source, title, seq, text)
        CROSS JOIN (SELECT ${language}::regconfig AS config) AS l`;
      return "indexed";
    },
    { timeout: 120_000 },
  );
}

/**
 * The passages that best answer the customer's words, best first; none when no word of theirs
 * tells passages apart. `language` is the one the version's passages were indexed with.
 *
 * Every word of the customer's counts on its own (OR): a question rarely repeats all the words
 * of the passage that answers it. A word found in more than half the passages tells nothing
 * (the 'simple' configuration keeps "the", "de", "и" alike, and this finds such words in any
 * language from the knowledge itself; a language's own configuration drops its common words); the others weigh by their rarity (BM25's inverse
 * document frequency) times their ts_rank_cd in the passage, saturated so that one word
 * repeated does not outweigh several words found (a word in the title counts more: weight A).
 */
export async function searchPassages(db: Db, served: ServedVersion, query: string, limit: number, language: string): Promise<StoredPassage[]> {
  // Materialized: inlined, Postgres may count a word's passages once for every passage it ranks.
  return db.$queryRaw<StoredPassage[]>`
    WITH terms AS MATERIALIZED (
      SELECT DISTINCT operand::tsquery AS term
      FROM unnest(string_to_array(plainto_tsquery(${language}::regconfig, ${query})::text, ' & ')) AS operand
    ),
    passages AS NOT MATERIALIZED (
      SELECT id, source, title, seq, text, search FROM knowledge_passages
      WHERE phone_number_id = ${served.phoneNumberId} AND version = ${served.version}
    ),
    counted AS MATERIALIZED (
      SELECT t.term, count(p.id)::float8 AS matching
      FROM terms t LEFT JOIN passages p ON p.search @@ t.term
      GROUP BY t.term
    ),
    total AS MATERIALIZED (
      SELECT passage_count::float8 AS passages FROM knowledge_versions
      WHERE phone_number_id = ${served.phoneNumberId} AND version = ${served.version}
    ),
    telling AS MATERIALIZED (
      SELECT c.term, ln(1 + (total.passages - c.matching + 0.5) / (c.matching + 0.5)) AS rarity
      FROM counted c CROSS JOIN total
      WHERE c.matching > 0 AND c.matching * 2 <= total.passages
    )
    SELECT p.id::text AS id, p.source, p.title, p.text
    FROM passages p
    JOIN telling w ON p.search @@ w.term
    CROSS JOIN LATERAL (SELECT ts_rank_cd(p.search, w.term) AS rank) r
    GROUP BY p.id, p.source, p.title, p.seq, p.text
    ORDER BY sum(w.rarity * r.rank / (1 + r.rank)) DESC, p.seq
    LIMIT ${limit}`;
}

/** The first passage of each file, in path order: what each file is about, for words that matched nothing. */
export async function openingPassages(db: Db, served: ServedVersion, limit: number): Promise<StoredPassage[]> {
  return db.$queryRaw<StoredPassage[]>`
    SELECT id::text AS id, source, title, text FROM (
      SELECT DISTINCT ON (source) id, source, title, text, seq FROM knowledge_passages
      WHERE phone_number_id = ${served.phoneNumberId} AND version = ${served.version}
      ORDER BY source, seq
    ) openings
    ORDER BY seq
    LIMIT ${limit}`;
}

/** Says these versions are still served, so no process deletes them. */
export async function touchVersions(db: Db, served: readonly ServedVersion[]): Promise<void> {
  if (served.length === 0) return;
  await db.$executeRaw`
    UPDATE knowledge_versions v SET used_at = now()
    FROM unnest(${served.map((s) => s.phoneNumberId)}::text[], ${served.map((s) => s.version)}::text[]) AS s(phone_number_id, version)
    WHERE v.phone_number_id = s.phone_number_id AND v.version = s.version`;
}

/**
 * Deletes, with their passages, the versions no process has touched for `unusedForMs`, of any
 * number (a number no longer configured anywhere leaves nothing behind), except the caller's own.
 */
export async function deleteUnusedVersions(db: Db, unusedForMs: number, own: readonly ServedVersion[]): Promise<number> {
  return db.$executeRaw`
    DELETE FROM knowledge_versions v
    WHERE v.used_at < now() - make_interval(secs => ${unusedForMs / 1000}::float8)
      AND (v.phone_number_id, v.version) NOT IN (
        SELECT * FROM unnest(${own.map((s) => s.phoneNumberId)}::text[], ${own.map((s) => s.version)}::text[]))`;
}
