/**
 * What a message Meta bills costs, by Meta's rate card (META_RATES_FILE): a price per pricing
 * category and recipient market. Meta sends no amount in its status webhooks, only the
 * category (WHATSAPP.md §12); the market is the recipient's country, read from their phone
 * number by its longest calling-code prefix among those the card lists for that category. A recipient known by a
 * BSUID alone has no number: their market is unknown, priced only by the card's `*`.
 */

/** category → market (a calling code, or `*` for any other) → price, in the card's currency. */
export type MetaRates = ReadonlyMap<string, ReadonlyMap<string, number>>;

export const UNKNOWN_MARKET = "unknown";

/**
 * The recipient's market for a message of `category`: the longest calling code the card lists
 * for that category that starts their number, else unknown. Within the category: a card that
 * prices `1` for service and `1242` for marketing prices a service message to +1 242 as `1`.
 */
export function marketOf(rates: MetaRates | undefined, category: string, recipientPhone: string | undefined): string {
  const digits = recipientPhone?.replace(/\D/g, "");
  const markets = rates?.get(category);
  if (!markets || !digits) return UNKNOWN_MARKET;
  let best: string | undefined;
  for (const code of markets.keys()) if (code !== "*" && digits.startsWith(code) && code.length > (best?.length ?? 0)) best = code;
  return best ?? UNKNOWN_MARKET;
}

/** What Meta bills for one message: 0 when free, the card's price when it has one, else undefined (counted, not priced). */
export function metaAmount(rates: MetaRates | undefined, pricing: { billable: boolean; category: string }, market: string): number | undefined {
  if (!pricing.billable) return 0;
  const markets = rates?.get(pricing.category);
  return markets?.get(market) ?? markets?.get("*");
}

/**
 * Whether Meta bills the message: `type` says it since per-message pricing (`regular` is
 * billed; `free_customer_service`, `free_entry_point` are not); older webhooks say only the
 * deprecated `billable`.
 */
export function isBillable(pricing: { billable?: boolean | undefined; type?: string | undefined }): boolean {
  if (pricing.type !== undefined) return pricing.type === "regular";
  return pricing.billable === true;
}
