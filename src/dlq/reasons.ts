import type { Db } from "../db/client.ts";
import type { DeadLetterState, Prisma } from "../generated/prisma/client.ts";
import { explain, REASON_KINDS, type ReasonKind } from "./explain.ts";

/**
 * The queue by reason: how many items wait for each kind of problem, and since when. Kinds
 * follow from an item's source and code alone (explain.ts), so Postgres groups by those two
 * columns and the kinds are folded together here.
 */

export const reasonKind = (source: string, code: string | null): ReasonKind => explain({ source, code, reason: "" }).kind;

type Where = Prisma.DeadLetterWhereInput;

/** The (source, code) pairs of one kind among the items `where` selects: a filter Postgres can use. */
export async function reasonWhere(db: Db, where: Where, kind: ReasonKind): Promise<Where> {
  const pairs = await db.deadLetter.groupBy({ by: ["source", "code"], where });
  const matching = pairs.filter((pair) => reasonKind(pair.source, pair.code) === kind);
  // No pair of that kind: a condition nothing meets.
  return { OR: matching.length > 0 ? matching.map((pair) => ({ source: pair.source, code: pair.code })) : [{ id: { in: [] } }] };
}

export interface ReasonCount {
  kind: ReasonKind;
  label: string;
  count: number;
  /** When the oldest item of this kind came in: how long someone has been waiting. */
  oldestAt: Date;
}

/** Counts of the items in `state` (default open), by reason, largest first. */
export async function summarizeDeadLetters(db: Db, filter: { state?: DeadLetterState | undefined; phoneNumberId?: string | undefined } = {}) {
  const where: Where = { state: filter.state ?? "open", ...(filter.phoneNumberId ? { conversation: { phoneNumberId: filter.phoneNumberId } } : {}) };
  const groups = await db.deadLetter.groupBy({ by: ["source", "code"], where, _count: { _all: true }, _min: { createdAt: true } });
  const byKind = new Map<ReasonKind, ReasonCount>();
  for (const group of groups) {
    const kind = reasonKind(group.source, group.code);
    const oldest = group._min.createdAt!;
    const entry = byKind.get(kind);
    if (entry) {
      entry.count += group._count._all;
      if (oldest < entry.oldestAt) entry.oldestAt = oldest;
    } else {
      byKind.set(kind, { kind, label: REASON_KINDS[kind], count: group._count._all, oldestAt: oldest });
    }
  }
  const reasons = [...byKind.values()].sort((a, b) => b.count - a.count || a.oldestAt.getTime() - b.oldestAt.getTime());
  const total = reasons.reduce((sum, r) => sum + r.count, 0);
  const oldestAt = reasons.reduce<Date | null>((oldest, r) => (oldest && oldest < r.oldestAt ? oldest : r.oldestAt), null);
  return { state: where.state, total, oldestAt, reasons };
}
