import { createHash } from "node:crypto";
import { resolve } from "node:path";
import { type Clock, systemClock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../logger.ts";
import { KnowledgeDirectory, type KnowledgeSnapshot } from "./directory.ts";
import { splitIntoPassages } from "./passages.ts";
import { deleteUnusedVersions, indexVersion, isIndexed, openingPassages, type ServedVersion, searchPassages, touchVersions } from "./store.ts";
import type { KnowledgeLimits } from "./walk.ts";

/**
 * A business number's own knowledge (issue 19): the Markdown, text and PDF files of its
 * knowledgeDir, shown to Claude whole as cited documents while they fit the token budget, and
 * as the passages that best match the customer's words when they do not. Every worker process
 * runs one; they share the passages through Postgres.
 */

export interface KnowledgeDocument {
  /** The file's path relative to knowledgeDir, e.g. "returns.md": Claude's citation names it. */
  title: string;
  /** Markdown and text are sent as text/plain. */
  mediaType: "text/plain" | "application/pdf";
  /** For text/plain. */
  text?: string;
  /** For application/pdf: the file's bytes. */
  base64?: string;
}

export interface KnowledgePassage {
  /** Stable id of the stored passage. */
  id: string;
  /** The file's relative path. */
  source: string;
  /** A human title: the file's path, plus the nearest Markdown heading or "page N" of a PDF. */
  title: string;
  text: string;
}

export type KnowledgeForClaude =
  /**
   * All files fit KNOWLEDGE_TOKEN_BUDGET: sent whole, ordered by path. The documents are the same
   * (frozen) objects for every reply until a file changes: the prompt cache sees the same bytes.
   */
  | { kind: "documents"; version: string; documents: KnowledgeDocument[] }
  /**
   * Too large: the best passages for the customer's words ("search"), or, when none of their
   * words tells passages apart (a greeting, a question in other words than the files'), the
   * opening passage of each file ("openings"), so Claude still knows what the business covers.
   */
  | { kind: "passages"; version: string; match: "search" | "openings"; passages: KnowledgePassage[] };

export interface KnowledgeBase {
  /**
   * What Claude is shown for this number and these customer words; undefined when the number has
   * no knowledgeDir (or it is empty). Rejects when Postgres cannot be reached in passages mode.
   */
  forReply(phoneNumberId: string, query: string): Promise<KnowledgeForClaude | undefined>;
  /** Stops watching the directories. */
  close(): Promise<void>;
}

export interface KnowledgeBaseDeps {
  db: Db;
  logger: Logger;
  /** phone_number_id -> absolute knowledgeDir. */
  dirs: ReadonlyMap<string, string>;
  /** KNOWLEDGE_TOKEN_BUDGET. */
  tokenBudget: number;
  /** KNOWLEDGE_LANGUAGE: the Postgres text-search configuration passages are indexed and searched with. */
  language: string;
  /** KNOWLEDGE_MAX_FILES and KNOWLEDGE_MAX_BYTES: a reading past them does not serve (the last one within them does). */
  limits: KnowledgeLimits;
  /** When the versions in use were last marked (the system's clock by default). */
  clock?: Clock | undefined;
  /** How often the directories are looked at (default 1000 ms). */
  pollMs?: number;
  /** Passages returned per reply (default 8). */
  passageLimit?: number;
  /**
   * Read the folders once and write nothing (an eval, the playground): passages past the budget
   * are searched where a worker stored them, never stored, touched or deleted from here.
   */
  readOnly?: boolean;
  /**
   * How long a stored version no process serves is kept (default 10 minutes): long enough for
   * every worker to have seen the same change, so none is left asking for a deleted version.
   */
  keepUnusedVersionsMs?: number;
}

/**
 * Claude's limits for PDFs in one request: 100 pages, and 32 MB a request, base64 included
 * (a third larger than the bytes). Knowledge past these is searched, whatever its tokens.
 */
const MAX_PDF_PAGES_SENT_WHOLE = 100;
const MAX_PDF_BYTES_SENT_WHOLE = 20 * 1024 * 1024;

type Served =
  | { kind: "empty"; version: string }
  | { kind: "documents"; version: string; documents: readonly KnowledgeDocument[] }
  | { kind: "passages"; version: string; snapshot: KnowledgeSnapshot };

interface Watched {
  directory: KnowledgeDirectory;
  phoneNumberIds: string[];
  snapshot: KnowledgeSnapshot | undefined;
  served: Served;
}

type Passages = Extract<Served, { kind: "passages" }>;

export async function startKnowledgeBase(deps: KnowledgeBaseDeps): Promise<KnowledgeBase> {
  const base = new WatchedKnowledge(deps);
  await base.poll();
  if (!deps.readOnly) base.schedule();
  return base;
}

/**
 * The numbers' knowledge, read and watched by a worker process once a number has a
 * knowledgeDir; undefined when none has. Started in the background: the first reply that
 * needs it waits for its first reading.
 */
export function watchNumbersKnowledge(
  numbers: ReadonlyMap<string, { readonly knowledgeDir?: string | undefined }>,
  deps: Omit<KnowledgeBaseDeps, "dirs">,
): KnowledgeBase | undefined {
  const dirs = new Map([...numbers].flatMap(([id, number]) => (number.knowledgeDir ? [[id, number.knowledgeDir] as const] : [])));
  if (dirs.size === 0) return undefined;
  const started = startKnowledgeBase({ ...deps, dirs });
  return {
    forReply: async (phoneNumberId, query) => (await started).forReply(phoneNumberId, query),
    close: async () => (await started).close(),
  };
}

/**
 * The directories, read every poll; their passages stored in Postgres ahead of the first reply
 * that needs them, once per version whichever process gets there first; the versions this
 * process serves touched, and those nobody has served for a while deleted.
 */
class WatchedKnowledge implements KnowledgeBase {
  private readonly pollMs: number;
  private readonly passageLimit: number;
  private readonly keepUnusedVersionsMs: number;
  /** Touched well within the time another process waits before deleting. */
  private readonly touchEveryMs: number;
  private readonly logger: Logger;
  private readonly clock: Clock;
  /** Numbers that share a knowledgeDir share its reading. */
  private readonly watched = new Map<string, Watched>();
  private readonly byNumber = new Map<string, Watched>();
  /** The version each number's passages are known to be stored at, in Postgres. */
  private readonly indexedVersion = new Map<string, string>();
  private readonly indexing = new Map<string, { version: string; done: Promise<void> }>();
  /** Once per number and version, not once a poll, while Postgres is away. */
  private readonly indexFailureLogged = new Map<string, string>();
  private lastTouch = Number.NEGATIVE_INFINITY;
  private closed = false;
  private polling: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly deps: KnowledgeBaseDeps) {
    this.pollMs = deps.pollMs ?? 1_000;
    this.passageLimit = deps.passageLimit ?? 8;
    this.keepUnusedVersionsMs = deps.keepUnusedVersionsMs ?? 10 * 60_000;
    this.touchEveryMs = Math.max(this.pollMs, this.keepUnusedVersionsMs / 4);
    this.logger = deps.logger.child({ module: "knowledge" });
    this.clock = deps.clock ?? systemClock;
    for (const [phoneNumberId, dir] of deps.dirs) {
      const absolute = resolve(dir);
      let entry = this.watched.get(absolute);
      if (!entry) {
        entry = {
          directory: new KnowledgeDirectory(absolute, this.logger, deps.limits),
          phoneNumberIds: [],
          snapshot: undefined,
          served: { kind: "empty", version: "" },
        };
        this.watched.set(absolute, entry);
      }
      entry.phoneNumberIds.push(phoneNumberId);
      this.byNumber.set(phoneNumberId, entry);
    }
  }

  async forReply(phoneNumberId: string, query: string): Promise<KnowledgeForClaude | undefined> {
    const served = this.byNumber.get(phoneNumberId)?.served;
    if (!served || served.kind === "empty") return undefined;
    if (served.kind === "documents") return { kind: "documents", version: served.version, documents: [...served.documents] };
    return this.passagesFor(phoneNumberId, served, query);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.polling;
    await Promise.allSettled([...this.indexing.values()].map((running) => running.done));
  }

  schedule(): void {
    this.timer = setTimeout(() => {
      this.polling = this.poll().finally(() => {
        this.polling = undefined;
        if (!this.closed) this.schedule();
      });
    }, this.pollMs);
    // The poll alone never keeps a process alive.
    this.timer.unref();
  }

  async poll(): Promise<void> {
    for (const entry of this.watched.values()) {
      try {
        await this.look(entry);
      } catch (error) {
        this.logger.error(
          { event: "knowledge.scan_failed", dir: entry.directory.dir, err: error },
          "knowledge directory could not be read; the last reading still serves",
        );
      }
      const served = entry.served;
      // Stored ahead of the first reply that needs them; on failure, tried again at every poll and by that reply.
      if (served.kind === "passages" && !this.deps.readOnly) for (const phoneNumberId of entry.phoneNumberIds) this.indexAhead(phoneNumberId, served);
    }
    if (!this.deps.readOnly && this.clock.monotonicMs() - this.lastTouch >= this.touchEveryMs) await this.touch();
  }

  private indexAhead(phoneNumberId: string, served: Passages): void {
    this.ensureIndexed(phoneNumberId, served).then(
      () => this.indexFailureLogged.delete(phoneNumberId),
      (error: unknown) => {
        if (this.indexFailureLogged.get(phoneNumberId) === served.version) return;
        this.indexFailureLogged.set(phoneNumberId, served.version);
        this.logger.warn(
          { event: "knowledge.index_failed", phoneNumberId, version: served.version, err: error },
          "knowledge passages not stored yet; tried again every poll",
        );
      },
    );
  }

  /** The versions this process serves are in use; those no process has touched for a while are deleted. */
  private async touch(): Promise<void> {
    try {
      // Versions still being stored count too: one committed just before this sweep is not unused.
      const own = [...this.byNumber].flatMap(([phoneNumberId, entry]) =>
        entry.served.kind === "passages" ? [{ phoneNumberId, version: entry.served.version }] : [],
      );
      await touchVersions(this.deps.db, own);
      const deleted = await deleteUnusedVersions(this.deps.db, this.keepUnusedVersionsMs, own);
      if (deleted > 0) this.logger.info({ event: "knowledge.versions_deleted", versions: deleted }, "knowledge versions no process serves deleted");
      this.lastTouch = this.clock.monotonicMs();
    } catch (error) {
      this.logger.warn({ event: "knowledge.touch_failed", err: error }, "could not mark the knowledge in use; tried again next poll");
    }
  }

  private async look(entry: Watched): Promise<void> {
    const snapshot = await entry.directory.scan();
    if (snapshot === entry.snapshot) return;
    entry.snapshot = snapshot;
    entry.served = served(snapshot, this.deps.tokenBudget, this.deps.language);
    this.logger.info(
      {
        event: "knowledge.loaded",
        dir: entry.directory.dir,
        phoneNumberIds: entry.phoneNumberIds,
        version: entry.served.version,
        files: snapshot.files.length,
        tokens: snapshot.files.reduce((sum, file) => sum + file.tokens, 0),
        mode: entry.served.kind,
      },
      "knowledge loaded",
    );
  }

  private ensureIndexed(phoneNumberId: string, served: Passages): Promise<void> {
    if (this.indexedVersion.get(phoneNumberId) === served.version) return Promise.resolve();
    const running = this.indexing.get(phoneNumberId);
    if (running?.version === served.version) return running.done;
    const done = this.index({ phoneNumberId, version: served.version }, served.snapshot).finally(() => {
      if (this.indexing.get(phoneNumberId)?.done === done) this.indexing.delete(phoneNumberId);
    });
    this.indexing.set(phoneNumberId, { version: served.version, done });
    return done;
  }

  private async index(target: ServedVersion, snapshot: KnowledgeSnapshot): Promise<void> {
    // Most often another process has stored them already: then nothing is split, and no lock taken.
    let outcome: "indexed" | "already" = "already";
    let passages: number | undefined;
    if (!(await isIndexed(this.deps.db, target))) {
      const drafts = snapshot.files.flatMap((file) => splitIntoPassages(file.path, file.content));
      outcome = await indexVersion(this.deps.db, target, drafts, this.deps.language);
      passages = drafts.length;
    }
    if (outcome === "indexed") this.logger.info({ event: "knowledge.indexed", ...target, passages }, "knowledge passages stored for search");
    else this.logger.debug({ event: "knowledge.already_indexed", ...target }, "knowledge passages already stored (by another process, or before a restart)");
    this.indexedVersion.set(target.phoneNumberId, target.version);
  }

  private async passagesFor(phoneNumberId: string, served: Passages, query: string): Promise<KnowledgeForClaude> {
    const target = { phoneNumberId, version: served.version };
    if (this.deps.readOnly && !(await isIndexed(this.deps.db, target)))
      throw new Error(
        `the knowledge of ${phoneNumberId} is past KNOWLEDGE_TOKEN_BUDGET and its passages are not stored yet: start a worker on this database once to store them`,
      );
    for (let attempt = 0; ; attempt++) {
      if (!this.deps.readOnly) await this.ensureIndexed(phoneNumberId, served);
      const found = await searchPassages(this.deps.db, target, query, this.passageLimit, this.deps.language);
      if (found.length > 0) return { kind: "passages", version: served.version, match: "search", passages: found };
      const openings = await openingPassages(this.deps.db, target, this.passageLimit);
      // No passage at all: this process was away long enough (a long pause, Postgres out of reach)
      // for another to delete its version. Store it again, once.
      if (openings.length > 0 || attempt > 0 || (await isIndexed(this.deps.db, target))) {
        return { kind: "passages", version: served.version, match: "openings", passages: openings };
      }
      this.indexedVersion.delete(phoneNumberId);
    }
  }
}

