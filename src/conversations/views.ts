import type { Citation } from "../ai/claude.ts";
import type { Db } from "../db/client.ts";
import type { Contact, Conversation, InboundMessage, OutboundMessage, Prisma, ToolCall } from "../generated/prisma/client.ts";
import { csatRatingStored } from "../messages/csat.ts";
import { contactLabel } from "../state/contacts.ts";
import { windowOpen } from "../whatsapp/window.ts";

/**
 * How staff read a conversation, wherever they meet it: the customer, both sides of what was
 * said, and why the bot said each thing (the knowledge it cited, the actions it took). A dead
 * letter's page (items.ts) and the conversations' (list.ts, detail.ts) show the same
 * shapes, built here once.
 */

/** What staff see of a customer: a name, and the phone, or else the @username or BSUID (WHATSAPP.md §9). */
export function contactView(contact: Pick<Contact, "waId" | "userId" | "username" | "name">) {
  return { waId: contact.waId, userId: contact.userId, username: contact.username, name: contact.name, label: contactLabel(contact) };
}

/**
 * Whether the bot may write (the 24-hour window), and whether a person holds the conversation:
 * paused by a staff member, the customer's request, or someone writing from the WhatsApp
 * Business app; the bot answers nothing until then.
 */
export function controlsView(conversation: Pick<Conversation, "lastInboundAt" | "pausedUntil" | "pausedBy">, now: Date) {
  const paused = conversation.pausedUntil !== null && conversation.pausedUntil > now;
  return {
    lastInboundAt: conversation.lastInboundAt,
    windowOpen: windowOpen(conversation.lastInboundAt, now),
    pausedUntil: paused ? conversation.pausedUntil : null,
    pausedBy: paused ? conversation.pausedBy : null,
  };
}

/** Why the bot said what it said, for each of these replies: the knowledge it cited, the actions it took; oldest first. */
export async function repliesWork(db: Db, replyIds: string[]) {
  const work = await db.reply.findMany({
    where: { id: { in: replyIds } },
    orderBy: { createdAt: "asc" },
    select: { id: true, state: true, kind: true, text: true, citations: true, toolCalls: { orderBy: [{ requestedAt: "asc" }, { id: "asc" }] } },
  });
  return work.map((r) => ({
    id: r.id,
    state: r.state,
    kind: r.kind,
    text: r.text,
    citations: citationsOf(r.citations),
    toolCalls: r.toolCalls.map(toolCallView),
  }));
}

/** The replies these messages and parts belong to, each once (`first` ahead of the rest). */
export function repliesIn(inbound: Pick<InboundMessage, "replyId">[], parts: Pick<OutboundMessage, "replyId">[], first: string[] = []): string[] {
  return [...new Set([...first, ...parts.map((p) => p.replyId), ...inbound.flatMap((m) => (m.replyId ? [m.replyId] : []))])];
}

/** Both sides of the conversation, oldest first: the customer's messages and our parts, with their delivery states. */
export function timelineOf(inbound: InboundMessage[], parts: OutboundMessage[]) {
  return [
    ...inbound.map((m) => ({
      direction: "in" as const,
      at: m.createdAt,
      wamid: m.wamid,
      /** When the customer sent it (Meta's timestamp); `at` is when it reached us. */
      sentAt: m.sentAt,
      type: m.type,
      text: m.text,
      replyId: m.replyId,
      skipReason: m.skipReason,
      /** A tap on our CSAT buttons: the rating it gave (it is not a message to answer). */
      rating: csatRatingStored(m.skipReason),
      deleted: m.deletedAt !== null,
    })),
    ...parts.map((p) => ({
      direction: "out" as const,
      at: partAt(p),
      wamid: p.wamid,
      text: p.text,
      replyId: p.replyId,
      template: p.template,
      sendState: p.sendState,
      status: p.status,
      statusAt: p.statusAt,
    })),
  ].sort((a, b) => a.at.getTime() - b.at.getTime());
}

/** Where a part stands in the timeline: when Meta took it, else when it was made. */
export const partAt = (p: Pick<OutboundMessage, "acceptedAt" | "createdAt">) => p.acceptedAt ?? p.createdAt;

/** A reply's stored citations (written by storeDraft from Claude's own), as the staff API gives them. */
function citationsOf(stored: Prisma.JsonValue): Citation[] {
  return Array.isArray(stored) ? (stored as unknown as Citation[]) : [];
}

function toolCallView(call: ToolCall) {
  const state = call.state === "done" || call.state === "failed" || call.state === "unknown" ? call.state : "requested";
  return {
    id: call.id,
    name: call.name,
    input: call.input,
    state,
    attempts: call.attempts,
    request: (call.request as { method: string; url: string } | null) ?? null,
    answer: call.answer,
    isError: call.isError,
    status: call.status,
    requestedAt: call.requestedAt,
    finishedAt: call.finishedAt,
  } as const;
}
