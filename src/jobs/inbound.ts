import type { Config } from "../config.ts";
import type { Db } from "../db/client.ts";
import { isUniqueViolation } from "../db/client.ts";
import type { Prisma } from "../generated/prisma/client.ts";
import type { Logger } from "../logger.ts";
import { type Control, controlOf } from "../messages/controls.ts";
import { describeInbound, type InboundOutcome, say } from "../messages/describe.ts";
import { scheduleReply, type InboundJobData, type Queues } from "../queue/queues.ts";
import { splitForWhatsApp } from "../replies/split.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";

export interface InboundDeps {
  db: Db;
  queues: Queues;
  graph: GraphClient;
  logger: Logger;
  replyDebounceMs: number;
  conversation: Config["conversation"];
}

/** Until a person resumes it: far enough to never end by itself. */
export const PAUSED_INDEFINITELY = new Date("9999-12-31T00:00:00Z");

/**
 * Stores the message (its UNIQUE wamid is the second line of defence against duplicates)
 * together with what the bot will do about it, then shows the user we are on it and
 * schedules the conversation's reply. The decision is made once, in the transaction that
 * stores the message; a retry or duplicate finds it stored and only schedules again.
 */
export async function processInbound(deps: InboundDeps, data: InboundJobData): Promise<void> {
  const { message, phoneNumberId } = data;
  const log = deps.logger.child({ wamid: message.id });
  const sentAt = new Date(Number(message.timestamp) * 1000);

  const contact = await deps.db.contact.upsert({
    where: { waId: message.from },
    create: { waId: message.from, name: data.contactName ?? null },
    update: data.contactName ? { name: data.contactName } : {},
  });
  const conversation = await deps.db.conversation.upsert({
    where: { phoneNumberId_contactId: { phoneNumberId, contactId: contact.id } },
    create: { phoneNumberId, contactId: contact.id, lastInboundAt: sentAt },
    update: {},
  });
  // The 24-hour window runs from the customer's newest message, by Meta's timestamp.
  await deps.db.conversation.updateMany({
    where: { id: conversation.id, OR: [{ lastInboundAt: null }, { lastInboundAt: { lt: sentAt } }] },
    data: { lastInboundAt: sentAt },
  });

  let stored: { skipReason: string | null; replyId: string | null };
  try {
    stored = await deps.db.$transaction(async (tx) => {
      // The opt-out and pause state as the upserts above just read it (reading it again in here
      // would not lock it either).
      const control = message.type === "text" ? controlOf(message.text?.body, deps.conversation) : undefined;
      const outcome = decide(deps.conversation, describeInbound(message, deps.conversation), control, {
        optedOut: contact.optedOutAt !== null,
        paused: conversation.pausedUntil !== null && conversation.pausedUntil > new Date(),
      });
      const text = await withQuote(tx, message, outcome.kind === "answer" ? outcome.text : (message.text?.body ?? null));

      if (control === "opt_out") await tx.contact.update({ where: { id: contact.id }, data: { optedOutAt: contact.optedOutAt ?? new Date() } });
      if (control === "opt_in") await tx.contact.update({ where: { id: contact.id }, data: { optedOutAt: null } });
      if (control === "handoff" && outcome.kind !== "skip") {
        await tx.conversation.update({ where: { id: conversation.id }, data: { pausedUntil: PAUSED_INDEFINITELY, pausedBy: "customer" } });
        await tx.deadLetter.create({
          data: {
            conversationId: conversation.id,
            dedupKey: `handoff.${message.id}`,
            source: "handoff",
            reason: "The customer asked for a person; the bot is paused for this conversation until staff resume it",
            detail: { wamid: message.id },
          },
        });
      }

      // A configured answer is a reply of its own, stored with the message: no Claude call.
      const canned =
        outcome.kind === "canned"
          ? await tx.reply.create({
              data: {
                conversationId: conversation.id,
                kind: "canned",
                state: "ready",
                text: outcome.text,
                parts: { create: splitForWhatsApp(outcome.text).map((part, seq) => ({ seq, text: part })) },
              },
            })
          : undefined;
      return tx.inboundMessage.create({
        data: {
          wamid: message.id,
          conversationId: conversation.id,
          type: message.type,
          text,
          sentAt,
          payload: message as Prisma.InputJsonValue,
          skipReason: outcome.kind === "skip" ? outcome.reason : null,
          replyId: canned?.id ?? null,
        },
        select: { skipReason: true, replyId: true },
      });
    });
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    log.info({ event: "inbound.duplicate_in_db" }, "message already stored; the Redis claim was lost or this is a retry");
    stored = await deps.db.inboundMessage.findUniqueOrThrow({ where: { wamid: message.id }, select: { skipReason: true, replyId: true } });
  }

  if (stored.skipReason) {
    log.info({ event: "inbound.skipped", type: message.type, reason: stored.skipReason }, "message stored, not answered");
    return;
  }
  log.info({ event: "inbound.stored", conversation: conversation.id, type: message.type, canned: stored.replyId !== null }, "message stored");
  // Best effort: a failed read receipt must never block the reply.
  await deps.graph.markReadWithTyping(phoneNumberId, message.id).catch((error: unknown) => {
    log.warn({ event: "inbound.mark_read_failed", err: error }, "could not mark read / show typing");
  });
  await scheduleReply(deps.queues, conversation.id, deps.replyDebounceMs);
}

/** Opt-out, opt-in and handoff come before what the message says. */
function decide(
  settings: Config["conversation"],
  described: InboundOutcome,
  control: Control | undefined,
  state: { optedOut: boolean; paused: boolean },
): InboundOutcome {
  switch (control) {
    case "opt_out":
      // Confirm once; after that the bot stays silent.
      return state.optedOut ? { kind: "skip", reason: "opted out (repeated)" } : say(settings.optOutReply, "opted out");
    case "opt_in":
      return state.optedOut ? say(settings.optInReply, "opted back in") : described;
    case "handoff":
      if (state.optedOut) return { kind: "skip", reason: "customer opted out" };
      return state.paused ? { kind: "skip", reason: "bot paused for a person (repeated request)" } : say(settings.handoffReply, "asked for a person");
    default:
      if (state.optedOut) return { kind: "skip", reason: "customer opted out" };
      if (state.paused) return { kind: "skip", reason: "bot paused for a person" };
      return described;
  }
}

/** A reply to a specific message keeps that context for Claude (WHATSAPP.md §3, `context`). */
async function withQuote(tx: Prisma.TransactionClient, message: InboundJobData["message"], text: string | null): Promise<string | null> {
  const quotedId = (message as { context?: { id?: unknown } }).context?.id;
  if (!text || typeof quotedId !== "string") return text;
  const [theirs, ours] = await Promise.all([
    tx.inboundMessage.findUnique({ where: { wamid: quotedId }, select: { text: true } }),
    tx.outboundMessage.findUnique({ where: { wamid: quotedId }, select: { text: true } }),
  ]);
  const quoted = theirs?.text ?? ours?.text;
  return quoted ? `[Replying to ${ours ? "your" : "their earlier"} message: "${quoted.slice(0, 300)}"]\n${text}` : text;
}
