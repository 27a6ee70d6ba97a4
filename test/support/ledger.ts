import { expect } from "vitest";
import type { Db } from "../../src/db/client.ts";
import type { BilledUsage } from "./fake-anthropic.ts";

/**
 * Issue 32.6, the strict form (ledger-reading.ts has the rule every test is held to at its
 * end), for a test where every call's answer was read: one settled row per answer, the same tokens, by kind.
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
