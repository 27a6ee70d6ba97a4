import type { PriceOverrides } from "../ai/pricing.ts";
import type { Config } from "../config/config.ts";
import type { Db } from "../db/client.ts";
import { PermanentError } from "../errors.ts";
import { spentToday } from "./ledger.ts";

/**
 * A number's daily budget (`dailyBudget` in PHONE_NUMBERS_FILE): once the UTC day's spend,
 * Meta's amount in the rate card's currency plus Claude's USD, reaches it, a new answer is not
 * asked of Claude. The reply becomes a dead letter of its own kind (`budget`), so the customer
 * gets the holding reply and staff are told (once that day: src/notify/batches.ts).
 */
export async function assertWithinBudget(
  db: Db,
  settings: { numbers: Config["numbers"]; modelPrices?: PriceOverrides | undefined },
  phoneNumberId: string,
  now: Date,
): Promise<void> {
  const budget = settings.numbers.get(phoneNumberId)?.dailyBudget;
  if (budget === undefined) return;
  const spent = await spentToday(db, phoneNumberId, now, settings.modelPrices);
  const total = spent.claudeUsd + spent.meta;
  if (total < budget) return;
  throw new PermanentError({
    source: "budget",
    code: "daily_budget",
    reason: `The number's daily budget (${budget}) is spent: ${total.toFixed(4)} on ${spent.day} (UTC); new answers wait for a person until the next day`,
    detail: { budget, spent: total, day: spent.day, claudeUsd: spent.claudeUsd, meta: spent.meta },
  });
}
