import type { Config } from "../config.ts";
import type { Db } from "../db/client.ts";
import { isUniqueViolation } from "../db/client.ts";
import type { Prisma } from "../generated/prisma/client.ts";
import type { Logger } from "../logger.ts";
import { controlOf } from "../messages/controls.ts";
import { describeInbound } from "../messages/describe.ts";
import { conversationWith, resolveContact } from "../contacts/identity.ts";
import { scheduleReply, senderOf, type InboundJobData, type Queues } from "../queue/queues.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";

export interface InboundDeps {
  db: Db;
  queues: Queues;
  graph: GraphClient;
  logger: Logger;
  replyDebounceMs: number;
  conversation: Config["conversation"];
}

/**
 * Stores the message (its UNIQUE wamid is the second line of defence against duplicates)
 * with what it asks of the bot: words for Claude, a configured answer, a control keyword, or
 * nothing (a reaction). What the bot does about it (answer, confirm an opt-out, stay silent
 * for an opted-out or paused conversation) is decided by the reply job, in message order
 * (src/messages/plan.ts): messages are stored concurrently and out of order, answers are not.
 * Then shows the user we are on it and schedules the conversation's reply.
 */
export async function processInbound(deps: InboundDeps, data: InboundJobData): Promise<void> {
  const { phoneNumberId } = data;
  const message = wellFormed(data.message);
  const log = deps.logger.child({ wamid: message.id });
  const sentAt = new Date(Number(message.timestamp) * 1000);

  const contact = await resolveContact(deps.db, senderOf(data));
  const conversation = await conversationWith(deps.db, { phoneNumberId, contactId: contact.id, sentAt });

  const described = describeInbound(message, deps.conversation);
  const control = message.type === "text" ? (controlOf(message.text?.body, deps.conversation) ?? null) : null;
  let stored: { skipReason: string | null };
  try {
    stored = await deps.db.inboundMessage.create({
      data: {
        wamid: message.id,
        conversationId: conversation.id,
        type: message.type,
        text: await withQuote(deps.db, message, described.kind === "answer" ? described.text : (message.text?.body ?? null)),
        cannedText: described.kind === "canned" ? described.text : null,
        control,
        arrival: data.arrival === undefined ? null : BigInt(data.arrival),
        sentAt,
        payload: message as Prisma.InputJsonValue,
        skipReason: described.kind === "skip" ? described.reason : null,
      },
      select: { skipReason: true },
    });
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    log.info({ event: "inbound.duplicate_in_db" }, "message already stored; the Redis claim was lost or this is a retry");
    stored = await deps.db.inboundMessage.findUniqueOrThrow({ where: { wamid: message.id }, select: { skipReason: true } });
  }

  if (stored.skipReason) {
    log.info({ event: "inbound.skipped", type: message.type, reason: stored.skipReason }, "message stored, not answered");
    return;
  }
  log.info({ event: "inbound.stored", conversation: conversation.id, type: message.type }, "message stored");
  // "Typing…" only where the bot will answer (WHATSAPP.md §5); best effort: a failed read
  // receipt must never block the reply.
  const silent = conversation.optedOutAt !== null || (conversation.pausedUntil !== null && conversation.pausedUntil > new Date());
  if (!silent || control !== null) {
    await deps.graph.markReadWithTyping(phoneNumberId, message.id).catch((error: unknown) => {
      log.warn({ event: "inbound.mark_read_failed", err: error }, "could not mark read / show typing");
    });
  }
  await scheduleReply(deps.queues, conversation.id, deps.replyDebounceMs);
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * Postgres's text and jsonb refuse a lone UTF-16 surrogate, which only a hostile body carries
 * (JSON allows "\ud800"): it is stored as U+FFFD, or the message could never be stored at all.
 * The job id was derived from the original (src/queue/queues.ts), so queues keep such ids apart.
 */
export function wellFormed<T>(value: T): T {
  return JSON.parse(JSON.stringify(value, (_key, v: unknown) => (typeof v === "string" ? v.replace(LONE_SURROGATE, "\ufffd") : v))) as T;
}

/** A reply to a specific message keeps that context for Claude (WHATSAPP.md §3, `context`). */
async function withQuote(db: Db, message: InboundJobData["message"], text: string | null): Promise<string | null> {
  const quotedId = (message as { context?: { id?: unknown } }).context?.id;
  if (!text || typeof quotedId !== "string") return text;
  const [theirs, ours] = await Promise.all([
    db.inboundMessage.findUnique({ where: { wamid: quotedId }, select: { text: true } }),
    db.outboundMessage.findUnique({ where: { wamid: quotedId }, select: { text: true } }),
  ]);
  const quoted = theirs?.text ?? ours?.text;
  return quoted ? `[Replying to ${ours ? "your" : "their earlier"} message: "${quoted.slice(0, 300)}"]\n${text}` : text;
}
