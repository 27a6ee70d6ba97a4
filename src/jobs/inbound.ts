import { z } from "zod";
import type { Clock } from "../clock.ts";
import type { Config } from "../config/config.ts";
import { type Db, Prisma } from "../db/client.ts";
import { queryRows } from "../db/sql.ts";
import type { DeadLetterDesk } from "../dlq/dead-letters.ts";
import type { Logger } from "../logger.ts";
import { type Control, controlOf } from "../messages/controls.ts";
import { type CsatRating, csatRatingOf } from "../messages/csat.ts";
import { adContext, describeInbound } from "../messages/describe.ts";
import { type InboundJobData, senderOf, storableCopy } from "../queue/catalog.ts";
import { type Queues, scheduleReply } from "../queue/queues.ts";
import { changeUserId, resolveContact } from "../state/contacts.ts";
import { rateCsat } from "../state/csat.ts";
import { type InboundRecord, recordInbound } from "../state/inbound.ts";
import { applyEdit, recordDeletion } from "../state/messages.ts";
import type { Sender } from "../whatsapp/webhook-payload.ts";
import type { Processor } from "./processor.ts";

export interface InboundDeps extends KeepingDeps {
  queues: Queues;
  logger: Logger;
}

/** What keeping a message for staff takes: where it is stored, the desk that dead-letters it, the time. */
export interface KeepingDeps {
  db: Db;
  deadLetters: DeadLetterDesk;
  clock: Clock;
}

/** What the settings say of a customer's message: how to read it, and how long a burst is waited for. */
export interface InboundSettings {
  replyDebounceMs: number;
  conversation: Config["conversation"];
}

/** A customer's message stored; one whose data can never be read is kept for staff (keepUnreadableMessage). */
export function inboundProcessor(deps: InboundDeps, settings: InboundSettings): Processor<"inbound"> {
  return {
    run: (job) => processInbound(deps, settings, job.data),
    keepInvalid: (data, reason) => keepUnreadableMessage(deps, data, reason),
  };
}

/**
 * Stores the message (its UNIQUE wamid is the second line of defence against duplicates)
 * with what it asks of the bot: words for Claude, a configured answer, a control keyword, or
 * nothing (a reaction). What the bot does about it (answer, confirm an opt-out, stay silent
 * for an opted-out or paused conversation) is decided by the reply job, in message order
 * (src/messages/plan.ts): messages are stored concurrently and out of order, answers are not.
 * Then schedules the conversation's reply; the reply job shows the customer it is on it.
 * A text message is one statement (src/state/inbound.ts).
 */
export async function processInbound(deps: InboundDeps, settings: InboundSettings, data: InboundJobData): Promise<void> {
  const { phoneNumberId, message } = data;
  const log = deps.logger.child({ wamid: message.id });
  const sentAt = new Date(Number(message.timestamp) * 1000);
  const sender = senderOf(data);

  // An edit changes the customer's own earlier message: it needs to know who they are first.
  const contactId = message.type === "edit" ? (await resolveContact(deps.db, sender)).id : undefined;
  const asked = await whatItAsks(deps, settings.conversation, data, contactId === undefined ? undefined : { contactId, phoneNumberId });
  const stored = await recordInbound(deps.db, contactId === undefined ? { sender } : { contactId }, phoneNumberId, {
    wamid: message.id,
    type: message.type,
    ...asked,
    arrival: data.arrival === undefined ? null : BigInt(data.arrival),
    sentAt,
    payload: message,
  });
  if (!stored.inserted)
    log.info({ event: "inbound.duplicate_in_db" }, "message already stored; the Redis claim was lost, this is a retry, or it was deleted first");
  if (message.type === "revoke" && asked.refersTo) {
    if (await recordDeletion(deps.db, stored.conversationId, asked.refersTo, sentAt, deps.clock.now())) {
      log.info({ event: "inbound.deleted_by_customer", deleted: asked.refersTo }, "the customer deleted a message: its text is erased");
    }
  }

  const changed = userIdChange(message);
  if (changed) {
    const moved = await changeUserId(deps.db, changed);
    log.info({ event: moved ? "contact.user_id_changed" : "contact.user_id_unknown", contact: moved?.id }, "the customer's BSUID changed");
  }
  const rating = csatRatingOf(message as Record<string, unknown>);
  // Again on a redelivery too: a run that stored the tap and died before recording it (the rating and thanks are made once).
  if (rating) await recordRating(deps, settings, stored.conversationId, rating, sentAt, log);
  if (stored.skipReason) {
    log.info({ event: "inbound.skipped", type: message.type, reason: stored.skipReason }, "message stored, not answered");
    return;
  }
  log.info({ event: "inbound.stored", conversation: stored.conversationId, type: message.type }, "message stored");
  await scheduleReply(deps.queues, stored.conversationId, settings.replyDebounceMs);
}

