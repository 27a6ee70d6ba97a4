import type { Db } from "../../src/db/client.ts";
import type { BilledUsage } from "./fake-anthropic.ts";

/**
 * Issue 32.6: every paid Claude call is in the ledger (claude_calls). Read against what the
 * fake Anthropic billed: each answer it gave is a settled row with the same tokens; a call
 * whose answer nobody read (a timeout, a worker killed mid-call, a call still in flight) is a
 * row left at its reservation, never a call missing.
 */
export interface LedgerReading {
  answered: number;
  /** Rows never settled (reserved, or unknown: no answer read); counted at their reservation. */
  unsettled: number;
  tokens: number;
  billedAnswers: number;
  billedTokens: number;
}

export const billedTokens = (u: BilledUsage) => u.input_tokens + u.output_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;

export function ledgerHolds(l: LedgerReading): boolean {
  if (l.unsettled === 0) return l.answered === l.billedAnswers && l.tokens === l.billedTokens;
  return l.answered + l.unsettled >= l.billedAnswers && l.tokens <= l.billedTokens;
}

export async function readLedger(db: Db, billed: readonly BilledUsage[]): Promise<LedgerReading> {
  const rows = await db.claudeCall.findMany({ where: { state: { not: "refused" } } });
  const answered = rows.filter((r) => r.state === "answered");
  return {
    answered: answered.length,
    unsettled: rows.length - answered.length,
    tokens: answered.reduce((n, r) => n + (r.inputTokens ?? 0) + (r.outputTokens ?? 0) + (r.cacheReadTokens ?? 0) + (r.cacheCreationTokens ?? 0), 0),
    billedAnswers: billed.length,
    billedTokens: billed.reduce((n, u) => n + billedTokens(u), 0),
  };
}
