import { describe, expect, it } from "vitest";
import { cacheControl, canCacheAt, estimateTokens, placeBreakpoints } from "../src/ai/cache-breakpoints.ts";

/** Issue 19, caching that really caches: a breakpoint is placed only where it can cache. */

describe("where a cache breakpoint pays", () => {
  it("a prefix below the model's minimum cannot cache; at the minimum it can (Haiku 5.5: 512 tokens, Haiku 4.5: 4,096)", () => {
    expect(canCacheAt("claude-haiku-5-5", 511)).toBe(false);
    expect(canCacheAt("claude-haiku-5-5", 512)).toBe(true);
    expect(canCacheAt("claude-haiku-4-5", 4095)).toBe(false);
    expect(canCacheAt("claude-haiku-4-5-20251001", 4096)).toBe(true);
    expect(canCacheAt("claude-sonnet-4-6", 1024)).toBe(true);
    // Unknown: a breakpoint that caches nothing costs nothing, so it is not refused.
    expect(canCacheAt("claude-unknown-9", 1)).toBe(true);
  });

  it("estimates tokens with the model's tokenizer: ~3 characters a token on the 5.5 models, ~4 before", () => {
    expect(estimateTokens("claude-haiku-5-5", "x".repeat(3000))).toBe(1000);
    expect(estimateTokens("claude-haiku-4-5", "x".repeat(3000))).toBe(750);
    expect(estimateTokens("claude-haiku-4-5", 4001)).toBe(1001); // a length, rounded up
    expect(estimateTokens("claude-unknown-9", "abcd")).toBe(1);
  });

  it("leaves out candidates that would cache nothing, keeping their order", () => {
    const placed = placeBreakpoints("claude-haiku-5-5", [{ prefixTokens: 300 }, { prefixTokens: 700 }, { prefixTokens: 900, ttl: "5m" }]);
    expect(placed).toEqual([
      { index: 1, ttl: "5m" },
      { index: 2, ttl: "5m" },
    ]);
    expect(placeBreakpoints("claude-haiku-4-5", [{ prefixTokens: 300 }, { prefixTokens: 900 }])).toEqual([]);
  });

  it("puts the hour first: a 5-minute candidate before a 1-hour one becomes 1-hour, which Anthropic bills the same", () => {
    const placed = placeBreakpoints("claude-haiku-5-5", [
      { prefixTokens: 600 },
      { prefixTokens: 2000, ttl: "1h" },
      { prefixTokens: 2500 },
      { prefixTokens: 2600, ttl: "1h" },
      { prefixTokens: 2700 },
    ]);
    expect(placed.map((p) => p.ttl)).toEqual(["1h", "1h", "1h", "5m"]);
    expect(placed.map((p) => p.index)).toEqual([1, 2, 3, 4]);
  });

  it("marks at most four, dropping the earliest but keeping the last hour-long one", () => {
    const candidates = [
      { prefixTokens: 600, ttl: "1h" as const },
      { prefixTokens: 700 },
      { prefixTokens: 800 },
      { prefixTokens: 900 },
      { prefixTokens: 1000 },
      { prefixTokens: 1100 },
    ];
    expect(placeBreakpoints("claude-haiku-5-5", candidates)).toEqual([
      { index: 0, ttl: "1h" },
      { index: 3, ttl: "5m" },
      { index: 4, ttl: "5m" },
      { index: 5, ttl: "5m" },
    ]);
    // No hour-long one: the four latest.
    expect(placeBreakpoints("claude-haiku-5-5", candidates.slice(1)).map((p) => p.index)).toEqual([1, 2, 3, 4]);
  });

  it("writes the 5-minute default as Anthropic's plain ephemeral cache_control, the hour with its ttl", () => {
    expect(cacheControl()).toEqual({ type: "ephemeral" });
    expect(cacheControl("1h")).toEqual({ type: "ephemeral", ttl: "1h" });
  });
});
