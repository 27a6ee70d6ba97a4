import { estimateCostUsd, NO_OVERRIDES, type PriceOverrides, type Usage } from "../ai/pricing.ts";
import type { Db } from "../db/client.ts";

/**
 * The cost ledger (issue 20), per business number and UTC day: every Claude call as the
 * ledger of calls holds it (src/state/claude-calls.ts: a row per call, paid for, priced as it
 * answered), and on each part Meta took, the `pricing` its status webhooks gave, recorded once
 * (src/state/parts.ts, recordPartPricing), and on each other copy of a part sent again, its own
 * (recordCopyPricing). A call counts on the day it was made; a reply on the
 * day it was made; a part on the day Meta took it.
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
    /** Not in the amounts above: Claude calls whose model has no price or whose answer never came (they may be billed), billed messages the rate card does not price. */
    unpriced: { claudeCalls: number; metaMessages: number };
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
  amounts: { claudeUsd: 0, meta: 0, unpriced: { claudeCalls: 0, metaMessages: 0 } },
});

/** A UTC day as YYYY-MM-DD. */
export const utcDay = (at: Date): string => at.toISOString().slice(0, 10);
const startOf = (day: string) => new Date(`${day}T00:00:00.000Z`);
const DAY_MS = 86_400_000;

/** A number's Claude calls of one UTC day, from the ledger (src/state/claude-calls.ts). */
interface CallGroup {
  phoneNumberId: string;
  day: string;
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  /** Priced as each answered. */
  costUsd: number;
  /** Made and never answered (or still in flight): they may be billed, and their usage is unknown. */
  unanswered: number;
  /** Answered by a model that had no price then: priced now, if it has one. */
  unpriced: ({ model: string } & Required<Usage>)[] | null;
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

/** Which rows the three queries read: made from `since` to `until` (exclusive), of one number or (null) of every number. */
interface Rows {
  since: Date;
  until: Date;
  number: string | null;
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
  const rows: Rows = { since: startOf(range.from), until: new Date(startOf(range.to).getTime() + DAY_MS), number: range.phoneNumberId ?? null };
  const [replies, calls, parts] = await Promise.all([replyGroups(db, rows), callGroups(db, rows), partGroups(db, rows)]);

  const days = new Map<string, CostDay>();
  const dayOf = (phoneNumberId: string, day: string) => {
    const key = `${day} ${phoneNumberId}`;
    const found = days.get(key) ?? emptyDay(phoneNumberId, day);
    days.set(key, found);
    return found;
  };

  for (const group of replies) dayOf(group.phoneNumberId, group.day).replies += group.count;
  for (const group of calls) addCalls(dayOf(group.phoneNumberId, group.day), group, prices);
  for (const group of parts) addParts(dayOf(group.phoneNumberId, group.day), group);

