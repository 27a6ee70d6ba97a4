import { estimateCostUsd, NO_OVERRIDES, type PriceOverrides, type Usage } from "../ai/pricing.ts";
import type { Db } from "../db/client.ts";

/**
 * The cost ledger (issue 20), per business number and UTC day, read from what the reply path
 * already stores: Claude's tokens and their price on each reply (its stored steps' when it
 * never got a draft), and on each part Meta took, the `pricing` its status webhooks gave,
 * recorded once (src/state/parts.ts, recordPartPricing). A reply counts on the day it
 * was made; a part on the day Meta took it.
 */

export interface CostDay {
  phoneNumberId: string;
  /** YYYY-MM-DD, in UTC. */
  day: string;
  /** Replies made that day (Claude's and configured answers). */
  replies: number;
  /** WhatsApp messages Meta took that day. */
  parts: number;
  /** Of those, the ones Meta priced, by pricing category: billed, and free (e.g. free_entry_point). */
  messages: { billable: Record<string, number>; free: Record<string, number> };
  tokens: { input: number; output: number; cacheRead: number; cacheWrite: number };
  amounts: {
    claudeUsd: number;
    /** In META_RATES_FILE's currency. */
    meta: number;
    /** Not in the amounts above: replies whose model has no price, billed messages the rate card does not price. */
    unpriced: { claudeReplies: number; metaMessages: number };
  };
}

export type CostTotals = Omit<CostDay, "phoneNumberId" | "day">;

const emptyDay = (phoneNumberId: string, day: string): CostDay => ({
  phoneNumberId,
  day,
  replies: 0,
  parts: 0,
  messages: { billable: {}, free: {} },
  tokens: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
  amounts: { claudeUsd: 0, meta: 0, unpriced: { claudeReplies: 0, metaMessages: 0 } },
});

/** A UTC day as YYYY-MM-DD. */
export const utcDay = (at: Date): string => at.toISOString().slice(0, 10);
const startOf = (day: string) => new Date(`${day}T00:00:00.000Z`);
const DAY_MS = 86_400_000;

interface ReplyRow {
  phoneNumberId: string;
  day: string;
  model: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  cacheReadTokens: number | null;
  cacheCreationTokens: number | null;
  cacheCreation1hTokens: number | null;
  costUsd: number | null;
  /** Only for a reply without stored tokens: its stored Claude steps, each a paid call. */
  steps: ({ model: string } & Required<Usage>)[] | null;
}

interface PartGroup {
  phoneNumberId: string;
  day: string;
  category: string | null;
  billable: boolean | null;
  count: number;
  amount: number | null;
  unpriced: number;
}

/**
 * Every number's costs for each UTC day from `from` to `to` (inclusive, YYYY-MM-DD), with a day
 * row only where something happened, sorted by day then number.
 */
