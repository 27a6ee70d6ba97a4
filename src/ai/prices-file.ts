import { z } from "zod";
import { readJsonFile, reportIssues } from "../config/files.ts";
import type { ModelPricing, PriceOverrides } from "./pricing.ts";

/**
 * MODEL_PRICES_FILE (issue 20): Claude models added to the built-in prices of models.ts, or
 * their prices replaced, in USD per million tokens. Checked at start-up, every problem named
 * with its place in the file.
 */

const usdPerMillion = z
  .number({ error: "must be a number: USD per million tokens" })
  .finite()
  .nonnegative({ error: "must not be negative: USD per million tokens" });

const tokenPrices = z
  .object({
    input: usdPerMillion,
    output: usdPerMillion,
    // Anthropic's multipliers of input when not given: 1.25× (5-minute writes), 2× (1-hour writes), 0.1× (reads).
    cacheWrite5m: usdPerMillion.optional(),
    cacheWrite1h: usdPerMillion.optional(),
    cacheRead: usdPerMillion.optional(),
  })
  .strict();

const modelPricesSchema = z.record(
  z.string().regex(/^[a-z0-9][a-z0-9.-]*$/i, { error: "a model id such as claude-haiku-5-5" }),
  tokenPrices.extend({ longPrompt: z.object({ aboveTokens: z.number().int().positive(), prices: tokenPrices }).strict().optional() }).strict(),
);

type Prices = z.output<typeof tokenPrices>;
const withMultipliers = (p: Prices) => ({
  input: p.input,
  output: p.output,
  cacheWrite5m: p.cacheWrite5m ?? p.input * 1.25,
  cacheWrite1h: p.cacheWrite1h ?? p.input * 2,
  cacheRead: p.cacheRead ?? p.input * 0.1,
});

/** Models' prices in USD per million tokens, by model id: `{ "claude-x": { "input": 1, "output": 5 } }`. */
export function loadModelPrices(path: string, problems: string[]): PriceOverrides {
  const raw = readJsonFile("MODEL_PRICES_FILE", path, problems);
  if (raw === undefined) return new Map();
  const parsed = modelPricesSchema.safeParse(raw);
  if (!parsed.success) {
    parsed.error.issues.forEach(reportIssues("MODEL_PRICES_FILE", problems));
    return new Map();
  }
  return new Map(
    Object.entries(parsed.data).map(([id, { longPrompt, ...prices }]): [string, ModelPricing] => [
      id,
      {
        prices: withMultipliers(prices),
        ...(longPrompt ? { longPrompt: { aboveTokens: longPrompt.aboveTokens, prices: withMultipliers(longPrompt.prices) } } : {}),
      },
    ]),
  );
}
