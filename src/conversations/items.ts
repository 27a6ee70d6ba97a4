import type { Db } from "../db/client.ts";
import { explain, type ReasonKind } from "../dlq/explain.ts";
import { reasonWhere } from "../dlq/reasons.ts";
import type { DeadLetterState, Prisma } from "../generated/prisma/client.ts";
import { delivered, maybeSent } from "../state/parts.ts";
import { contactView, controlsView, repliesIn, repliesWork, timelineOf } from "./views.ts";

/**
 * What staff read of the dead-letter queue: the list, and one item with everything needed to
 * decide. Every item comes with its explanation in plain words (explain.ts). The changes (record,
 * resend, discard) are transitions of src/state/dead-letters.ts.
 */

export interface DeadLetterFilter {
  state?: DeadLetterState | undefined;
  code?: string | undefined;
  source?: string | undefined;
  phoneNumberId?: string | undefined;
  /** Finds the customer by phone number, BSUID, @username or name (any part of it). */
  q?: string | undefined;
  /** One kind of problem (explain.ts), as the queue's counts group them. */
  reason?: ReasonKind | undefined;
  order?: "oldest" | "newest" | undefined;
  limit?: number | undefined;
}

/**
 * The queue staff work through: open items by default, oldest first, filterable by reason and
 * number; each with its explanation in plain words, and whether its reply may already have arrived.
 */
export async function listDeadLetters(db: Db, filter: DeadLetterFilter = {}) {
  const base: Prisma.DeadLetterWhereInput = {
    state: filter.state ?? "open",
    ...(filter.code ? { code: filter.code } : {}),
    ...(filter.source ? { source: filter.source } : {}),
    conversation: {
      ...(filter.phoneNumberId ? { phoneNumberId: filter.phoneNumberId } : {}),
      ...(filter.q ? { contact: { OR: contactMatches(filter.q) } } : {}),
    },
  };
  const where = filter.reason ? { AND: [base, await reasonWhere(db, base, filter.reason)] } : base;
  const [total, rows] = await Promise.all([
    db.deadLetter.count({ where }),
    db.deadLetter.findMany({
      where,
      orderBy: { createdAt: filter.order === "newest" ? "desc" : "asc" },
      take: filter.limit ?? 100,
      include: {
        // The customer's latest message, whatever it answers: what a person reads first.
        conversation: { include: { contact: true, messages: { orderBy: { createdAt: "desc" }, take: 1 } } },
        reply: { include: { messages: { orderBy: { sentAt: "asc" } }, parts: true } },
      },
    }),
  ]);
  const items = rows.map((row) => {
    const uncertain = row.reply?.parts.some(maybeSent) ?? false;
    const latest = row.conversation.messages[0];
    return {
      id: row.id,
      createdAt: row.createdAt,
      source: row.source,
      code: row.code,
      reason: row.reason,
      explanation: explain(row, { maybeSent: uncertain }),
      detail: row.detail,
      attempts: row.attempts,
      state: row.state,
      conversation: {
        id: row.conversationId,
        phoneNumberId: row.conversation.phoneNumberId,
        contact: contactView(row.conversation.contact),
      },
      reply: row.reply ? { id: row.reply.id, draft: row.reply.text, state: row.reply.state, maybeSent: uncertain } : null,
      messages: (row.reply?.messages ?? []).map((m) => ({ wamid: m.wamid, type: m.type, text: m.text, sentAt: m.sentAt })),
      lastMessage: latest ? { type: latest.type, text: latest.text, sentAt: latest.sentAt, deleted: latest.deletedAt !== null } : null,
    };
  });
  return { total, items };
}

const contactMatches = (q: string) => {
  const part = { contains: q.replace(/^[+@]/, ""), mode: "insensitive" as const };
  // A phone number as people write it: "+44 7700-900 123" finds 447700900123.
  const phone = /^[+\d\s().-]+$/.test(q) ? { contains: q.replace(/\D/g, "") } : part;
  return [{ waId: phone }, { userId: part }, { parentUserId: part }, { username: part }, { name: part }];
};

/**
 * One dead letter with everything staff need to decide: the conversation around it (both
 * sides, with delivery states), the draft, the full error, whether the 24-hour window is still
 * open (free text fails with 131047 once it has closed), and the history of actions on it.
 */
export async function getDeadLetter(db: Db, id: string, now: Date, around = 30) {
  const row = await db.deadLetter.findUnique({
    where: { id },
    include: { conversation: { include: { contact: true } }, reply: { include: { parts: true } }, actions: { orderBy: { createdAt: "asc" } } },
  });
  if (!row) return null;
  const conversationId = row.conversationId;
  const [inbound, parts] = await Promise.all([
    db.inboundMessage.findMany({ where: { conversationId }, orderBy: { createdAt: "desc" }, take: around }),
    db.outboundMessage.findMany({ where: { reply: { conversationId } }, orderBy: { createdAt: "desc" }, take: around }),
  ]);
  const replies = await repliesWork(db, repliesIn(inbound, parts, row.replyId ? [row.replyId] : []));
  const workOf = (replyId: string) => replies.find((r) => r.id === replyId);
  const timeline = timelineOf(inbound, parts);
  const uncertain = row.reply?.parts.some(maybeSent) ?? false;
  return {
    id: row.id,
    state: row.state,
    createdAt: row.createdAt,
    attempts: row.attempts,
    error: { source: row.source, code: row.code, reason: row.reason, detail: row.detail },
    explanation: explain(row, { maybeSent: uncertain }),
    conversation: {
      id: conversationId,
      phoneNumberId: row.conversation.phoneNumberId,
      contact: contactView(row.conversation.contact),
      ...controlsView(row.conversation, now),
    },
    reply: row.reply
      ? {
          id: row.reply.id,
          draft: row.reply.text,
          state: row.reply.state,
          kind: row.reply.kind,
          // A resend of such a reply may reach the customer twice: staff are told before they press it.
          maybeSent: uncertain,
          deliveredAfterAll: row.reply.parts.length > 0 && row.reply.parts.every(delivered),
          citations: workOf(row.reply.id)?.citations ?? [],
          toolCalls: workOf(row.reply.id)?.toolCalls ?? [],
        }
      : null,
    replies,
    timeline,
    actions: row.actions.map((a) => ({ actor: a.actor, action: a.action, detail: a.detail, at: a.createdAt })),
    handled: row.state === "open" ? null : { by: row.actedBy, at: row.actedAt, note: row.note },
  };
}
