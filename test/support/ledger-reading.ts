import type { Db } from "../../src/db/client.ts";
import type { BilledUsage } from "./fake-anthropic.ts";

/**
 * Issue 32.6: every paid Claude call is in the ledger (claude_calls). Read against what the
 * fake Anthropic billed: each answer a caller read is a settled row with the same tokens; an
 * answer nobody read (the caller's timeout, a worker killed mid-call) leaves its row at its
 * reservation, so there are at least as many unsettled rows as unread answers.
 */
export interface LedgerReading {
  answered: number;
  /** Rows never settled (reserved, or unknown: no answer read); counted at their reservation. */
  unsettled: number;
  /** Of those, the ones whose caller saw no answer come (its timeout): the fake may have answered it a moment too late. */
  unknown: number;
  tokens: number;
  billedAnswers: number;
  billedTokens: number;
  /** Billed answers whose caller had hung up, and their tokens. */
  unread: number;
  unreadTokens: number;
}

export const billedTokens = (u: BilledUsage) => u.input_tokens + u.output_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;

/**
 * Every answer read is settled, with its tokens; none is settled that was not given; and an
 * answer nobody read leaves a row unsettled. An answer the fake gave just as its caller gave up
 * counts as read by the fake and unknown by the caller: only then may a read answer be unsettled.
 */
export function ledgerHolds(l: LedgerReading): boolean {
  const read = l.billedAnswers - l.unread;
  const readTokens = l.billedTokens - l.unreadTokens;
  const settled = l.unknown === 0 ? l.answered === read && l.tokens === readTokens : l.answered + l.unknown >= read && l.tokens <= readTokens;
  return settled && l.answered <= read && l.unsettled >= l.unread;
}

/** What the fake billed, for a reading. */
export function billedOf(claude: { usages: readonly BilledUsage[]; unread: readonly BilledUsage[] }) {
  const sum = (usages: readonly BilledUsage[]) => usages.reduce((n, u) => n + billedTokens(u), 0);
  return { billedAnswers: claude.usages.length, billedTokens: sum(claude.usages), unread: claude.unread.length, unreadTokens: sum(claude.unread) };
}

export async function readLedger(db: Db, claude: { usages: readonly BilledUsage[]; unread: readonly BilledUsage[] }): Promise<LedgerReading> {
  const rows = await db.claudeCall.findMany({ where: { state: { not: "refused" } } });
  const answered = rows.filter((r) => r.state === "answered");
  return {
    answered: answered.length,
    unsettled: rows.length - answered.length,
    unknown: rows.filter((r) => r.state === "unknown").length,
    tokens: answered.reduce((n, r) => n + (r.inputTokens ?? 0) + (r.outputTokens ?? 0) + (r.cacheReadTokens ?? 0) + (r.cacheCreationTokens ?? 0), 0),
    ...billedOf(claude),
  };
}