/** A tap on a CSAT button: the rating of the conversation's latest ask, thanked once (CSAT_THANKS) through the reply job; never Claude's. */
async function recordRating(deps: InboundDeps, settings: InboundSettings, conversationId: string, rating: CsatRating, at: Date, log: Logger): Promise<void> {
  const thanks = settings.conversation.csat?.thanks ?? "";
  const rated = await rateCsat(deps.db, conversationId, { rating, at }, thanks, deps.clock.now());
  if (!rated.recorded) {
    log.info({ event: "csat.rating_without_ask", conversation: conversationId }, "a CSAT rating for a conversation never asked; not recorded");
    return;
  }
  log.info({ event: "csat.rated", conversation: conversationId, csat: rated.askId, rating }, "CSAT rating recorded");
  if (rated.thanksReplyId) await scheduleReply(deps.queues, conversationId, 0);
}

const userIdChangeSchema = z
  .object({ type: z.literal("user_changed_user_id"), user_id: z.string().min(1), previous_user_id: z.string().min(1).optional() })
  .passthrough();

/** A system message saying the customer's BSUID changed (it follows a new phone number, WHATSAPP.md §9). */
function userIdChange(message: InboundJobData["message"]): { previous: string; current: string } | undefined {
  if (message.type !== "system") return undefined;
  const system = userIdChangeSchema.safeParse((message as Record<string, unknown>).system);
  const previous = system.success ? (system.data.previous_user_id ?? message.from_user_id) : undefined;
  return system.success && previous ? { previous, current: system.data.user_id } : undefined;
}

const editSchema = z.object({ original_message_id: z.string().min(1), message: z.object({ type: z.string().min(1) }).passthrough() });
const revokeSchema = z.object({ original_message_id: z.string().min(1) });

type Asked = Pick<InboundRecord, "text" | "cannedText" | "skipReason" | "refersTo"> & { control: Control | null };

/**
 * What the message asks of the bot: words for Claude (with the ad the customer came from, and
 * the message they quote), a configured answer, a control keyword, or nothing, with why. An
 * edit (WHATSAPP.md §11) of a message not answered yet is applied to it, so Claude reads the
 * edited words and answers once; an edit of an answered message is a message of its own,
 * saying what changed.
 */
async function whatItAsks(deps: InboundDeps, reading: Config["conversation"], data: InboundJobData, owner: EditOwner | undefined): Promise<Asked> {
  const { message } = data;
  const raw = message as Record<string, unknown>;
  const nothing = { cannedText: null, control: null, refersTo: null };
  if (message.type === "revoke") {
    const revoke = revokeSchema.safeParse(raw.revoke);
    return { ...nothing, text: null, skipReason: "the customer deleted a message", refersTo: revoke.success ? revoke.data.original_message_id : null };
  }
  if (message.type === "edit" && owner) return whatAnEditAsks(deps, reading, message, owner);
  const described = describeInbound(message, reading);
  const ad = adContext(raw);
  const text = described.kind === "answer" ? (ad ? `${ad}\n${described.text}` : described.text) : (message.text?.body ?? null);
  return {
    text: await withQuote(deps.db, data, text),
    cannedText: described.kind === "canned" ? described.text : null,
    control: message.type === "text" ? (controlOf(message.text?.body, reading) ?? null) : null,
    skipReason: described.kind === "skip" ? described.reason : null,
    refersTo: null,
  };
}

/** Whose conversation an edit may change: the customer's own, with this business number. */
interface EditOwner {
  contactId: string;
  phoneNumberId: string;
}

async function whatAnEditAsks(deps: InboundDeps, reading: Config["conversation"], message: InboundJobData["message"], owner: EditOwner): Promise<Asked> {
  const edit = editSchema.safeParse((message as Record<string, unknown>).edit);
  if (!edit.success) return { text: null, cannedText: null, control: null, skipReason: "an edit without the edited message", refersTo: null };
  const originalId = edit.data.original_message_id;
  const edited = describeInbound({ ...edit.data.message, id: message.id, timestamp: message.timestamp } as InboundJobData["message"], reading);
  const base = { cannedText: null, control: null, refersTo: originalId };
  if (edited.kind !== "answer") return { ...base, text: null, skipReason: `an edit into something the bot does not read (${edit.data.message.type})` };
  if (await applyEdit(deps.db, { wamid: originalId, ...owner, text: edited.text })) {
    return { ...base, text: edited.text, skipReason: "edit applied to the message before it was answered" };
  }
  const original = await deps.db.inboundMessage.findFirst({ where: { wamid: originalId, conversation: owner }, select: { text: true } });
  const before = original?.text ? ` "${original.text.slice(0, 300)}"` : "";
  return { ...base, text: `[Edited their earlier message${before}. It now says:]\n${edited.text}`, skipReason: null };
}

