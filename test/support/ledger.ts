import { expect } from "vitest";
import type { Db } from "../../src/db/client.ts";
import type { BilledUsage } from "./fake-anthropic.ts";

/**
 * Issue 32.6: every paid Claude call is in the ledger. Its rows, summed, hold exactly what the
 * fake Anthropic billed: one answered row per answer given, the same tokens, and no call left
 * reserved (none was lost in flight in the tests that use this).
 */
export async function expectLedgerToMatchBilled(db: Db, billed: readonly BilledUsage[]): Promise<void> {
  const rows = await db.claudeCall.findMany();
  const sum = (pick: (u: BilledUsage) => number) => billed.reduce((n, u) => n + pick(u), 0);
  const sumRows = (pick: (r: (typeof rows)[number]) => number | null) => rows.reduce((n, r) => n + (pick(r) ?? 0), 0);
  expect(rows.filter((r) => r.state !== "refused").map((r) => r.state)).toEqual(billed.map(() => "answered"));
  expect({
    input: sumRows((r) => r.inputTokens),
    output: sumRows((r) => r.outputTokens),
    cacheRead: sumRows((r) => r.cacheReadTokens),
    cacheWrite: sumRows((r) => r.cacheCreationTokens),
  }).toEqual({
    input: sum((u) => u.input_tokens),
    output: sum((u) => u.output_tokens),
    cacheRead: sum((u) => u.cache_read_input_tokens),
    cacheWrite: sum((u) => u.cache_creation_input_tokens),
  });
}
