import { randomUUID } from "node:crypto";
import type { Job } from "bullmq";
import type { Db } from "../db/client.ts";
import { type DeadLetterDeps, recordDeadLetter } from "../dlq/dead-letters.ts";
import type { Logger } from "../logger.ts";
import { recordInbound } from "../messages/store.ts";
import { type EventJobData, type InboundJobData, type ReplyJobData, type StatusJobData, senderOf } from "../queue/catalog.ts";
import { hasLiveReplyJob, type Queues, scheduleReply } from "../queue/queues.ts";
import type { RedisClient } from "../queue/redis.ts";
import { markAccepted, storeDraft } from "../replies/state.ts";
import { wellFormed } from "./inbound.ts";
import { deadLetterFailedDelivery } from "./status.ts";

/**
 * The reconciler proves law 6: nothing ends where no one looks. At start-up and every
 * RECONCILE_INTERVAL_MS it sweeps for
 *   - stored messages that are neither answered, nor dead-lettered, nor deliberately skipped,
 *     and replies never finished, older than RECONCILE_AFTER_MS, whose conversation has no
 *     reply job that will run: driven again once; found so a second time, dead-lettered;
 *   - jobs in BullMQ's failed set (attempts spent on a bug, a job stalled twice): driven again
 *     once; failed a second time, recorded as a dead letter (or, for a receipt, logged), and
 *     removed: the durable record is Postgres.
 * Every action is logged. Sweeps may overlap (two workers starting together): each step is a
 * conditional change, so a second sweep finds nothing left to do.
 */

export interface ReconcileDeps extends DeadLetterDeps {
  db: Db;
  queues: Queues;
  /** For the "driven again once" marks, beside the queues. */
  redis: RedisClient;
  prefix: string;
  logger: Logger;
  afterMs: number;
}

/** A mark lives long enough to tell "driven again and stuck again" from a new problem, days later. */
const markTtlMs = (afterMs: number) => Math.max(10 * afterMs, 60 * 60 * 1000);
const BATCH = 200;

export interface SweepResult {
  redriven: number;
  deadLettered: number;
  failedJobs: number;
}

export async function reconcile(deps: ReconcileDeps): Promise<SweepResult> {
  const result: SweepResult = { redriven: 0, deadLettered: 0, failedJobs: 0 };
  await settleFailedJobs(deps, result);
  await settleStuckConversations(deps, result);
  if (result.redriven + result.deadLettered + result.failedJobs > 0) {
    deps.logger.warn({ event: "reconcile.swept", ...result }, "reconciler drove or dead-lettered work nobody was doing");
  }
  return result;
}

/** True the first time for `what`, false while its mark lives: "driven again, once". */
async function firstTime(deps: ReconcileDeps, what: string): Promise<boolean> {
  return (await deps.redis.set(`${deps.prefix}:reconciled:${what}`, "1", "PX", markTtlMs(deps.afterMs), "NX")) === "OK";
}

async function settleStuckConversations(deps: ReconcileDeps, result: SweepResult): Promise<void> {
  const stuck = await deps.db.$queryRaw<{ conversationId: string }[]>`
    SELECT conversation_id AS "conversationId" FROM inbound_messages
    WHERE reply_id IS NULL AND skip_reason IS NULL AND created_at < now() - (${deps.afterMs}::double precision * interval '1 millisecond')
    UNION
    SELECT conversation_id FROM replies
    WHERE state IN ('generating', 'ready') AND updated_at < now() - (${deps.afterMs}::double precision * interval '1 millisecond')
    LIMIT ${BATCH}`;
  for (const { conversationId } of stuck) {
    if (await hasLiveReplyJob(deps.queues, conversationId)) continue; // someone is on it
    const log = deps.logger.child({ conversation: conversationId });
    if (await firstTime(deps, `conv.${conversationId}`)) {
      await scheduleReply(deps.queues, conversationId, 0);
      log.warn({ event: "reconcile.redriven" }, "unanswered work had no reply job; driven again");
      result.redriven++;
      continue;
    }
    result.deadLettered += await deadLetterConversation(deps, conversationId, {
      code: "stuck",
      reason: "The reply was never completed: it was driven again and stalled again. Review the conversation and resend or discard.",
    });
    log.error({ event: "reconcile.dead_lettered" }, "unanswered work stalled twice; dead-lettered");
  }
}

/**
 * Dead-letters what a conversation left unfinished: its unfinished replies, and its unanswered
 * messages bound to one new reply (without a draft: staff write it, or regenerate).
 */
async function deadLetterConversation(
  deps: DeadLetterDeps,
  conversationId: string,
  why: { code: string; reason: string; detail?: Record<string, unknown> | undefined },
): Promise<number> {
  const { db } = deps;
  const failure = { source: "internal" as const, code: why.code, reason: why.reason, detail: why.detail };
  const unfinished = await db.reply.findMany({ where: { conversationId, state: { in: ["generating", "ready"] } }, select: { id: true } });
  const orphan = await db.$transaction(async (tx) => {
    const messages = await tx.inboundMessage.findMany({ where: { conversationId, replyId: null, skipReason: null }, select: { id: true } });
    if (messages.length === 0) return null;
    const reply = await tx.reply.create({ data: { conversationId, state: "dead" } });
    await tx.inboundMessage.updateMany({ where: { id: { in: messages.map((m) => m.id) }, replyId: null }, data: { replyId: reply.id } });
    return reply.id;
  });
  const replyIds = [...unfinished.map((r) => r.id), ...(orphan ? [orphan] : [])];
  for (const replyId of replyIds) {
    await recordDeadLetter(deps, { conversationId, replyId, failure, attempts: 0, dedupKey: `reconcile.${replyId}.${randomUUID()}` });
  }
  return replyIds.length;
}

