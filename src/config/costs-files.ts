import { readFileSync } from "node:fs";
import { z } from "zod";
import type { ModelPricing, PriceOverrides } from "../ai/pricing.ts";
import type { MetaRates } from "../costs/meta-rates.ts";

/**
 * The cost ledger's two price lists (issue 20): MODEL_PRICES_FILE adds Claude models or
 * overrides the built-in prices of src/ai/models.ts; META_RATES_FILE is Meta's rate card, by
 * pricing category and the recipient's country calling code. Both are checked at start-up,
 * every problem named with its place in the file.
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

/** `*` prices every market the card does not list, a recipient with no phone number (a BSUID alone) among them. */
const marketKey = z.string().regex(/^(\d{1,4}|\*)$/, { error: 'a country calling code (1 to 4 digits, e.g. "44") or "*"' });
const metaRatesSchema = z.record(
  z.string().regex(/^[a-z_]+$/, { error: 'a pricing category in lower case, e.g. "service"' }),
  z.record(marketKey, z.number({ error: "must be a price: a number" }).finite().nonnegative({ error: "must not be negative" })),
);

type Prices = z.output<typeof tokenPrices>;
const withMultipliers = (p: Prices) => ({
  input: p.input,
  output: p.output,
  cacheWrite5m: p.cacheWrite5m ?? p.input * 1.25,
  cacheWrite1h: p.cacheWrite1h ?? p.input * 2,
  cacheRead: p.cacheRead ?? p.input * 0.1,
});

function readJson(variable: string, path: string, problems: string[]): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    problems.push(`${variable} cannot be read as JSON: ${(error as Error).message}`);
    return undefined;
  }
}

/** Each issue with its place in the file; a bad key says what a key must be (zod nests that message). */
const named = (variable: string, problems: string[]) => (issue: z.core.$ZodIssue) => {
  const message = issue.code === "invalid_key" ? (issue.issues[0]?.message ?? issue.message) : issue.message;
  problems.push(`${variable} ${issue.path.join(".") || "(root)"}: ${message}`);
};

/** Models' prices in USD per million tokens, by model id: `{ "claude-x": { "input": 1, "output": 5 } }`. */
export function loadModelPrices(path: string, problems: string[]): PriceOverrides {
  const raw = readJson("MODEL_PRICES_FILE", path, problems);
  if (raw === undefined) return new Map();
  const parsed = modelPricesSchema.safeParse(raw);
  if (!parsed.success) {
    parsed.error.issues.forEach(named("MODEL_PRICES_FILE", problems));
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

/** Meta's rate card: `{ "<category>": { "<country calling code>": price } }`, in the card's own currency. */
export function loadMetaRates(path: string, problems: string[]): MetaRates | undefined {
  const raw = readJson("META_RATES_FILE", path, problems);
  if (raw === undefined) return undefined;
  const parsed = metaRatesSchema.safeParse(raw);
  if (!parsed.success) {
    parsed.error.issues.forEach(named("META_RATES_FILE", problems));
    return undefined;
  }
  if (Object.keys(parsed.data).length === 0) {
    problems.push('META_RATES_FILE lists no category: give at least one, e.g. { "service": { "44": 0.01 } }, or unset it to count messages only');
    return undefined;
  }
  return new Map(Object.entries(parsed.data).map(([category, markets]) => [category, new Map(Object.entries(markets))]));
}