export async function costsByDay(
  db: Db,
  range: { from: string; to: string; phoneNumberId?: string | undefined },
  prices: PriceOverrides = NO_OVERRIDES,
): Promise<CostDay[]> {
  const since = startOf(range.from);
  const until = new Date(startOf(range.to).getTime() + DAY_MS);
  const number = range.phoneNumberId ?? null;
  const [replies, parts] = await Promise.all([
    db.$queryRaw<ReplyRow[]>`
      SELECT c.phone_number_id AS "phoneNumberId", to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, r.model,
             r.input_tokens AS "inputTokens", r.output_tokens AS "outputTokens", r.cache_read_tokens AS "cacheReadTokens",
             r.cache_creation_tokens AS "cacheCreationTokens", r.cache_creation_1h_tokens AS "cacheCreation1hTokens", r.claude_cost_usd AS "costUsd",
             CASE WHEN r.input_tokens IS NULL THEN (
               SELECT jsonb_agg(jsonb_build_object('model', s.model, 'inputTokens', s.input_tokens, 'outputTokens', s.output_tokens,
                 'cacheReadTokens', s.cache_read_tokens, 'cacheCreationTokens', s.cache_creation_tokens, 'cacheCreation1hTokens', s.cache_creation_1h_tokens))
               FROM claude_steps s WHERE s.reply_id = r.id) END AS steps
      FROM replies r JOIN conversations c ON c.id = r.conversation_id
      WHERE r.created_at >= ${since}::timestamptz AND r.created_at < ${until}::timestamptz
        AND (${number}::text IS NULL OR c.phone_number_id = ${number}::text)`,
    db.$queryRaw<PartGroup[]>`
      SELECT c.phone_number_id AS "phoneNumberId", to_char(p.accepted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,
             p.pricing_category AS category, p.billable, count(*)::int AS count, sum(p.meta_amount)::float8 AS amount,
             (count(*) FILTER (WHERE p.billable AND p.meta_amount IS NULL))::int AS unpriced
      FROM outbound_messages p JOIN replies r ON r.id = p.reply_id JOIN conversations c ON c.id = r.conversation_id
      WHERE p.wamid IS NOT NULL AND p.accepted_at >= ${since}::timestamptz AND p.accepted_at < ${until}::timestamptz
        AND (${number}::text IS NULL OR c.phone_number_id = ${number}::text)
      GROUP BY 1, 2, 3, 4`,
  ]);

  const days = new Map<string, CostDay>();
  const dayOf = (phoneNumberId: string, day: string) => {
    const key = `${day} ${phoneNumberId}`;
    const found = days.get(key) ?? emptyDay(phoneNumberId, day);
    days.set(key, found);
    return found;
  };

  for (const reply of replies) {
    const day = dayOf(reply.phoneNumberId, reply.day);
    day.replies++;
    const calls = claudeCalls(reply);
    if (calls.length === 0) continue;
    for (const call of calls) {
      day.tokens.input += call.inputTokens;
      day.tokens.output += call.outputTokens;
      day.tokens.cacheRead += call.cacheReadTokens;
      day.tokens.cacheWrite += call.cacheCreationTokens;
    }
    // Priced as it answered; else (a reply from before the ledger, a draft kept through an outage, steps alone) priced now.
    const costs = reply.costUsd !== null ? [reply.costUsd] : calls.map((call) => estimateCostUsd(call.model, call, prices));
    if (costs.some((cost) => cost === undefined)) day.amounts.unpriced.claudeReplies++;
    day.amounts.claudeUsd += costs.reduce<number>((sum, cost) => sum + (cost ?? 0), 0);
  }

  for (const group of parts) {
    const day = dayOf(group.phoneNumberId, group.day);
    day.parts += group.count;
    if (group.category === null || group.billable === null) continue; // not priced by Meta (yet)
    const by = group.billable ? day.messages.billable : day.messages.free;
    by[group.category] = (by[group.category] ?? 0) + group.count;
    day.amounts.meta += group.amount ?? 0;
    day.amounts.unpriced.metaMessages += group.unpriced;
  }

  return [...days.values()].sort((a, b) => a.day.localeCompare(b.day) || a.phoneNumberId.localeCompare(b.phoneNumberId));
}

/** A reply's paid Claude calls: the reply's summed usage when it has a draft, else its stored steps. */
function claudeCalls(reply: ReplyRow): ({ model: string } & Usage)[] {
  if (reply.inputTokens !== null && reply.model !== null) {
    return [
      {
        model: reply.model,
        inputTokens: reply.inputTokens,
        outputTokens: reply.outputTokens ?? 0,
        cacheReadTokens: reply.cacheReadTokens ?? 0,
        cacheCreationTokens: reply.cacheCreationTokens ?? 0,
        cacheCreation1hTokens: reply.cacheCreation1hTokens ?? 0,
      },
    ];
  }
  return reply.steps ?? [];
}

/** The days' figures added up. */
export function totalOf(days: readonly CostDay[]): CostTotals {
  const { phoneNumberId: _n, day: _d, ...total } = emptyDay("", "");
  for (const day of days) {
    total.replies += day.replies;
    total.parts += day.parts;
    for (const kind of ["billable", "free"] as const) {
      for (const [category, count] of Object.entries(day.messages[kind])) total.messages[kind][category] = (total.messages[kind][category] ?? 0) + count;
    }
    for (const kind of ["input", "output", "cacheRead", "cacheWrite"] as const) total.tokens[kind] += day.tokens[kind];
    total.amounts.claudeUsd += day.amounts.claudeUsd;
    total.amounts.meta += day.amounts.meta;
    total.amounts.unpriced.claudeReplies += day.amounts.unpriced.claudeReplies;
    total.amounts.unpriced.metaMessages += day.amounts.unpriced.metaMessages;
  }
  return total;
}

/**
 * What one business number has spent on the UTC day of `now`, for a daily budget: Meta's
 * amount in the rate card's currency and Claude's in USD (add them only where the card is in
 * USD), with what could not be priced.
 */
export async function spentToday(
  db: Db,
  phoneNumberId: string,
  now: Date,
  prices: PriceOverrides = NO_OVERRIDES,
): Promise<{ day: string; claudeUsd: number; meta: number; unpriced: CostDay["amounts"]["unpriced"] }> {
  const day = utcDay(now);
  const [today] = await costsByDay(db, { from: day, to: day, phoneNumberId }, prices);
  const { amounts } = today ?? emptyDay(phoneNumberId, day);
  return { day, claudeUsd: amounts.claudeUsd, meta: amounts.meta, unpriced: amounts.unpriced };
}
