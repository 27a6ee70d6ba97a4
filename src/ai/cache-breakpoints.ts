import type Anthropic from "@anthropic-ai/sdk";
import { claudeModel } from "./models.ts";

/**
 * Where cache breakpoints pay (issue 19, "caching that really caches"). Anthropic caches a
 * prompt's prefix up to a `cache_control` breakpoint only when that prefix holds at least the
 * model's minimum (models.ts): below it nothing is cached and nothing says so. A request takes
 * at most 4 breakpoints, and a 1-hour one must not come after a 5-minute one (tools, then
 * system, then messages); Anthropic answers 400 to either mistake.
 * (https://platform.claude.com/docs/en/build-with-claude/prompt-caching, checked 2026-12-02.)
 *
 * The request assembly estimates each candidate prefix with `estimateTokens` and asks
 * `placeBreakpoints` which to mark. The fake Messages API (sim/anthropic/) counts with the
 * same estimate and applies the same minimums, so a test sees what this module decided.
 */

export type CacheTtl = "5m" | "1h";

export const CACHE_TTL_MS: Readonly<Record<CacheTtl, number>> = { "5m": 5 * 60_000, "1h": 60 * 60_000 };

export const MAX_CACHE_BREAKPOINTS = 4;

/** Characters a token for a model the table does not know: the older tokenizer's ~4. */
const UNKNOWN_CHARS_PER_TOKEN = 4;

/**
 * Tokens in `text` (or in that many characters) on `model`, before Anthropic has counted them:
 * the model's characters a token, rounded up. Rough (the newer tokenizer counts ~30% more than
 * the older for the same text, and scripts other than Latin count more still); Anthropic's
 * `usage` is the truth once it answers.
 */
export function estimateTokens(model: string, text: string | number): number {
  const chars = typeof text === "number" ? text : text.length;
  return Math.ceil(chars / (claudeModel(model)?.charsPerToken ?? UNKNOWN_CHARS_PER_TOKEN));
}

/**
 * Whether a breakpoint whose prefix (everything before it and the block it marks, tools and
 * system included) holds `prefixTokens` can cache on `model`. A model the table does not know
 * gets the benefit of the doubt: a breakpoint that caches nothing costs nothing.
 */
export function canCacheAt(model: string, prefixTokens: number): boolean {
  return prefixTokens >= (claudeModel(model)?.minCacheableTokens ?? 0);
}

export interface BreakpointCandidate {
  /** The estimated tokens of the prompt up to and including the block this breakpoint would mark. */
  prefixTokens: number;
  /** How long its entry should live; 5 minutes (Anthropic's default) unless an hour is asked for. */
  ttl?: CacheTtl;
}

export interface PlacedBreakpoint {
  /** The candidate's index in the list given. */
  index: number;
  ttl: CacheTtl;
}

/**
 * Which of `candidates` (in prompt order: tools, system, messages) to mark, and for how long:
 * - a candidate whose prefix is below the model's minimum is left out: it would cache nothing
 *   and take one of the four places;
 * - every candidate before the last 1-hour one is made 1-hour too. Anthropic wants the longer
 *   TTL first, and it bills writes up to the last 1-hour breakpoint at the 1-hour price anyway
 *   (its positions A, B, C), so this costs nothing more than the caller's own 1-hour one;
 * - past four, the earliest are dropped, except the last 1-hour one: a later breakpoint's
 *   entry covers everything before it, and the long-lived entry is the one that outlasts a
 *   quiet conversation. A caller that wants another trade offers fewer candidates.
 */
export function placeBreakpoints(model: string, candidates: readonly BreakpointCandidate[], max = MAX_CACHE_BREAKPOINTS): PlacedBreakpoint[] {
  const kept = candidates.flatMap((c, index) => (canCacheAt(model, c.prefixTokens) ? [{ index, ttl: c.ttl ?? "5m" }] : []));
  const lastHour = kept.findLastIndex((p) => p.ttl === "1h");
  const ordered = kept.map((p, i): PlacedBreakpoint => (i <= lastHour ? { ...p, ttl: "1h" } : p));
  const longLived = ordered[lastHour];
  while (ordered.length > max)
    ordered.splice(
      ordered.findIndex((p) => p !== longLived),
      1,
    );
  return ordered;
}

/** The `cache_control` for a TTL: the 5-minute default is left implicit, as Anthropic's examples do. */
export function cacheControl(ttl: CacheTtl = "5m"): Anthropic.CacheControlEphemeral {
  return ttl === "1h" ? { type: "ephemeral", ttl: "1h" } : { type: "ephemeral" };
}
