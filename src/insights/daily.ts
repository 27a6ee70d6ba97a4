import { type Db, Prisma } from "../db/client.ts";
import { CSAT_SKIP_REASON } from "../messages/csat.ts";

/**
 * Whether the bot helps, per UTC day (issue 33), counted by SQL over what is stored, never by
 * counters of their own that could disagree with it. Each query groups by day and, with the
 * same statement, over the whole range (a row whose day is null): a conversation active on two
 * days counts on each day, and once in the range's total.
 */

export interface Range {
  /** Inclusive, YYYY-MM-DD, in UTC. */
  from: string;
  to: string;
  phoneNumberId?: string | undefined;
}

/** The figures of one day, or of the whole range (`day` null). */
export interface DailyFigures {
  day: string | null;
  conversations: number;
  inbound: number;
  answeredByBot: number;
  handedOff: number;
  deadLettered: number;
  resolvedByBot: number;
  firstReplyMs: { p50: number | null; p95: number | null };
  delivered: number;
  read: number;
}

const DAY_MS = 86_400_000;

/** The range as timestamps: from the first day's midnight to the midnight after the last. */
export function boundsOf(range: Range): { since: Date; until: Date; number: string | null } {
  return {
    since: new Date(`${range.from}T00:00:00.000Z`),
    until: new Date(Date.parse(`${range.to}T00:00:00.000Z`) + DAY_MS),
    number: range.phoneNumberId ?? null,
  };
}

/** A timestamp's UTC day, as YYYY-MM-DD. */
const dayOf = (column: string) => Prisma.sql`to_char(${Prisma.raw(column)} AT TIME ZONE 'UTC', 'YYYY-MM-DD')`;

/**
 * A message the customer wrote (inbound_messages `m`): not a reaction, a deletion (nor the erased
 * row it leaves), a system notice (a changed number), a chat opened without a word
 * (`request_welcome`), an edit folded into the message it edits, or a tap on a CSAT button (a
 * rating, counted under `csat`). Echoes of the Business app and status webhooks are never
 * stored here (they are replies and parts).
 */
export const CUSTOMER_MESSAGE = Prisma.sql`(m.type NOT IN ('reaction', 'revoke', 'deleted', 'system', 'request_welcome')
  AND NOT (m.type = 'edit' AND m.skip_reason IS NOT NULL) AND NOT starts_with(COALESCE(m.skip_reason, ''), ${CSAT_SKIP_REASON}))`;

/** A reply the bot wrote: Claude's, or a configured answer (src/state/replies.ts names the kinds). */
const BOT_REPLY = Prisma.sql`('ai', 'canned')`;
/** A person's message: from the staff page, or from the WhatsApp Business app (an echo). */
const PERSON_REPLY = Prisma.sql`('staff', 'human')`;

interface Row {
  day: string | null;
}

