import type { GeneratedReply } from "./claude.ts";

/**
 * What a Claude call costs, estimated from the usage Anthropic reports: the one price table.
 * USD per million tokens, from https://platform.claude.com/docs/en/about-claude/pricing
 * (checked 2026-12). Cache writes are the 5-minute kind: our `cache_control` asks for the
 * default TTL. A model missing here gets no cost rather than a guessed one; add it here.
 */
interface Price {
  input: number;
  cacheWrite: number;
  cacheRead: number;
  output: number;
}

const PER_MILLION_TOKENS = new Map<string, Price>([
  ["claude-haiku-4-5", { input: 1, cacheWrite: 1.25, cacheRead: 0.1, output: 5 }],
  ["claude-sonnet-4-5", { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }],
  ["claude-sonnet-4-6", { input: 3, cacheWrite: 3.75, cacheRead: 0.3, output: 15 }],
  ["claude-opus-4-5", { input: 5, cacheWrite: 6.25, cacheRead: 0.5, output: 25 }],
  ["claude-opus-4-6", { input: 5, cacheWrite: 6.25, cacheRead: 0.5, output: 25 }],
]);

/** Anthropic answers with the dated id ("claude-haiku-4-5-20251001") of the alias we asked for. */
const DATED = /-\d{8}$/;

export type Usage = Pick<GeneratedReply, "inputTokens" | "cacheReadTokens" | "cacheCreationTokens" | "outputTokens">;

/** The estimated cost in USD, or undefined for a model the table does not know. */
export function estimateCostUsd(model: string, usage: Usage): number | undefined {
  const price = PER_MILLION_TOKENS.get(model.replace(DATED, ""));
  if (!price) return undefined;
  const microDollars =
    usage.inputTokens * price.input +
    usage.cacheCreationTokens * price.cacheWrite +
    usage.cacheReadTokens * price.cacheRead +
    usage.outputTokens * price.output;
  return microDollars / 1_000_000;
}
