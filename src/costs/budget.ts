import { PermanentError } from "../errors.ts";

/**
 * A number's daily budget (`dailyBudget: { usd }` in PHONE_NUMBERS_FILE) counts Claude's calls,
 * in USD: each call reserves its greatest cost before it is made (src/state/claude-calls.ts),
 * and once the UTC day's calls reach the budget no new one is made. The reply becomes a dead
 * letter of its own kind (`budget`), so the customer gets the holding reply (once that day) and
 * staff are told (once that day: src/notify/batches.ts). Meta's charges are in the rate card's
 * currency and never added to it.
 */
export function budgetSpent(budgetUsd: number, spent: { spentUsd: number; day: string }): PermanentError {
  return new PermanentError({
    source: "budget",
    code: "daily_budget",
    reason: `The number's daily budget (${budgetUsd} USD for Claude) is spent: ${spent.spentUsd.toFixed(4)} USD on ${spent.day} (UTC); new answers wait for a person until the next day`,
    detail: { budgetUsd, spentUsd: spent.spentUsd, day: spent.day },
  });
}