export async function dailyFigures(db: Db, range: Range): Promise<DailyFigures[]> {
  const { since, until, number } = boundsOf(range);
  const inRange = (column: string) => Prisma.sql`${Prisma.raw(column)} >= ${since}::timestamptz AND ${Prisma.raw(column)} < ${until}::timestamptz`;
  const ofNumber = Prisma.sql`(${number}::text IS NULL OR c.phone_number_id = ${number}::text)`;

  const [outcomes, messages, replies, parts] = await Promise.all([
    // What happened in each conversation that day: it wrote, it was handed to a person, a reply
    // of it was dead-lettered, a person wrote to it. Resolved by the bot: it wrote, and none of the rest.
    db.$queryRaw<(Row & { conversations: number; handedOff: number; deadLettered: number; resolvedByBot: number })[]>`
      WITH events AS (
        SELECT m.conversation_id AS id, m.created_at AS at, 'wrote' AS what FROM inbound_messages m
        WHERE ${inRange("m.created_at")} AND ${CUSTOMER_MESSAGE}
        UNION ALL
        -- An item a handoff opened counts as the handoff, not as a failure.
        SELECT d.conversation_id, d.created_at, CASE WHEN d.source = 'handoff' THEN 'handed_off' ELSE 'dead_lettered' END FROM dead_letters d
        WHERE ${inRange("d.created_at")}
        UNION ALL
        SELECT r.conversation_id, r.created_at, 'person' FROM replies r WHERE r.kind IN ${PERSON_REPLY} AND ${inRange("r.created_at")}
      ),
      flags AS (
        SELECT ${dayOf("e.at")} AS day, e.id, bool_or(e.what = 'wrote') AS wrote, bool_or(e.what = 'handed_off') AS handed_off,
               bool_or(e.what = 'dead_lettered') AS dead_lettered, bool_or(e.what = 'person') AS person
        FROM events e JOIN conversations c ON c.id = e.id
        WHERE ${ofNumber}
        GROUP BY GROUPING SETS ((${dayOf("e.at")}, e.id), (e.id))
      )
      SELECT day, (count(*) FILTER (WHERE wrote))::int AS conversations, (count(*) FILTER (WHERE handed_off))::int AS "handedOff",
             (count(*) FILTER (WHERE dead_lettered))::int AS "deadLettered",
             (count(*) FILTER (WHERE wrote AND NOT handed_off AND NOT dead_lettered AND NOT person))::int AS "resolvedByBot"
      FROM flags GROUP BY day`,
    // The customer's messages that reached us that day, and those a reply of the bot's answered that Meta took.
    db.$queryRaw<(Row & { inbound: number; answeredByBot: number })[]>`
      SELECT ${dayOf("m.created_at")} AS day, count(*)::int AS inbound,
             (count(*) FILTER (WHERE r.kind IN ${BOT_REPLY} AND EXISTS (SELECT 1 FROM outbound_messages p WHERE p.reply_id = r.id AND p.wamid IS NOT NULL)))::int AS "answeredByBot"
      FROM inbound_messages m JOIN conversations c ON c.id = m.conversation_id LEFT JOIN replies r ON r.id = m.reply_id
      WHERE ${inRange("m.created_at")} AND ${CUSTOMER_MESSAGE} AND ${ofNumber}
      GROUP BY GROUPING SETS ((${dayOf("m.created_at")}), ())`,
    // Each reply's first answer time, on the day Meta took its first part: from the first message
    // it answers reaching us to then. Nearest-rank percentiles: each is a time a customer waited.
    db.$queryRaw<(Row & { p50: number | null; p95: number | null })[]>`
      WITH touched AS (
        SELECT DISTINCT p.reply_id FROM outbound_messages p WHERE p.wamid IS NOT NULL AND ${inRange("p.accepted_at")}
      ),
      first_parts AS (
        SELECT p.reply_id, min(p.accepted_at) AS accepted FROM outbound_messages p JOIN touched t ON t.reply_id = p.reply_id
        WHERE p.wamid IS NOT NULL GROUP BY p.reply_id
      ),
      waits AS (
        SELECT f.accepted, EXTRACT(EPOCH FROM f.accepted - min(m.created_at)) * 1000 AS ms
        FROM first_parts f JOIN inbound_messages m ON m.reply_id = f.reply_id JOIN conversations c ON c.id = m.conversation_id
        WHERE ${inRange("f.accepted")} AND ${CUSTOMER_MESSAGE} AND ${ofNumber}
        GROUP BY f.reply_id, f.accepted
      )
      SELECT ${dayOf("accepted")} AS day, round(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms))::float8 AS p50,
             round(percentile_disc(0.95) WITHIN GROUP (ORDER BY ms))::float8 AS p95
      FROM waits GROUP BY GROUPING SETS ((${dayOf("accepted")}), ())`,
    // The messages Meta took that day, and those it reported delivered or read since (sent < delivered < read; failed apart).
    db.$queryRaw<(Row & { delivered: number; read: number })[]>`
      SELECT ${dayOf("p.accepted_at")} AS day, (count(*) FILTER (WHERE p.status_rank IN (2, 3)))::int AS delivered,
             (count(*) FILTER (WHERE p.status_rank = 3))::int AS read
      FROM outbound_messages p JOIN replies r ON r.id = p.reply_id JOIN conversations c ON c.id = r.conversation_id
      WHERE p.wamid IS NOT NULL AND ${inRange("p.accepted_at")} AND ${ofNumber}
      GROUP BY GROUPING SETS ((${dayOf("p.accepted_at")}), ())`,
  ]);

  const byDay = new Map<string | null, DailyFigures>();
  const figuresOf = (day: string | null) => {
    let found = byDay.get(day);
    if (!found) {
      found = empty(day);
      byDay.set(day, found);
    }
    return found;
  };
  for (const { day, ...row } of outcomes) Object.assign(figuresOf(day), row);
  for (const { day, ...row } of messages) Object.assign(figuresOf(day), row);
  for (const { day, p50, p95 } of replies) figuresOf(day).firstReplyMs = { p50, p95 };
  for (const { day, ...row } of parts) Object.assign(figuresOf(day), row);
  return [...byDay.values()];
}

export const empty = (day: string | null): DailyFigures => ({
  day,
  conversations: 0,
  inbound: 0,
  answeredByBot: 0,
  handedOff: 0,
  deadLettered: 0,
  resolvedByBot: 0,
  firstReplyMs: { p50: null, p95: null },
  delivered: 0,
  read: 0,
});
