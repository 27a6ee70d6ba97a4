import type { PriceOverrides } from "../ai/pricing.ts";
import { costOfConversation } from "../costs/ledger.ts";
import type { Db } from "../db/client.ts";
import { contactLabel } from "../state/contacts.ts";

/**
 * Everything held about one customer, as one document (issue 35.1; GDPR article 15): the
 * contact, and each conversation whole: their messages as Meta delivered them (text, captions,
 * transcripts, media kinds and ids), every reply with its parts, the knowledge it cited and the
 * business tools it called (inputs and answers), the items staff had with their drafts, notes
 * and history, the ratings, and what each reply cost. Read, never changed; the caller audits it.
 */

export async function exportContact(db: Db, contactId: string, prices: PriceOverrides) {
  const contact = await db.contact.findFirst({ where: { id: contactId, erasedAt: null } });
  if (!contact) return null;
  const conversations = await conversationsWhole(db, contactId);
  return {
    contact: {
      id: contact.id,
      label: contactLabel(contact),
      name: contact.name,
      phone: contact.waId,
      bsuid: contact.userId,
      parentBsuid: contact.parentUserId,
      username: contact.username,
      marketingOptedOutAt: contact.marketingOptedOutAt,
      createdAt: contact.createdAt,
    },
    conversations: await Promise.all(conversations.map((c) => conversationDocument(db, c, prices))),
  };
}

/** Every conversation of the contact with all it holds, oldest first, in one query: the export reads each row once. */
function conversationsWhole(db: Db, contactId: string) {
  return db.conversation.findMany({
    where: { contactId },
    orderBy: { createdAt: "asc" },
    include: {
      messages: { orderBy: [{ createdAt: "asc" }, { id: "asc" }] },
      replies: {
        orderBy: [{ createdAt: "asc" }, { id: "asc" }],
        include: {
          parts: { orderBy: { seq: "asc" }, include: { copies: true } },
          toolCalls: { orderBy: [{ requestedAt: "asc" }, { id: "asc" }] },
          claudeCalls: { orderBy: { createdAt: "asc" } },
        },
      },
      deadLetters: { orderBy: [{ createdAt: "asc" }, { id: "asc" }], include: { actions: { orderBy: { createdAt: "asc" } } } },
      csatAsks: { orderBy: { createdAt: "asc" } },
    },
  });
}

type ConversationWhole = Awaited<ReturnType<typeof conversationsWhole>>[number];

/** One conversation as the customer sees it in the export, with what it cost as the costs page counts it. */
async function conversationDocument(db: Db, c: ConversationWhole, prices: PriceOverrides) {
  return {
    id: c.id,
    phoneNumberId: c.phoneNumberId,
    createdAt: c.createdAt,
    lastMessageAt: c.lastMessageAt,
    optedOutAt: c.optedOutAt,
    pausedUntil: c.pausedUntil,
    pausedBy: c.pausedBy,
    messages: c.messages.map(messageDocument),
    replies: c.replies.map(replyDocument),
    items: c.deadLetters.map(itemDocument),
    ratings: c.csatAsks.map((a) => ({ state: a.state, askedAt: a.askedAt, rating: a.rating, ratedAt: a.ratedAt })),
    cost: await costOfConversation(db, c.id, prices),
  };
}

/** A message the customer sent, with everything Meta told us about it. */
function messageDocument(m: ConversationWhole["messages"][number]) {
  return {
    wamid: m.wamid,
    type: m.type,
    sentAt: m.sentAt,
    receivedAt: m.createdAt,
    text: m.text,
    transcript: m.transcript,
    // As Meta delivered it: a caption, a media id and kind, a location, a contact card.
    payload: m.payload,
    skipReason: m.skipReason,
    deletedAt: m.deletedAt,
    replyId: m.replyId,
  };
}

type ReplyWhole = ConversationWhole["replies"][number];

/** A reply to them: what it said, in which parts, which tools it asked with their inputs (often their words), and its cost. */
function replyDocument(r: ReplyWhole) {
  return {
    id: r.id,
    kind: r.kind,
    state: r.state,
    text: r.text,
    createdAt: r.createdAt,
    sentAt: r.sentAt,
    citations: r.citations,
    parts: r.parts.map((p) => ({
      wamid: p.wamid,
      text: p.text,
      template: p.template,
      templateParameters: p.templateParameters,
      interactive: p.interactive,
      sendState: p.sendState,
      status: p.status,
      acceptedAt: p.acceptedAt,
      copies: p.copies.map((copy) => ({ wamid: copy.wamid, pricingCategory: copy.pricingCategory, pricedAt: copy.pricedAt })),
    })),
    toolCalls: r.toolCalls.map((t) => ({
      name: t.name,
      input: t.input,
      state: t.state,
      request: t.request,
      answer: t.answer,
      isError: t.isError,
      requestedAt: t.requestedAt,
    })),
    cost: replyCost(r),
  };
}

/** What one reply cost: Claude's calls in USD, and Meta's billed parts and their copies in the rate card's currency. */
function replyCost(r: ReplyWhole) {
  return {
    claudeUsd: r.claudeCalls.reduce((sum, call) => sum + (call.costUsd ?? 0), 0),
    claudeCalls: r.claudeCalls.length,
    meta: r.parts.reduce((sum, p) => sum + (p.metaAmount ?? 0) + p.copies.reduce((n, copy) => n + (copy.metaAmount ?? 0), 0), 0),
  };
}

/** An item staff had about them, with the words staff wrote and its history. */
function itemDocument(d: ConversationWhole["deadLetters"][number]) {
  return {
    id: d.id,
    state: d.state,
    source: d.source,
    code: d.code,
    reason: d.reason,
    detail: d.detail,
    note: d.note,
    actedBy: d.actedBy,
    createdAt: d.createdAt,
    actions: d.actions.map((a) => ({ actor: a.actor, action: a.action, detail: a.detail, at: a.createdAt })),
  };
}
