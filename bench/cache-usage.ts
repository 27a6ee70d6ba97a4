import { estimateCostUsd } from "../src/ai/pricing.ts";

/** One Claude call's usage as stored (a reply row, or a claude_steps row), for benchmark 3. */
export interface CallUsage {
  input: number;
  read: number;
  /** Cache-write tokens, both TTLs. */
  written: number;
  /** Of which written for an hour. */
  written1h: number;
  output: number;
}

/** The call's prompt: input + cache_read + cache_write tokens. */
export const promptTokens = (c: CallUsage) => c.input + c.read + c.written;

/** cache_read ÷ prompt, summed over the calls: the dashboard's share. */
export const cachedShare = (calls: readonly CallUsage[]) =>
  calls.reduce((n, c) => n + c.read, 0) /
  Math.max(
    1,
    calls.reduce((n, c) => n + promptTokens(c), 0),
  );

/**
 * Every call costed as billed (1-hour writes at their own price, 2× input, not the 5-minute
 * 1.25×), and as it would be with nothing cached (every prompt token plain input); each call
 * in its own price band.
 */
export function cachedAndUncachedUsd(model: string, calls: readonly CallUsage[]): { cached: number; uncached: number } {
  const usd = (usage: Parameters<typeof estimateCostUsd>[1]) => estimateCostUsd(model, usage) ?? Number.NaN;
  return calls.reduce(
    (sum, c) => ({
      cached:
        sum.cached +
        usd({ inputTokens: c.input, cacheReadTokens: c.read, cacheCreationTokens: c.written, cacheCreation1hTokens: c.written1h, outputTokens: c.output }),
      uncached: sum.uncached + usd({ inputTokens: promptTokens(c), cacheReadTokens: 0, cacheCreationTokens: 0, outputTokens: c.output }),
    }),
    { cached: 0, uncached: 0 },
  );
}
