import type { GeneratedReply } from "./claude.ts";
import { claudeModel } from "./models.ts";

/**
 * What a Claude call costs, estimated from the usage Anthropic reports and the one model table
 * (models.ts). Cache writes are priced by their TTL: Anthropic's `usage.cache_creation` splits
 * them into 5-minute and 1-hour tokens (an hour costs 2× input, 5 minutes 1.25×); usage
 * without the split (a stored reply) is costed as 5-minute writes, the default TTL.
 */

export type Usage = Pick<GeneratedReply, "inputTokens" | "cacheReadTokens" | "cacheCreationTokens" | "outputTokens" | "cacheCreation1hTokens">;

/** The estimated cost in USD, or undefined for a model the table does not know. */
export function estimateCostUsd(model: string, usage: Usage): number | undefined {
  const known = claudeModel(model);
  if (!known) return undefined;
  // The band is the whole request's: a long prompt pays the higher prices on every token, output included.
  const prompt = usage.inputTokens + usage.cacheReadTokens + usage.cacheCreationTokens;
  const price = known.longPrompt && prompt > known.longPrompt.aboveTokens ? known.longPrompt.prices : known.prices;
  const hour = Math.min(usage.cacheCreation1hTokens ?? 0, usage.cacheCreationTokens);
  const microDollars =
    usage.inputTokens * price.input +
    (usage.cacheCreationTokens - hour) * price.cacheWrite5m +
    hour * price.cacheWrite1h +
    usage.cacheReadTokens * price.cacheRead +
    usage.outputTokens * price.output;
  return microDollars / 1_000_000;
}
