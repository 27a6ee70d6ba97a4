import type { Logger } from "../logger.ts";
import type { Db } from "../db/client.ts";
import { isUniqueViolation } from "../db/client.ts";
import type { Prisma } from "../generated/prisma/client.ts";
import { scheduleReply, type InboundJobData, type Queues } from "../queue/queues.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";

/** Which message types the bot answers. Everything else is stored and skipped with a reason (law 6). */
const ANSWERED_TYPES = new Set(["text"]);

export interface InboundDeps {
  db: Db;
  queues: Queues;
  graph: GraphClient;
  logger: Logger;
  replyDebounceMs: number;
}

/**
 * Stores the message (its UNIQUE wamid is the second line of defence against duplicates),
 * shows the user we are on it, and schedules the conversation's reply. Safe to run twice.
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
  await deps.db.conversation.updateMany({
    where: { id: conversation.id, OR: [{ lastInboundAt: null }, { lastInboundAt: { lt: sentAt } }] },
    data: { lastInboundAt: sentAt },
  });

  const answered = ANSWERED_TYPES.has(message.type);
  const skipReason = answered ? null : `type "${message.type}" is not answered yet`;
  const stored = await deps.db.inboundMessage
    .create({
      data: {
        wamid: message.id,
        conversationId: conversation.id,
        type: message.type,
        text: message.text?.body ?? null,
        sentAt,
        payload: message as Prisma.InputJsonValue,
        skipReason,
      },
    })
    .catch(async (error: unknown) => {
      if (!isUniqueViolation(error)) throw error;
      log.info({ event: "inbound.duplicate_in_db" }, "message already stored; the Redis claim was lost or this is a retry");
      return deps.db.inboundMessage.findUniqueOrThrow({ where: { wamid: message.id } });
    });

  if (stored.skipReason) {
    log.info({ event: "inbound.skipped", type: message.type, reason: stored.skipReason }, "message stored, not answered");
    return;
  }
  if (stored.replyId) return; // answered already: this is a late duplicate.

  log.info({ event: "inbound.stored", conversation: conversation.id, type: message.type }, "message stored");
  // Best effort: a failed read receipt must never block the reply.
  await deps.graph.markReadWithTyping(phoneNumberId, message.id).catch((error: unknown) => {
    log.warn({ event: "inbound.mark_read_failed", err: error }, "could not mark read / show typing");
  });
  await scheduleReply(deps.queues, conversation.id, deps.replyDebounceMs);
}
