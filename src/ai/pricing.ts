import type { GeneratedReply } from "./claude.ts";
import { type ClaudeModel, claudeModel } from "./models.ts";

/**
 * What a Claude call costs, estimated from the usage Anthropic reports and the one model table
 * (models.ts), or the prices MODEL_PRICES_FILE gives (src/ai/prices-file.ts), which add
 * models or replace a built-in model's prices. Cache writes are priced by their TTL:
 * Anthropic's `usage.cache_creation` splits them into 5-minute and 1-hour tokens (an hour
 * costs 2× input, 5 minutes 1.25×); usage without the split (a stored reply) is costed as
 * 5-minute writes, the default TTL.
 */

export type Usage = Pick<GeneratedReply, "inputTokens" | "cacheReadTokens" | "cacheCreationTokens" | "outputTokens" | "cacheCreation1hTokens">;

/** A model's prices: the table's shape, without what is not about money. */
export type ModelPricing = Pick<ClaudeModel, "prices" | "longPrompt">;

/** MODEL_PRICES_FILE's models by id: they win over the built-in table. */
export type PriceOverrides = ReadonlyMap<string, ModelPricing>;

export const NO_OVERRIDES: PriceOverrides = new Map();

/** Anthropic answers with the dated id ("claude-haiku-4-5-20251001") of the alias asked for. */
const DATED = /-\d{8}$/;

/** The prices of this model (or dated id): the file's, else the table's, else undefined. */
export function pricingOf(model: string, overrides: PriceOverrides = NO_OVERRIDES): ModelPricing | undefined {
  return overrides.get(model) ?? overrides.get(model.replace(DATED, "")) ?? claudeModel(model);
}

/** The estimated cost in USD, or undefined for a model neither the file nor the table knows. */
export function estimateCostUsd(model: string, usage: Usage, overrides: PriceOverrides = NO_OVERRIDES): number | undefined {
  const known = pricingOf(model, overrides);
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

/**
 * The most a call can cost in USD, or undefined for a model without a price: its prompt at the
 * dearest rate a prompt token is billed (an hour's cache write), in the long-prompt band when
 * it may reach it, and `maxTokens` of output.
 */
export function greatestCostUsd(
  model: string,
  bound: { promptTokens: number; maxTokens: number },
  overrides: PriceOverrides = NO_OVERRIDES,
): number | undefined {
  const known = pricingOf(model, overrides);
  if (!known) return undefined;
  const price = known.longPrompt && bound.promptTokens > known.longPrompt.aboveTokens ? known.longPrompt.prices : known.prices;
  const promptRate = Math.max(price.input, price.cacheWrite5m, price.cacheWrite1h, price.cacheRead);
  return (bound.promptTokens * promptRate + bound.maxTokens * price.output) / 1_000_000;
}
