import { type Db, Prisma } from "../db/client.ts";
import type { CsatRating } from "../messages/csat.ts";
import { contactFoundBy } from "../state/contacts.ts";
import { type Cursor, encodeCursor } from "./cursor.ts";
import { contactView } from "./views.ts";

/**
 * Every conversation, for the business that reads them (issue 33): newest activity first,
 * keyset-paged, found by the customer (any part of their name, phone, @username or BSUID) or by
 * words either side wrote (Postgres full-text search with KNOWLEDGE_LANGUAGE's configuration),
 * and narrowed by number, day, handoff and open items. The order is the conversation's
 * last_message_at (kept by src/state/), so the first page is an index scan whatever the count;
 * the indexes are prisma/migrations/20261205030100_conversation_search's.
 */

export interface ConversationFilter {
  q?: string | undefined;
  phoneNumberId?: string | undefined;
  /** YYYY-MM-DD (UTC), inclusive, on the last activity. */
  from?: string | undefined;
  to?: string | undefined;
  /** Only the conversations a person holds now (the bot paused). */
  handedOff?: boolean | undefined;
  /** Only those with an open item (a dead letter or a customer waiting for a person). */
  deadLettered?: boolean | undefined;
  rating?: CsatRating | undefined;
  limit?: number | undefined;
  /** The last page's `nextCursor`. */
  cursor?: Cursor | undefined;
}

export const DEFAULT_PAGE = 50;
const DAY_MS = 86_400_000;

/**
 * A text-search configuration as SQL: named literally (KNOWLEDGE_LANGUAGE is validated as a
 * configuration's name at start-up), so that under 'simple' the search is the very expression
 * of the words indexes, which a bind parameter would not be.
 */
export function configurationSql(language: string): Prisma.Sql {
  return Prisma.raw(`'${language.replaceAll("'", "''")}'::regconfig`);
}

/** The conversation's CSAT rating: the latest tap on the latest rated ask (src/state/csat.ts). */
const latestRating = (conversation: Prisma.Sql) =>
  Prisma.sql`(SELECT a.rating FROM csat_asks a WHERE a.conversation_id = ${conversation} AND a.rating IS NOT NULL ORDER BY a.rated_at DESC LIMIT 1)`;

interface Row {
  id: string;
  phoneNumberId: string;
  lastMessageAt: Date;
  pausedUntil: Date | null;
  waId: string | null;
  userId: string | null;
  username: string | null;
  name: string | null;
  lastDirection: "in" | "out" | null;
  lastText: string | null;
  messageCount: number;
  openItems: number;
  rating: CsatRating | null;
}

export async function listConversations(db: Db, filter: ConversationFilter, now: Date, language: string) {
  const limit = filter.limit ?? DEFAULT_PAGE;
  const since = filter.from ? new Date(`${filter.from}T00:00:00.000Z`) : null;
  const until = filter.to ? new Date(Date.parse(`${filter.to}T00:00:00.000Z`) + DAY_MS) : null;
  // One statement's text whether or not each filter is set (a few prepared statements in all):
  // the range and the cursor are the index scan's bounds, the others filters along it.
  const rows = await db.$queryRaw<Row[]>`
    WITH page AS (
      SELECT c.id, c.phone_number_id, c.last_message_at, c.paused_until, c.contact_id
      FROM conversations c
      WHERE c.last_message_at >= COALESCE(${since}::timestamptz, '-infinity')
        AND c.last_message_at < COALESCE(${until}::timestamptz, 'infinity')
        AND (c.last_message_at, c.id) < (COALESCE(${filter.cursor?.at ?? null}::timestamptz, 'infinity'),
                                         COALESCE(${filter.cursor?.id ?? null}::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
        AND (${filter.phoneNumberId ?? null}::text IS NULL OR c.phone_number_id = ${filter.phoneNumberId ?? null}::text)
        AND (${filter.handedOff ?? null}::boolean IS NULL OR c.paused_until > ${now}::timestamptz)
        AND (${filter.deadLettered ?? null}::boolean IS NULL OR EXISTS (SELECT 1 FROM dead_letters d WHERE d.conversation_id = c.id AND d.state = 'open'))
        AND (${filter.rating ?? null}::text IS NULL OR ${latestRating(Prisma.sql`c.id`)} = ${filter.rating ?? null}::text)
        ${filter.q ? Prisma.sql`AND c.id IN (${found(filter.q, language)})` : Prisma.empty}
      ORDER BY c.last_message_at DESC, c.id DESC
      LIMIT ${limit + 1}
    )
    SELECT page.id::text AS id, page.phone_number_id AS "phoneNumberId", page.last_message_at AS "lastMessageAt", page.paused_until AS "pausedUntil",
           ct.wa_id AS "waId", ct.user_id AS "userId", ct.username, ct.name,
           last.direction AS "lastDirection", last.text AS "lastText",
           ((SELECT count(*) FROM inbound_messages m WHERE m.conversation_id = page.id)
             + (SELECT count(*) FROM outbound_messages p JOIN replies r ON r.id = p.reply_id WHERE r.conversation_id = page.id))::int AS "messageCount",
           (SELECT count(*) FROM dead_letters d WHERE d.conversation_id = page.id AND d.state = 'open')::int AS "openItems",
           ${latestRating(Prisma.sql`page.id`)} AS rating
    FROM page
    JOIN contacts ct ON ct.id = page.contact_id
    LEFT JOIN LATERAL (
      SELECT x.direction, x.text FROM (
        (SELECT 'in' AS direction, m.text, m.created_at AS at FROM inbound_messages m
          WHERE m.conversation_id = page.id ORDER BY m.created_at DESC LIMIT 1)
        UNION ALL
        (SELECT 'out', p.text, p.accepted_at FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
          WHERE r.conversation_id = page.id AND p.accepted_at IS NOT NULL ORDER BY p.accepted_at DESC LIMIT 1)
      ) x ORDER BY x.at DESC, x.direction DESC LIMIT 1
    ) last ON true
    ORDER BY page.last_message_at DESC, page.id DESC`;
  const more = rows.length > limit;
  const shown = more ? rows.slice(0, limit) : rows;
  const last = shown.at(-1);
  return {
    items: shown.map((row) => ({
      id: row.id,
      phoneNumberId: row.phoneNumberId,
      contact: contactView(row),
      lastMessageAt: row.lastMessageAt,
      lastMessage: row.lastDirection ? { direction: row.lastDirection, text: row.lastText } : null,
      messageCount: row.messageCount,
      handedOff: row.pausedUntil !== null && row.pausedUntil > now,
      openItems: row.openItems,
      rating: row.rating,
    })),
    nextCursor: more && last ? encodeCursor({ at: last.lastMessageAt, id: last.id }) : null,
  };
}

/**
 * The conversations `q` finds: by the customer (trigram indexes on contacts), or by words either
 * side wrote (the words indexes on messages, transcripts and replies).
 */
function found(q: string, language: string): Prisma.Sql {
  const config = configurationSql(language);
  return Prisma.sql`
    SELECT c2.id FROM conversations c2 JOIN contacts ct2 ON ct2.id = c2.contact_id
    WHERE ${contactFoundBy("ct2", q)}
    UNION
    SELECT m.conversation_id FROM inbound_messages m
    WHERE to_tsvector(${config}, COALESCE(m.text, '') || ' ' || COALESCE(m.transcript, '')) @@ plainto_tsquery(${config}, ${q})
    UNION
    SELECT r.conversation_id FROM replies r
    WHERE to_tsvector(${config}, COALESCE(r.text, '')) @@ plainto_tsquery(${config}, ${q})`;
}
