import { z } from "zod";
import { readJsonFile, reportIssues } from "../config/files.ts";
import type { MetaRates } from "./meta-rates.ts";

/**
 * META_RATES_FILE (issue 20): Meta's rate card, by pricing category and the recipient's country
 * calling code. Checked at start-up, every problem named with its place in the file.
 */

/** `*` prices every market the card does not list, a recipient with no phone number (a BSUID alone) among them. */
const marketKey = z.string().regex(/^(\d{1,4}|\*)$/, { error: 'a country calling code (1 to 4 digits, e.g. "44") or "*"' });
const metaRatesSchema = z.record(
  z.string().regex(/^[a-z_]+$/, { error: 'a pricing category in lower case, e.g. "service"' }),
  z.record(marketKey, z.number({ error: "must be a price: a number" }).finite().nonnegative({ error: "must not be negative" })),
);

/** Meta's rate card: `{ "<category>": { "<country calling code>": price } }`, in the card's own currency. */
export function loadMetaRates(path: string, problems: string[]): MetaRates | undefined {
  const raw = readJsonFile("META_RATES_FILE", path, problems);
  if (raw === undefined) return undefined;
  const parsed = metaRatesSchema.safeParse(raw);
  if (!parsed.success) {
    parsed.error.issues.forEach(reportIssues("META_RATES_FILE", problems));
    return undefined;
  }
  if (Object.keys(parsed.data).length === 0) {
    problems.push('META_RATES_FILE lists no category: give at least one, e.g. { "service": { "44": 0.01 } }, or unset it to count messages only');
    return undefined;
  }
  return new Map(Object.entries(parsed.data).map(([category, markets]) => [category, new Map(Object.entries(markets))]));
}
