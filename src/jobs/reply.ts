import { randomUUID } from "node:crypto";
import { type Job, RateLimitError } from "bullmq";
import type { ClaudeClient } from "../ai/claude.ts";
import type { Config } from "../config.ts";
import type { Db } from "../db/client.ts";
import { recordDeadLetter } from "../dlq/dead-letters.ts";
import { PermanentError, RetryableError } from "../errors.ts";
import type { Conversation, Contact, Reply } from "../generated/prisma/client.ts";
import type { Logger } from "../logger.ts";
import { scheduleReply, type Queues, type ReplyJobData } from "../queue/queues.ts";
import { conversationTurns } from "../replies/history.ts";
import { appendParts } from "../replies/parts.ts";
import { splitForWhatsApp } from "../replies/split.ts";
import { templateInstead, windowOpen } from "../replies/window.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";
import { decideFate, type RetryDelaySettings, retryDelayMs } from "./policy.ts";

export interface ReplyDeps {
  db: Db;
  queues: Queues;
  graph: GraphClient;
  claude: ClaudeClient;
  logger: Logger;
  historyMessages: number;
  historyTokenBudget: number;
  retry: RetryDelaySettings;
  numbers: Config["numbers"];
  mediaMaxBytes: number;
}

type ConversationWithContact = Conversation & { contact: Contact };

/**
 * One reply for one conversation. BullMQ runs at most one of these per conversation at a
 * time (law 8, see scheduleReply); the reply is generated once and stored before it is sent
 * (law 4), and each part is sent at most once (law 5). A job handles one reply; when more
 * work is waiting it schedules the next job, so every reply has its own attempts.
 */
export async function processReply(deps: ReplyDeps, job: Job<ReplyJobData>): Promise<string> {
  const { conversationId } = job.data;
  const log = deps.logger.child({ conversation: conversationId, job: job.id });
  const conversation = await deps.db.conversation.findUnique({ where: { id: conversationId }, include: { contact: true } });
  if (!conversation) {
    log.warn({ event: "reply.no_conversation" }, "reply job for an unknown conversation");
    return "no_conversation";
  }

  const reply = (await pendingReply(deps.db, conversationId)) ?? (await claimUnanswered(deps.db, conversationId));
  if (!reply) return "nothing_to_answer";

  let outcome: string;
  try {
    await completeReply(deps, conversation, reply, log.child({ reply: reply.id }));
    outcome = "sent";
  } catch (error) {
    const fate = decideFate(error, job);
    if (fate.action === "throttle") {
      // BullMQ's queue-wide rate limit: every worker holds off every reply, and this job goes
      // back to waiting without spending an attempt.
      const delayMs = retryDelayMs(job.attemptsMade + 1, fate.failure, deps.retry);
      log.warn({ event: "reply.throttled", code: fate.failure.code, reason: fate.failure.reason, delayMs }, "Meta limits the sender; every reply waits");
      await deps.queues.reply.rateLimit(delayMs);
      throw new RateLimitError();
    }
    if (fate.action === "retry") {
      log.warn({ event: "reply.retry", reply: reply.id, code: fate.failure.code, reason: fate.failure.reason, attempt: job.attemptsMade + 1 }, "reply failed; will retry");
      throw fate.failure;
    }
    const letter = await recordDeadLetter(deps.db, {
      conversationId,
      replyId: reply.id,
      failure: fate.failure,
      attempts: job.attemptsMade + 1,
      dedupKey: `reply.${reply.id}.${randomUUID()}`,
    });
    log.error(
      { event: "reply.dead_lettered", reply: reply.id, deadLetter: letter?.id, source: fate.failure.source, code: fate.failure.code, reason: fate.failure.reason },
      "reply dead-lettered",
    );
    outcome = "dead_lettered";
  }

  if (await hasWork(deps.db, conversationId)) await scheduleReply(deps.queues, conversationId, 0);
  return outcome;
}

const pendingReply = (db: Db, conversationId: string) =>
  db.reply.findFirst({ where: { conversationId, state: { in: ["generating", "ready"] } }, orderBy: { createdAt: "asc" } });

async function hasWork(db: Db, conversationId: string): Promise<boolean> {
  const [replies, messages] = await Promise.all([
    db.reply.count({ where: { conversationId, state: { in: ["generating", "ready"] } } }),
    db.inboundMessage.count({ where: { conversationId, replyId: null, skipReason: null } }),
  ]);
  return replies + messages > 0;
}

/** Binds every unanswered message of the conversation to a new reply, atomically. */
async function claimUnanswered(db: Db, conversationId: string): Promise<Reply | null> {
  return db.$transaction(async (tx) => {
    const unanswered = await tx.inboundMessage.findMany({
      where: { conversationId, replyId: null, skipReason: null },
      select: { id: true },
    });
    if (unanswered.length === 0) return null;
    const reply = await tx.reply.create({ data: { conversationId } });
    const bound = await tx.inboundMessage.updateMany({
      where: { id: { in: unanswered.map((m) => m.id) }, replyId: null },
      data: { replyId: reply.id },
    });
    if (bound.count === 0) throw new Error("unanswered messages were claimed concurrently");
    return reply;
  });
}

async function completeReply(deps: ReplyDeps, conversation: ConversationWithContact, reply: Reply, log: Logger): Promise<void> {
  // Checked before Claude is paid for a reply that could not be sent anyway, and again after.
  if (!(await windowOpen(deps.db, conversation.id))) await templateInstead(deps, conversation, reply.id, log);
  else if (reply.state === "generating") {
    await generate(deps, conversation, reply, log);
    if (!(await windowOpen(deps.db, conversation.id))) await templateInstead(deps, conversation, reply.id, log);
  }
  await sendParts(deps, conversation, reply.id, log);
  // Conditional: a "failed" status webhook may already have dead-lettered it.
  await deps.db.reply.updateMany({ where: { id: reply.id, state: "ready" }, data: { state: "sent", sentAt: new Date() } });
  log.info({ event: "reply.sent" }, "reply sent");
}

