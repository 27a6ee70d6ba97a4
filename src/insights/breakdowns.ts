import { type Db, Prisma } from "../db/client.ts";
import { REASON_KINDS, type ReasonKind } from "../dlq/explain.ts";
import { reasonKind } from "../dlq/reasons.ts";
import { boundsOf, type Range } from "./daily.ts";

/**
 * What lies behind the range's figures (issue 33): why customers were handed to a person, why
 * replies failed, which knowledge files Claude cited, and how the business's tools answered.
 * Each counted by SQL over what is stored.
 */

export interface HandoffReason {
  /** "keyword" (the customer asked for a person), "refusal" (Claude declined), "paused" (they wrote to a bot paused for a person), else Claude's own words (handoff_to_human). */
  reason: string;
  count: number;
}

export interface DeadLetterReason {
  /** As the queue's summary names it (src/dlq/explain.ts). */
  kind: ReasonKind;
  label: string;
  count: number;
}

export interface ToolUse {
  name: string;
  calls: number;
  /** Answered as failed (not run, no answer from a read, the input refused before it left). */
  failed: number;
  /** Never answered for sure: a person checks whether the business acted. */
  unknown: number;
}

export interface Citations {
  phoneNumberId: string;
  /** The file's path relative to the number's knowledgeDir. */
  source: string;
  citations: number;
}

const scope = (range: Range) => {
  const { since, until, number } = boundsOf(range);
  return {
    inRange: (column: string) => Prisma.sql`${Prisma.raw(column)} >= ${since}::timestamptz AND ${Prisma.raw(column)} < ${until}::timestamptz`,
    ofNumber: Prisma.sql`(${number}::text IS NULL OR c.phone_number_id = ${number}::text)`,
  };
};

/** The handoff items opened in the range, by why (src/state/dead-letters.ts, openHandoffItem, says what each stores). */
export async function handoffReasons(db: Db, range: Range): Promise<HandoffReason[]> {
  const { inRange, ofNumber } = scope(range);
  return db.$queryRaw<HandoffReason[]>`
    SELECT CASE
             WHEN d.code = 'paused' THEN 'paused'
             -- A refusal is keyed by "refusal.<reply>.<step>" (src/replies/generation.ts), a handoff_to_human by its tool_use id.
             WHEN d.code = 'claude' AND d.detail->>'toolUseId' LIKE 'refusal.%' THEN 'refusal'
             WHEN d.code = 'claude' THEN COALESCE(d.detail->>'reason', 'claude')
             ELSE 'keyword'
           END AS reason,
           count(*)::int AS count
    FROM dead_letters d JOIN conversations c ON c.id = d.conversation_id
    WHERE d.source = 'handoff' AND ${inRange("d.created_at")} AND ${ofNumber}
    GROUP BY 1 ORDER BY 2 DESC, 1`;
}

/** The other items opened in the range, by kind: Postgres groups by source and code, the kinds are folded here (src/dlq/reasons.ts). */
export async function deadLetterReasons(db: Db, range: Range): Promise<DeadLetterReason[]> {
  const { inRange, ofNumber } = scope(range);
  const groups = await db.$queryRaw<{ source: string; code: string | null; count: number }[]>`
    SELECT d.source, d.code, count(*)::int AS count
    FROM dead_letters d JOIN conversations c ON c.id = d.conversation_id
    WHERE d.source <> 'handoff' AND ${inRange("d.created_at")} AND ${ofNumber}
    GROUP BY 1, 2`;
  const byKind = new Map<ReasonKind, DeadLetterReason>();
  for (const group of groups) {
    const kind = reasonKind(group.source, group.code);
    const entry = byKind.get(kind) ?? { kind, label: REASON_KINDS[kind], count: 0 };
    entry.count += group.count;
    byKind.set(kind, entry);
  }
  return [...byKind.values()].sort((a, b) => b.count - a.count || a.kind.localeCompare(b.kind));
}

/** The business tools Claude called in the range (by when each was recorded), by their state (src/state/steps.ts). */
export async function toolUse(db: Db, range: Range): Promise<ToolUse[]> {
  const { inRange, ofNumber } = scope(range);
  return db.$queryRaw<ToolUse[]>`
    SELECT t.name, count(*)::int AS calls, (count(*) FILTER (WHERE t.state = 'failed'))::int AS failed,
           (count(*) FILTER (WHERE t.state = 'unknown'))::int AS unknown
    FROM tool_calls t JOIN replies r ON r.id = t.reply_id JOIN conversations c ON c.id = r.conversation_id
    WHERE ${inRange("t.requested_at")} AND ${ofNumber}
    GROUP BY 1 ORDER BY 2 DESC, 1`;
}

/**
 * Each knowledge file's citations in the replies made in the range (replies.citations:
 * [{ source, ... }]), beside every file the numbers' knowledgeDirs hold now (`files`, by number),
 * so a file nobody cited shows at 0. A cited file since removed still shows its citations.
 */
export async function knowledgeCitations(db: Db, range: Range, files: ReadonlyMap<string, readonly string[]>): Promise<Citations[]> {
  const { inRange, ofNumber } = scope(range);
  const cited = await db.$queryRaw<Citations[]>`
    SELECT c.phone_number_id AS "phoneNumberId", cited->>'source' AS source, count(*)::int AS citations
    FROM replies r JOIN conversations c ON c.id = r.conversation_id
      CROSS JOIN LATERAL jsonb_array_elements(CASE WHEN jsonb_typeof(r.citations) = 'array' THEN r.citations ELSE '[]'::jsonb END) AS cited
    WHERE r.citations IS NOT NULL AND ${inRange("r.created_at")} AND ${ofNumber} AND cited->>'source' IS NOT NULL
    GROUP BY 1, 2`;
  const rows = new Map<string, Citations>();
  for (const [phoneNumberId, paths] of files) {
    if (range.phoneNumberId !== undefined && phoneNumberId !== range.phoneNumberId) continue;
    for (const source of paths) rows.set(`${phoneNumberId} ${source}`, { phoneNumberId, source, citations: 0 });
  }
  for (const row of cited) rows.set(`${row.phoneNumberId} ${row.source}`, row);
  return [...rows.values()].sort((a, b) => a.phoneNumberId.localeCompare(b.phoneNumberId) || b.citations - a.citations || a.source.localeCompare(b.source));
}