/** How a reading is shown to Claude: nothing, whole documents while they fit the budget and Claude's PDF limits, else searched passages. */
function served(snapshot: KnowledgeSnapshot, tokenBudget: number, language: string): Served {
  // An empty text file says nothing, and Claude refuses an empty document. A PDF without text
  // (a scan) still shows Claude its pages.
  const files = snapshot.files.filter((file) => file.content.format === "pdf" || file.content.text.trim() !== "");
  if (files.length === 0) return { kind: "empty", version: snapshot.version };
  const tokens = files.reduce((sum, file) => sum + file.tokens, 0);
  const pdfs = files.filter((file) => file.content.format === "pdf");
  const pdfPages = pdfs.reduce((sum, file) => sum + (file.content.format === "pdf" ? file.content.pages.length : 0), 0);
  const pdfBytes = pdfs.reduce((sum, file) => sum + file.bytes.length, 0);
  if (tokens > tokenBudget || pdfPages > MAX_PDF_PAGES_SENT_WHOLE || pdfBytes > MAX_PDF_BYTES_SENT_WHOLE) {
    return { kind: "passages", version: searchedVersion(snapshot.version, language), snapshot: { ...snapshot, files } };
  }
  const documents = files.map(
    (file): KnowledgeDocument =>
      Object.freeze(
        file.content.format === "pdf"
          ? { title: file.path, mediaType: "application/pdf", base64: file.bytes.toString("base64") }
          : { title: file.path, mediaType: "text/plain", text: file.content.text },
      ),
  );
  return { kind: "documents", version: snapshot.version, documents: Object.freeze(documents) };
}

/**
 * The version passages are stored under: the files' version searched in one language. Vectors
 * built with one text-search configuration do not answer another's queries, so a process with
 * another KNOWLEDGE_LANGUAGE (a rolling deploy that changes it) stores and searches its own,
 * and a change of language indexes the files again.
 */
function searchedVersion(version: string, language: string): string {
  return createHash("sha256").update(`${version}\0${language}`).digest("hex").slice(0, 32);
}
