import { describe, expect, it } from "vitest";
import { knownModels } from "../src/ai/models.ts";
import { estimateCostUsd } from "../src/ai/pricing.ts";

/** Issue 19, caching that really caches: what a call costs, from the one model table. */

const million = 1_000_000;
const nothing = { inputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0, outputTokens: 0 };

describe("the cost of a Claude call", () => {
  it("prices cache writes by their TTL: an hour at 2× input, 5 minutes at 1.25×", () => {
    // 30,000 written, 10,000 of them for an hour. Haiku 5.5: $0.125 a million for 5 minutes, $0.20 for an hour.
    const written = { ...nothing, cacheCreationTokens: 30_000, cacheCreation1hTokens: 10_000 };
    expect(estimateCostUsd("claude-haiku-5-5", written)).toBeCloseTo((20_000 * 0.125 + 10_000 * 0.2) / million, 12);
    // Sonnet 4.6: $3.75 and $6.
    expect(estimateCostUsd("claude-sonnet-4-6", written)).toBeCloseTo((20_000 * 3.75 + 10_000 * 6) / million, 12);
  });

  it("costs writes Anthropic did not split (a stored reply) as 5-minute ones, the default TTL", () => {
    expect(estimateCostUsd("claude-haiku-4-5", { ...nothing, cacheCreationTokens: million })).toBeCloseTo(1.25, 12);
  });

  it("bills a Haiku 5.5 prompt over 100,000 tokens (input, cache reads and writes) at the higher prices on every token, output included", () => {
    const short = { inputTokens: 40_000, cacheReadTokens: 50_000, cacheCreationTokens: 10_000, cacheCreation1hTokens: 10_000, outputTokens: 1000 };
    const long = { ...short, inputTokens: 40_001 };
    expect(estimateCostUsd("claude-haiku-5-5", short)).toBeCloseTo((40_000 * 0.1 + 50_000 * 0.01 + 10_000 * 0.2 + 1000 * 0.5) / million, 12);
    expect(estimateCostUsd("claude-haiku-5-5", long)).toBeCloseTo((40_001 * 0.5 + 50_000 * 0.05 + 10_000 * 1 + 1000 * 2.5) / million, 12);
    // The other models have one band.
    expect(estimateCostUsd("claude-sonnet-5-5", { ...nothing, inputTokens: 500_000 })).toBeCloseTo(1, 12);
  });

  it("prices a dated model id as its alias, and gives no cost to a model it does not know", () => {
    const usage = { ...nothing, inputTokens: million, outputTokens: million };
    expect(estimateCostUsd("claude-haiku-4-5-20251001", usage)).toBe(6);
    expect(estimateCostUsd("claude-sonnet-4-5", usage)).toBe(18);
    // Haiku 5.5 prices whole millions in its long band: $0.50 in, $2.50 out.
    expect(estimateCostUsd("claude-haiku-5-5", usage)).toBeCloseTo(3, 12);
    expect(estimateCostUsd("claude-unknown-9", usage)).toBeUndefined();
    expect(estimateCostUsd("constructor", usage)).toBeUndefined();
  });

  it("every model's prices keep Anthropic's ratios: 5-minute writes 1.25×, hour writes 2× input, reads at most 0.1×", () => {
    for (const { id, prices, longPrompt } of knownModels()) {
      for (const p of [prices, ...(longPrompt ? [longPrompt.prices] : [])]) {
        expect(p.cacheWrite5m / p.input, id).toBeCloseTo(1.25, 12);
        expect(p.cacheWrite1h / p.input, id).toBeCloseTo(2, 12);
        expect(p.cacheRead / p.input, id).toBeLessThanOrEqual(0.1 + 1e-12);
      }
    }
  });
});
