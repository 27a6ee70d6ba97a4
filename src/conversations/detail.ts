import type { PriceOverrides } from "../ai/pricing.ts";
import { costOfConversation } from "../costs/ledger.ts";
import type { Db } from "../db/client.ts";
import { type Cursor, encodeCursor } from "./cursor.ts";
import { contactView, controlsView, repliesIn, repliesWork, timelineOf } from "./views.ts";

/**
 * One conversation whole, for the business that reads it (issue 33): both sides, with why the
 * bot said each thing (the same shapes as a dead letter's page, views.ts), every item staff had
 * on it, and what it cost. A long one comes newest first in pages of its timeline.
 */

export const DEFAULT_TIMELINE = 100;

export async function getConversation(
  db: Db,
  id: string,
  now: Date,
  page: { before?: Cursor | undefined; limit?: number | undefined },
  prices: PriceOverrides,
) {
  const conversation = await db.conversation.findUnique({
    where: { id },
    include: { contact: true, deadLetters: { orderBy: [{ createdAt: "asc" }, { id: "asc" }] } },
  });
  if (!conversation) return null;
  const limit = page.limit ?? DEFAULT_TIMELINE;
  // The newest `limit` entries before the cursor, both sides together, ordered as the timeline
  // is (a part by when Meta took it, else when it was made); one more tells whether older remain.
  const keys = await db.$queryRaw<{ kind: "in" | "out"; id: string; at: Date }[]>`
    SELECT kind, id::text AS id, at FROM (
      SELECT 'in' AS kind, m.id, m.created_at AS at FROM inbound_messages m WHERE m.conversation_id = ${id}::uuid
      UNION ALL
      SELECT 'out', p.id, COALESCE(p.accepted_at, p.created_at) FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
      WHERE r.conversation_id = ${id}::uuid
    ) t
    WHERE (t.at, t.id) < (COALESCE(${page.before?.at ?? null}::timestamptz, 'infinity'),
                          COALESCE(${page.before?.id ?? null}::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
    ORDER BY t.at DESC, t.id DESC
    LIMIT ${limit + 1}`;
  const shown = keys.slice(0, limit);
  const ids = (kind: "in" | "out") => shown.filter((k) => k.kind === kind).map((k) => k.id);
  const [inbound, parts, cost, ratings] = await Promise.all([
    db.inboundMessage.findMany({ where: { id: { in: ids("in") } }, orderBy: { createdAt: "asc" } }),
    db.outboundMessage.findMany({ where: { id: { in: ids("out") } }, orderBy: { createdAt: "asc" } }),
    costOfConversation(db, id, prices),
    db.csatAsk.findMany({
      where: { conversationId: id, rating: { not: null } },
      orderBy: { ratedAt: "asc" },
      select: { rating: true, askedAt: true, ratedAt: true },
    }),
  ]);
  const oldest = shown.at(-1);
  return {
    id: conversation.id,
    phoneNumberId: conversation.phoneNumberId,
    contact: contactView(conversation.contact),
    ...controlsView(conversation, now),
    timeline: timelineOf(inbound, parts),
    replies: await repliesWork(db, repliesIn(inbound, parts)),
    olderCursor: keys.length > limit && oldest ? encodeCursor({ at: oldest.at, id: oldest.id }) : null,
    items: conversation.deadLetters.map((d) => ({ id: d.id, state: d.state, source: d.source, code: d.code, reason: d.reason, createdAt: d.createdAt })),
    ratings,
    cost,
  };
}