/** The one Claude call for these messages; its result is stored before anything is sent (law 4). */
async function generate(deps: ReplyDeps, conversation: Conversation, reply: Reply, log: Logger): Promise<void> {
  const turns = await conversationTurns(deps, reply);
  if (turns.length === 0) throw new Error(`reply ${reply.id} has no messages to answer`);
  const generated = await deps.claude.generate(turns, deps.numbers.get(conversation.phoneNumberId)?.systemPrompt);
  const parts = splitForWhatsApp(generated.text);
  await keepTrying(log, () => deps.db.$transaction(async (tx) => {
    const updated = await tx.reply.updateMany({
      where: { id: reply.id, state: "generating" },
      data: {
        state: "ready",
        text: generated.text,
        model: generated.model,
        inputTokens: generated.inputTokens,
        outputTokens: generated.outputTokens,
        cacheReadTokens: generated.cacheReadTokens,
        cacheCreationTokens: generated.cacheCreationTokens,
      },
    });
    if (updated.count !== 1) throw new DraftConflict(`reply ${reply.id} left "generating" while Claude was writing it`);
    await appendParts(tx, reply.id, parts);
  }));
  log.info(
    {
      event: "reply.generated",
      model: generated.model,
      inputTokens: generated.inputTokens,
      outputTokens: generated.outputTokens,
      cacheReadTokens: generated.cacheReadTokens,
      parts: parts.length,
    },
    "reply generated",
  );
}

class DraftConflict extends Error {
  override readonly name = "DraftConflict";
}

/**
 * Storing a paid-for draft is worth waiting for: if a busy database made the job fail here,
 * its retry would call Claude again (law 4). So the write is retried in process first.
 */
async function keepTrying<T>(log: Logger, write: () => Promise<T>, attempts = 5): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (error) {
      if (error instanceof DraftConflict || attempt >= attempts) throw error;
      log.warn({ event: "reply.store_retry", attempt, err: error }, "could not store the draft yet; trying again");
      await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** attempt));
    }
  }
}

async function sendParts(deps: ReplyDeps, conversation: ConversationWithContact, replyId: string, log: Logger): Promise<void> {
  const parts = await deps.db.outboundMessage.findMany({
    where: { replyId, sendState: { not: "accepted" } },
    orderBy: { seq: "asc" },
  });
  if (parts.length === 0) return;
  const replyTo = await quoteTarget(deps.db, conversation.id, replyId);
  const firstSeq = (await deps.db.outboundMessage.findFirst({ where: { replyId }, orderBy: { seq: "asc" }, select: { seq: true } }))?.seq;

  for (const part of parts) {
    if (part.sendState === "sending") {
      if (part.wamid) {
        // A status webhook carried our id back (biz_opaque_callback_data): it did go out.
        await deps.db.outboundMessage.update({ where: { id: part.id }, data: { sendState: "accepted", acceptedAt: new Date() } });
        continue;
      }
      // Law 5's unavoidable window: we started this send and never learned its outcome.
      log.warn({ event: "reply.resend_unconfirmed", part: part.id }, "previous send of this part is unconfirmed; sending again");
    } else {
      await deps.db.outboundMessage.update({ where: { id: part.id }, data: { sendState: "sending" } });
    }
    const template = part.template ? deps.numbers.get(conversation.phoneNumberId)?.windowClosedTemplate : undefined;
    if (part.template && template?.name !== part.template) {
      // Never send a template's stand-in text as a free-form message.
      throw new PermanentError({ source: "window", code: "template_missing", reason: `Template "${part.template}" is no longer configured for this number` });
    }
    let wamid: string;
    try {
      ({ wamid } = template
        ? await deps.graph.sendTemplate({
            phoneNumberId: conversation.phoneNumberId,
            to: conversation.contact.waId,
            name: template.name,
            language: template.language,
            bizOpaqueCallbackData: part.id,
          })
        : await deps.graph.sendText({
            phoneNumberId: conversation.phoneNumberId,
            to: conversation.contact.waId,
            text: part.text,
            bizOpaqueCallbackData: part.id,
            replyTo: part.seq === firstSeq ? replyTo : undefined,
          }));
    } catch (error) {
      // Meta answered with an error, so it did not take the message: safe to send again later.
      if (!(error instanceof RetryableError && error.ambiguous)) {
        await deps.db.outboundMessage.update({ where: { id: part.id }, data: { sendState: "pending" } });
      }
      throw error;
    }
    await deps.db.outboundMessage.update({
      where: { id: part.id },
      data: { sendState: "accepted", wamid, acceptedAt: new Date() },
    });
  }
}

/**
 * When the customer has written again since the messages this reply answers, quote the
 * newest of them, so it is clear what the answer is about. Otherwise quote nothing.
 */
async function quoteTarget(db: Db, conversationId: string, replyId: string): Promise<string | undefined> {
  // By storage order: Meta's timestamps have one-second resolution, too coarse for a burst.
  const answered = await db.inboundMessage.findFirst({ where: { replyId }, orderBy: { createdAt: "desc" }, select: { wamid: true, createdAt: true } });
  if (!answered) return undefined;
  const newer = await db.inboundMessage.count({ where: { conversationId, createdAt: { gt: answered.createdAt } } });
  return newer > 0 ? answered.wamid : undefined;
}