async function settleFailedJobs(deps: ReconcileDeps, result: SweepResult): Promise<void> {
  const { inbound, reply, status } = deps.queues;
  for (const job of await reply.getFailed(0, BATCH - 1)) {
    await settleFailedReplyJob(deps, job);
    result.failedJobs++;
  }
  for (const job of await inbound.getFailed(0, BATCH - 1)) {
    await settleFailedInboundJob(deps, job, result);
    result.failedJobs++;
  }
  for (const job of await status.getFailed(0, BATCH - 1)) {
    await settleFailedStatusJob(deps, job);
    result.failedJobs++;
  }
  for (const job of await deps.queues.events.getFailed(0, BATCH - 1)) {
    await settleFailedEventJob(deps, job);
    result.failedJobs++;
  }
}

/**
 * A reply job gave up outside its own dead-lettering (it stalled twice, say). The work it
 * stood for is in Postgres; the conversation is driven again by a fresh job (the stuck-work
 * rule dead-letters it if that stalls too). A draft the job kept is stored first: it was
 * paid for (law 4).
 */
async function settleFailedReplyJob(deps: ReconcileDeps, job: Job<ReplyJobData>): Promise<void> {
  const { conversationId, draft, accepted } = job.data;
  for (const [partId, wamid] of Object.entries(accepted ?? {})) await markAccepted(deps.db, partId, wamid);
  if (draft) await storeDraft(deps.db, null, draft.replyId, draft);
  await scheduleReply(deps.queues, conversationId, 0);
  await job.remove();
  deps.logger.warn(
    {
      event: "reconcile.failed_job_redriven",
      queue: "reply",
      conversation: conversationId,
      job: job.id,
      failedReason: job.failedReason,
      draftKept: draft !== undefined,
    },
    "failed reply job: conversation driven again",
  );
}

async function settleFailedInboundJob(deps: ReconcileDeps, job: Job<InboundJobData>, result: SweepResult): Promise<void> {
  const { phoneNumberId } = job.data;
  const message = wellFormed(job.data.message);
  const log = deps.logger.child({ wamid: message.id, job: job.id });
  const stored = await deps.db.inboundMessage.findUnique({ where: { wamid: message.id }, select: { conversationId: true } });
  if (stored) {
    // Stored: the stuck-work sweep sees to its answer.
    await job.remove();
    log.warn({ event: "reconcile.failed_job_settled", queue: "inbound", failedReason: job.failedReason }, "failed inbound job; its message is stored");
    return;
  }
  if (await firstTime(deps, `job.${job.id}`)) {
    await job.retry("failed", { resetAttemptsMade: true });
    log.warn({ event: "reconcile.failed_job_redriven", queue: "inbound", failedReason: job.failedReason }, "failed inbound job driven again");
    return;
  }
  // It failed twice over: keep the message itself as a dead letter, for staff to answer.
  const kept = await recordInbound(deps.db, { sender: senderOf(job.data) }, phoneNumberId, {
    wamid: message.id,
    type: message.type,
    text: message.text?.body ?? null,
    cannedText: null,
    control: null,
    skipReason: null,
    refersTo: null,
    arrival: null,
    sentAt: new Date(Number(message.timestamp) * 1000),
    payload: message,
  });
  result.deadLettered += await deadLetterConversation(deps, kept.conversationId, {
    code: "inbound_failed",
    reason: "The message could not be processed, even when tried again; it is kept here for staff to answer.",
    detail: { failedReason: job.failedReason },
  });
  await job.remove();
  log.error({ event: "reconcile.dead_lettered", queue: "inbound", failedReason: job.failedReason }, "inbound job failed twice; message dead-lettered");
}

/**
 * A receipt carries no customer message: driven again once, then dropped with a log line;
 * but a "failed" one means a reply never arrived, so its reply becomes a dead letter.
 */
async function settleFailedStatusJob(deps: ReconcileDeps, job: Job<StatusJobData>): Promise<void> {
  const { status } = job.data;
  const log = deps.logger.child({ wamid: status.id, status: status.status, job: job.id });
  if (await firstTime(deps, `job.${job.id}`)) {
    await job.retry("failed", { resetAttemptsMade: true });
    log.warn({ event: "reconcile.failed_job_redriven", queue: "status", failedReason: job.failedReason }, "failed status job driven again");
    return;
  }
  if (status.status === "failed") {
    const letter = await deadLetterFailedDelivery(deps, status);
    log.error(
      { event: "reconcile.dead_lettered", queue: "status", deadLetter: letter?.id, failedReason: job.failedReason },
      "failed-delivery status could not be processed; its reply dead-lettered",
    );
  } else {
    log.error({ event: "reconcile.status_dropped", failedReason: job.failedReason }, "status job failed twice; dropped");
  }
  await job.remove();
}

/** A business-side event (an echo, a preference, a BSUID change) carries no customer message: driven again once, then logged and dropped. */
async function settleFailedEventJob(deps: ReconcileDeps, job: Job<EventJobData>): Promise<void> {
  const log = deps.logger.child({ job: job.id, type: job.data.type });
  if (await firstTime(deps, `job.${job.id}`)) {
    await job.retry("failed", { resetAttemptsMade: true });
    log.warn({ event: "reconcile.failed_job_redriven", queue: "events", failedReason: job.failedReason }, "failed event job driven again");
    return;
  }
  await job.remove();
  log.error({ event: "reconcile.event_dropped", failedReason: job.failedReason, data: job.data }, "event job failed twice; dropped");
}
