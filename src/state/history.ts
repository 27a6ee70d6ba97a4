import { type Db, Prisma } from "../db/client.ts";
import { queryRows } from "../db/sql.ts";

/**
 * What a reply's statements read of the conversation before it (Claude's history): the
 * customer's earlier messages and our sent replies. Reads only; what Claude is shown of them
 * (within budget, with media) is src/replies/history.ts.
 */

/** The conversation before the messages a reply answers, newest last: the customer's messages and our sent replies. */
export interface HistoryRows {
  earlier: { text: string; at: number }[];
  replies: { text: string; at: number }[];
}

/** A message the reply answers, as Claude reads it. */
export interface QuestionMessage {
  text: string | null;
  payload: unknown;
}

export type HistoryJson = { earlier: { text: string; at: string }[] | null; replies: { text: string; at: string }[] | null };

export const historyOf = (row: HistoryJson): HistoryRows => ({
  earlier: (row.earlier ?? []).map((h) => ({ text: h.text, at: Date.parse(h.at) })),
  replies: (row.replies ?? []).map((h) => ({ text: h.text, at: Date.parse(h.at) })),
});

/**
 * The history, as two columns of a statement that reads it alongside other work (the bind of
 * a new reply, src/state/conversations.ts): the customer's messages up to the newest one answered,
 * other than those, and our sent replies, the newest `limit` of each. Our clock on both sides
 * (storage and send times): Meta's timestamps have one-second resolution.
 */
export function historyColumns(conversationId: string, newest: Prisma.Sql, notAnswered: Prisma.Sql, limit: number): Prisma.Sql {
  return Prisma.sql`
    (SELECT jsonb_agg(jsonb_build_object('text', h.text, 'at', h.created_at)) FROM (
       SELECT text, created_at FROM inbound_messages
       WHERE conversation_id = ${conversationId}::uuid AND text IS NOT NULL AND created_at <= ${newest} AND ${notAnswered}
       ORDER BY created_at DESC LIMIT ${limit}) h) AS earlier,
    (SELECT jsonb_agg(jsonb_build_object('text', r.text, 'at', COALESCE(r.sent_at, r.created_at))) FROM (
       SELECT text, sent_at, created_at FROM replies
       WHERE conversation_id = ${conversationId}::uuid AND state = 'sent' AND text IS NOT NULL
       ORDER BY sent_at DESC NULLS LAST LIMIT ${limit}) r) AS replies`;
}

/** For a run that did not plan the reply (a retry): its messages and their history, in one statement. */
export async function readHistory(
  db: Db,
  reply: { id: string; conversationId: string },
  limit: number,
): Promise<{ messages: QuestionMessage[]; history: HistoryRows }> {
  const [row] = await queryRows<HistoryJson & { messages: QuestionMessage[] | null }>(
    db,
    Prisma.sql`
    WITH answering AS (SELECT text, payload, sent_at, arrival, created_at FROM inbound_messages WHERE reply_id = ${reply.id}::uuid)
    SELECT (SELECT jsonb_agg(jsonb_build_object('text', text, 'payload', payload) ORDER BY sent_at, arrival NULLS FIRST, created_at) FROM answering) AS messages,
           ${historyColumns(reply.conversationId, Prisma.sql`(SELECT max(created_at) FROM answering)`, Prisma.sql`reply_id IS DISTINCT FROM ${reply.id}::uuid`, limit)}`,
  );
  return { messages: row?.messages ?? [], history: historyOf(row ?? { earlier: null, replies: null }) };
}
