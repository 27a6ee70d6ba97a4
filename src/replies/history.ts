import type { ChatTurn } from "../ai/request.ts";
import { type Db, Prisma } from "../db/client.ts";
import { PermanentError } from "../errors.ts";
import { readableMedia } from "../messages/describe.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";

/** What Claude is shown for a reply: recent history within its limits, then the messages to answer. */

export interface HistoryDeps {
  graph: GraphClient;
  historyMessages: number;
  historyTokenBudget: number;
  mediaMaxBytes: number;
}

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
 * a new reply, src/replies/state.ts): the customer's messages up to the newest one answered,
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
  const [row] = await db.$queryRaw<(HistoryJson & { messages: QuestionMessage[] | null })[]>`
    WITH answering AS (SELECT text, payload, sent_at, arrival, created_at FROM inbound_messages WHERE reply_id = ${reply.id}::uuid)
    SELECT (SELECT jsonb_agg(jsonb_build_object('text', text, 'payload', payload) ORDER BY sent_at, arrival NULLS FIRST, created_at) FROM answering) AS messages,
           ${historyColumns(reply.conversationId, Prisma.sql`(SELECT max(created_at) FROM answering)`, Prisma.sql`reply_id IS DISTINCT FROM ${reply.id}::uuid`, limit)}`;
  return { messages: row?.messages ?? [], history: historyOf(row ?? { earlier: null, replies: null }) };
}

/** Recent history (our sent replies and the user's messages) followed by the messages to answer. */
export async function conversationTurns(deps: HistoryDeps, messages: readonly QuestionMessage[], rows: HistoryRows): Promise<ChatTurn[]> {
  const { historyMessages } = deps;
  const history: ChatTurn[] = withinBudget(
    [
      ...rows.earlier.map((m) => ({ at: m.at, turn: { role: "user" as const, text: m.text } })),
      ...rows.replies.map((r) => ({ at: r.at, turn: { role: "assistant" as const, text: r.text } })),
    ]
      .sort((a, b) => a.at - b.at)
      .slice(-historyMessages)
      .map((h) => h.turn),
    deps.historyTokenBudget,
  );
  const question: ChatTurn[] = [];
  for (const m of messages) if (m.text) question.push(await withMedia(deps, m.payload as Parameters<typeof readableMedia>[0], m.text));
  if (question.length === 0) return [];
  const last = history.at(-1);
  if (last) history[history.length - 1] = { ...last, cacheBreakpoint: true };
  return [...history, ...question];
}

/**
 * The image or PDF a message carries, fetched now (Meta's URLs last 5 minutes). A file that
 * cannot be had (too large, expired) leaves a note instead, so the customer still gets an
 * answer; a passing failure retries the job before Claude is paid.
 */
async function withMedia(deps: HistoryDeps, payload: Parameters<typeof readableMedia>[0], text: string): Promise<ChatTurn> {
  const readable = readableMedia(payload);
  if (!readable) return { role: "user", text };
  try {
    const media = await deps.graph.downloadMedia(readable.id, deps.mediaMaxBytes);
    return { role: "user", text, media: { kind: readable.kind, ...media } };
  } catch (error) {
    if (!(error instanceof PermanentError)) throw error;
    return { role: "user", text: `${text}\n[The file could not be opened: ${error.reason}]` };
  }
}

/** Rough but safe: English averages ~4 characters a token; other scripts use fewer per token. */
const estimateTokens = (text: string) => Math.ceil(text.length / 3);

/** Keeps the newest turns that fit the budget: old context is worth less than room to answer. */
function withinBudget(turns: ChatTurn[], budget: number): ChatTurn[] {
  let used = 0;
  let first = turns.length;
  while (first > 0 && used + estimateTokens(turns[first - 1]!.text) <= budget) used += estimateTokens(turns[--first]!.text);
  return turns.slice(first);
}