/**
 * A reply to a specific message keeps that context for Claude (WHATSAPP.md §3, `context`): the
 * quoted message is looked up in this customer's conversation with this business number only,
 * never in another customer's.
 */
async function withQuote(db: Db, data: InboundJobData, text: string | null): Promise<string | null> {
  const quotedId = (data.message as { context?: { id?: unknown } }).context?.id;
  if (!text || typeof quotedId !== "string") return text;
  const sender = senderOf(data);
  const [quoted] = await queryRows<{ text: string; ours: boolean }>(
    db,
    Prisma.sql`
    WITH mine AS (
      SELECT c.id FROM conversations c JOIN contacts ct ON ct.id = c.contact_id
      WHERE c.phone_number_id = ${data.phoneNumberId} AND (ct.wa_id = ${sender.waId ?? null} OR ct.user_id = ${sender.userId ?? null})
    )
    SELECT m.text, false AS ours FROM inbound_messages m WHERE m.wamid = ${quotedId} AND m.conversation_id IN (SELECT id FROM mine) AND m.text IS NOT NULL
    UNION ALL
    SELECT p.text, true FROM outbound_messages p JOIN replies r ON r.id = p.reply_id WHERE p.wamid = ${quotedId} AND r.conversation_id IN (SELECT id FROM mine)
    LIMIT 1`,
  );
  return quoted ? `[Replying to ${quoted.ours ? "your" : "their earlier"} message: "${quoted.text.slice(0, 300)}"]\n${text}` : text;
}

/** What an inbound job must still name for its message to be kept when the rest of its data is wrong. */
const identifiable = z.object({
  phoneNumberId: z.string().regex(/^\d+$/),
  sender: z.object({ waId: z.string().min(1).optional(), userId: z.string().min(1).optional(), name: z.string().optional() }).optional(),
  message: z
    .object({ id: z.string().min(1), from: z.string().min(1).optional(), type: z.string().optional(), text: z.object({ body: z.string() }).optional() })
    .passthrough(),
});

/**
 * An inbound job whose data can never be processed (src/queue/catalog.ts, readJob, says why):
 * when it still names the business number, the customer and the message, the message is kept
 * as a dead letter with the reason, for staff to answer (law 6); otherwise the caller's log
 * line is all that remains of it.
 */
export async function keepUnreadableMessage(deps: KeepingDeps, data: unknown, reason: string): Promise<void> {
  const found = identifiable.safeParse(storableCopy(data).value);
  if (!found.success) return;
  const { phoneNumberId, message } = found.data;
  const sender = { waId: found.data.sender?.waId ?? message.from, userId: found.data.sender?.userId, name: found.data.sender?.name };
  if (!sender.waId && !sender.userId) return;
  await keepForStaff(
    deps,
    { phoneNumberId, sender, message, sentAt: deps.clock.now() },
    {
      code: "invalid_job",
      reason: `The message could not be read (${reason}); it is kept here for staff to answer.`,
    },
  );
}

/**
 * A message no worker could handle, stored as it came (no words for Claude: staff read it on
 * the page) and dead-lettered on its own, for staff to answer; the conversation's other work
 * goes on. Nothing when it was stored before (answered, or kept, already).
 */
export async function keepForStaff(
  deps: KeepingDeps,
  kept: { phoneNumberId: string; sender: Sender; message: { id: string; type?: string | undefined; text?: { body: string } | undefined }; sentAt: Date },
  why: { code: string; reason: string; detail?: Record<string, unknown> | undefined },
): Promise<void> {
  const { message } = kept;
  const stored = await recordInbound(deps.db, { sender: kept.sender }, kept.phoneNumberId, {
    wamid: message.id,
    type: message.type ?? "unreadable",
    text: message.text?.body ?? null,
    cannedText: null,
    control: null,
    skipReason: null,
    refersTo: null,
    arrival: null,
    sentAt: kept.sentAt,
    payload: message,
  });
  if (!stored.messageId) return;
  const failure = { source: "internal" as const, ...why, detail: why.detail };
  const unread = { conversationId: stored.conversationId, messageId: stored.messageId };
  await deps.deadLetters.message(unread, failure);
}