  return [...days.values()].sort((a, b) => a.day.localeCompare(b.day) || a.phoneNumberId.localeCompare(b.phoneNumberId));
}

/** Replies made, per number and UTC day: a reply counts on the day it was made. */
function replyGroups(db: Db, { since, until, number }: Rows) {
  return db.$queryRaw<{ phoneNumberId: string; day: string; count: number }[]>`
      SELECT c.phone_number_id AS "phoneNumberId", to_char(r.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*)::int AS count
      FROM replies r JOIN conversations c ON c.id = r.conversation_id
      WHERE r.created_at >= ${since}::timestamptz AND r.created_at < ${until}::timestamptz
        AND (${number}::text IS NULL OR c.phone_number_id = ${number}::text)
      GROUP BY 1, 2`;
}

/** Claude calls per number and UTC day, from the ledger of calls: a call counts on the day it was made. */
function callGroups(db: Db, { since, until, number }: Rows) {
  return db.$queryRaw<CallGroup[]>`
      SELECT phone_number_id AS "phoneNumberId", to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,
             COALESCE(sum(input_tokens), 0)::float8 AS input, COALESCE(sum(output_tokens), 0)::float8 AS output,
             COALESCE(sum(cache_read_tokens), 0)::float8 AS "cacheRead", COALESCE(sum(cache_creation_tokens), 0)::float8 AS "cacheWrite",
             COALESCE(sum(cost_usd), 0)::float8 AS "costUsd", (count(*) FILTER (WHERE state IN ('reserved', 'unknown')))::int AS unanswered,
             jsonb_agg(jsonb_build_object('model', model, 'inputTokens', input_tokens, 'outputTokens', output_tokens, 'cacheReadTokens', cache_read_tokens,
               'cacheCreationTokens', cache_creation_tokens, 'cacheCreation1hTokens', cache_creation_1h_tokens))
               FILTER (WHERE state = 'answered' AND cost_usd IS NULL) AS unpriced
      FROM claude_calls
      WHERE created_at >= ${since}::timestamptz AND created_at < ${until}::timestamptz AND (${number}::text IS NULL OR phone_number_id = ${number}::text)
      GROUP BY 1, 2`;
}

/** Parts Meta took, and other copies of parts it priced, per number, UTC day and pricing category. */
function partGroups(db: Db, { since, until, number }: Rows) {
  return db.$queryRaw<PartGroup[]>`
      SELECT m.phone_number_id AS "phoneNumberId", to_char(m.at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,
             m.category, m.billable, count(*)::int AS count, sum(m.amount)::float8 AS amount,
             (count(*) FILTER (WHERE m.billable AND m.amount IS NULL))::int AS unpriced
      FROM (
        SELECT c.phone_number_id, p.accepted_at AS at, p.pricing_category AS category, p.billable, p.meta_amount AS amount
        FROM outbound_messages p JOIN replies r ON r.id = p.reply_id JOIN conversations c ON c.id = r.conversation_id
        WHERE p.wamid IS NOT NULL AND p.accepted_at >= ${since}::timestamptz AND p.accepted_at < ${until}::timestamptz
          AND (${number}::text IS NULL OR c.phone_number_id = ${number}::text)
        UNION ALL
        -- The other copy of a part sent again: Meta took and bills it too (counted on the day it was priced).
        SELECT c.phone_number_id, o.priced_at, o.pricing_category, o.billable, o.meta_amount
        FROM outbound_copies o JOIN outbound_messages p ON p.id = o.part_id JOIN replies r ON r.id = p.reply_id JOIN conversations c ON c.id = r.conversation_id
        WHERE o.priced_at >= ${since}::timestamptz AND o.priced_at < ${until}::timestamptz
          AND (${number}::text IS NULL OR c.phone_number_id = ${number}::text)
      ) m
      GROUP BY 1, 2, 3, 4`;
}

/** A number's Claude calls of one day added to its day: tokens, what they cost, and what could not be priced. */
function addCalls(day: CostDay, group: CallGroup, prices: PriceOverrides): void {
  day.tokens.input += group.input;
  day.tokens.output += group.output;
  day.tokens.cacheRead += group.cacheRead;
  day.tokens.cacheWrite += group.cacheWrite;
  day.amounts.claudeUsd += group.costUsd;
  day.amounts.unpriced.claudeCalls += group.unanswered;
  // Answered by a model that had no price then: priced now when MODEL_PRICES_FILE has added it.
  for (const call of group.unpriced ?? []) {
    const cost = estimateCostUsd(call.model, call, prices);
    if (cost === undefined) day.amounts.unpriced.claudeCalls++;
    else day.amounts.claudeUsd += cost;
  }
}

/** A number's parts of one day and pricing category added to its day, as Meta priced them. */
function addParts(day: CostDay, group: PartGroup): void {
  day.parts += group.count;
  if (group.category === null || group.billable === null) return; // not priced by Meta (yet)
  const by = group.billable ? day.messages.billable : day.messages.free;
  by[group.category] = (by[group.category] ?? 0) + group.count;
  day.amounts.meta += group.amount ?? 0;
  day.amounts.unpriced.metaMessages += group.unpriced;
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
    total.amounts.unpriced.claudeCalls += day.amounts.unpriced.claudeCalls;
    total.amounts.unpriced.metaMessages += day.amounts.unpriced.metaMessages;
  }
  return total;
}

/** What one conversation cost: its replies' Claude calls, and the messages Meta billed for it. */
export interface ConversationCost {
  claudeUsd: number;
  tokens: CostTotals["tokens"];
  /** In META_RATES_FILE's currency. */
  meta: number;
}

/**
 * One conversation's costs from the same ledger as costsByDay: its replies' Claude calls (priced
 * as each answered, or now when its model had no price then), and its parts and their other
 * copies as Meta priced them.
 */
export async function costOfConversation(db: Db, conversationId: string, prices: PriceOverrides = NO_OVERRIDES): Promise<ConversationCost> {
  const [calls, meta] = await Promise.all([
    db.$queryRaw<(Required<Usage> & { model: string; costUsd: number | null; state: string })[]>`
      SELECT k.model, k.state, k.cost_usd AS "costUsd", k.input_tokens AS "inputTokens", k.output_tokens AS "outputTokens",
             k.cache_read_tokens AS "cacheReadTokens", k.cache_creation_tokens AS "cacheCreationTokens", k.cache_creation_1h_tokens AS "cacheCreation1hTokens"
      FROM claude_calls k JOIN replies r ON r.id = k.reply_id
      WHERE r.conversation_id = ${conversationId}::uuid`,
    db.$queryRaw<{ amount: number }[]>`
      SELECT COALESCE(sum(m.amount), 0)::float8 AS amount FROM (
        SELECT p.meta_amount AS amount FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
        WHERE r.conversation_id = ${conversationId}::uuid AND p.wamid IS NOT NULL
        UNION ALL
        SELECT o.meta_amount FROM outbound_copies o JOIN outbound_messages p ON p.id = o.part_id JOIN replies r ON r.id = p.reply_id
        WHERE r.conversation_id = ${conversationId}::uuid
      ) m`,
  ]);
  const cost: ConversationCost = { claudeUsd: 0, tokens: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }, meta: meta[0]?.amount ?? 0 };
  for (const call of calls) {
    cost.tokens.input += call.inputTokens ?? 0;
    cost.tokens.output += call.outputTokens ?? 0;
    cost.tokens.cacheRead += call.cacheReadTokens ?? 0;
    cost.tokens.cacheWrite += call.cacheCreationTokens ?? 0;
    if (call.costUsd !== null) cost.claudeUsd += call.costUsd;
    else if (call.state === "answered") cost.claudeUsd += estimateCostUsd(call.model, call, prices) ?? 0;
  }
  return cost;
}
