import { randomUUID } from "node:crypto";
import type { Job } from "bullmq";
import type { Clock } from "../clock.ts";
import { cleanRedisOf } from "../customer-data/erase.ts";
import type { Db } from "../db/client.ts";
import type { DeadLetterDesk } from "../dlq/dead-letters.ts";
import { forTheQueue } from "../errors.ts";
import { isInfrastructureFailure } from "../infrastructure.ts";
import type { Logger } from "../logger.ts";
import { type EventJobData, type InboundJobData, type ReplyJobData, readJob, type StatusJobData, senderOf } from "../queue/catalog.ts";
import { hasLiveReplyJob, type Queues, scheduleReply } from "../queue/queues.ts";
import type { RedisClient } from "../queue/redis.ts";
import type { StoredAnswers } from "../queue/stored-answers.ts";
import { dueCsatAsks } from "../state/csat.ts";
import { unfinishedErasures } from "../state/data-requests.ts";
import { findPartOfStatus, markAccepted } from "../state/parts.ts";
import { storeDraft } from "../state/replies.ts";
import type { CsatAsks } from "./csat.ts";
import { keepForStaff, keepUnreadableMessage } from "./inbound.ts";
import type { Processor } from "./processor.ts";
import { deadLetterFailedDelivery } from "./status.ts";

/**
 * The reconciler proves law 6: nothing ends where no one looks. At start-up and every
 * RECONCILE_INTERVAL_MS it sweeps for
 *   - stored messages that are neither answered, nor dead-lettered, nor deliberately skipped,
 *     and replies never finished, older than RECONCILE_AFTER_MS, whose conversation has no
 *     reply job that will run: driven again once; found so a second time, dead-lettered;
 *   - CSAT asks due and still pending (their delayed job lost, or due while no worker ran):
 *     asked now, or cancelled or skipped as their job would have;
 *   - jobs in BullMQ's failed set (attempts spent on a bug, a job stalled twice): driven again
 *     once; failed a second time, recorded as a dead letter (or, for a receipt, logged), and
 *     removed: the durable record is Postgres;
 *   - erases that left the customer in Redis (their process stopped between the commit and the
 *     clean-up, Redis was away, or a job of theirs was running): the jobs and stored answers
 *     that still hold them removed now (src/customer-data/erase.ts).
 * Every action is logged. Sweeps may overlap (two workers starting together): each step is a
 * conditional change, so a second sweep finds nothing left to do.
 */

export interface ReconcileDeps {
  db: Db;
  queues: Queues;
  deadLetters: DeadLetterDesk;
  csat: CsatAsks;
  clock: Clock;
  /** For the "driven again once" marks, beside the queues. */
  redis: RedisClient;
  /** The staff API's stored answers: an erase left unfinished forgets those quoting its customer. */
  storedAnswers: StoredAnswers;
  logger: Logger;
}

/**
 * How old unanswered work must be before the sweep acts on it (RECONCILE_AFTER_MS).
 */
export interface ReconcileSettings {
  afterMs: number;
  /** The queues' prefix: the "driven again once" marks are kept under it. */
  queuePrefix: string;
}

/** A mark lives long enough to tell "driven again and stuck again" from a new problem, days later. */
const markTtlMs = (afterMs: number) => Math.max(10 * afterMs, 60 * 60 * 1000);
const BATCH = 200;

export interface SweepResult {
  redriven: number;
  deadLettered: number;
  failedJobs: number;
  /** Erases whose clean-up of Redis this sweep finished. */
  erasesFinished: number;
  /** Items whose handling threw: each logged (reconcile.item_failed) and skipped, the sweep going on. */
  skipped: number;
}

/** The sweep's job: every run sweeps once, whatever the job carries. */
export function reconcileProcessor(deps: ReconcileDeps, settings: ReconcileSettings): Processor<"reconcile"> {
  return { run: async () => void (await reconcile(deps, settings)) };
}

export async function reconcile(deps: ReconcileDeps, settings: ReconcileSettings): Promise<SweepResult> {
  const result: SweepResult = { redriven: 0, deadLettered: 0, failedJobs: 0, erasesFinished: 0, skipped: 0 };
  await settleFailedJobs(deps, settings, result);
  await settleStuckConversations(deps, settings, result);
  await settleDueCsatAsks(deps, result);
  await finishErasures(deps, settings, result);
  if (Object.values(result).some((n) => n > 0)) {
    deps.logger.warn({ event: "reconcile.swept", ...result }, "reconciler drove or dead-lettered work nobody was doing");
  }
  return result;
}

/**
 * One item of the sweep, on its own: one that throws is logged with what it was and skipped,
 * and the sweep goes on to the next (a poison job must not keep every later one, and every
 * stuck conversation, from being driven again). Postgres or Redis being away is not the item's
 * fault: that ends the sweep, which runs again at the next interval.
 */
async function isolated(deps: ReconcileDeps, result: SweepResult, item: Record<string, unknown>, handle: () => Promise<void>): Promise<void> {
  try {
    await handle();
  } catch (error) {
    if (isInfrastructureFailure(error)) throw error;
    result.skipped++;
    deps.logger.error(
      { event: "reconcile.item_failed", ...item, err: forTheQueue(error) },
      "could not settle this item; the sweep goes on, and the next one tries it again",
    );
  }
}

/** True the first time for `what`, false while its mark lives: "driven again, once". */
async function firstTime(deps: ReconcileDeps, settings: ReconcileSettings, what: string): Promise<boolean> {
  return (await deps.redis.set(`${settings.queuePrefix}:reconciled:${what}`, "1", "PX", markTtlMs(settings.afterMs), "NX")) === "OK";
}

async function settleStuckConversations(deps: ReconcileDeps, settings: ReconcileSettings, result: SweepResult): Promise<void> {
  const before = new Date(deps.clock.now().getTime() - settings.afterMs);
  // Oldest first: what has waited longest is looked at first when there is more than a batch.
  const stuck = await deps.db.$queryRaw<{ conversationId: string }[]>`
    SELECT "conversationId" FROM (
      SELECT conversation_id AS "conversationId", min(created_at) AS since FROM inbound_messages
      WHERE reply_id IS NULL AND skip_reason IS NULL AND created_at < ${before}::timestamptz GROUP BY conversation_id
      UNION ALL
      SELECT conversation_id, min(updated_at) FROM replies
      WHERE state IN ('generating', 'ready') AND updated_at < ${before}::timestamptz GROUP BY conversation_id
    ) s
    GROUP BY "conversationId" ORDER BY min(since) LIMIT ${BATCH}`;
  for (const { conversationId } of stuck) {
    await isolated(deps, result, { conversation: conversationId }, async () => {
      if (await hasLiveReplyJob(deps.queues, conversationId)) return; // someone is on it
      const log = deps.logger.child({ conversation: conversationId });
      if (await firstTime(deps, settings, `conv.${conversationId}`)) {
        await scheduleReply(deps.queues, conversationId, 0);
        log.warn({ event: "reconcile.redriven" }, "unanswered work had no reply job; driven again");
        result.redriven++;
        return;
      }
      result.deadLettered += await deps.deadLetters.conversation(
        conversationId,
        {
          source: "internal",
          code: "stuck",
          reason: "The reply was never completed: it was driven again and stalled again. Review the conversation and resend or discard.",
          detail: undefined,
        },
        `reconcile.${randomUUID()}`,
      );
      log.error({ event: "reconcile.dead_lettered" }, "unanswered work stalled twice; dead-lettered");
    });
  }
}

/** CSAT asks whose job never woke them: each run as its job would have (at most once: only one run moves an ask out of pending). */
async function settleDueCsatAsks(deps: ReconcileDeps, result: SweepResult): Promise<void> {
  if (!deps.csat.enabled) return;
  for (const ask of await dueCsatAsks(deps.db, deps.clock.now(), BATCH)) {
    await isolated(deps, result, { csat: ask.id }, async () => {
      const asked = await deps.csat.run(ask.id);
      if (asked.outcome === "sent") {
        result.redriven++;
        deps.logger.warn({ event: "reconcile.csat_asked", csat: ask.id, conversation: ask.conversationId }, "a CSAT ask whose job never ran was sent");
      }
    });
  }
}

/** Erases that left Redis holding the customer (their process stopped after the commit): Redis cleaned of them now. */
async function finishErasures(deps: ReconcileDeps, settings: ReconcileSettings, result: SweepResult): Promise<void> {
  const before = new Date(deps.clock.now().getTime() - settings.afterMs);
  for (const erasure of await unfinishedErasures(deps.db, before, BATCH)) {
    await isolated(deps, result, { erasure: erasure.id }, async () => {
      const removed = await cleanRedisOf(deps, { requestId: erasure.id, needles: erasure.redisNeedles });
      if (removed.held > 0) {
        deps.logger.info(
          { event: "reconcile.erase_waiting", request: erasure.id, ...removed },
          "a job of an erased customer is still running; removed by a later sweep",
        );
        return;
      }
      result.erasesFinished++;
      deps.logger.warn({ event: "reconcile.erase_finished", request: erasure.id, ...removed }, "an erase had left the customer in Redis; removed now");
    });
  }
}

async function settleFailedJobs(deps: ReconcileDeps, settings: ReconcileSettings, result: SweepResult): Promise<void> {
  const { inbound, reply, status, events } = deps.queues;
  const each = async <T>(queue: string, jobs: Job<T>[], settle: (job: Job<T>) => Promise<void>) => {
    for (const job of jobs) {
      await isolated(deps, result, { queue, job: job.id }, async () => {
        await settle(job);
        result.failedJobs++;
      });
    }
  };
  await each("reply", await reply.getFailed(0, BATCH - 1), (job) => settleFailedReplyJob(deps, job));
  await each("inbound", await inbound.getFailed(0, BATCH - 1), (job) => settleFailedInboundJob(deps, settings, job, result));
  await each("status", await status.getFailed(0, BATCH - 1), (job) => settleFailedStatusJob(deps, settings, job));
  await each<EventJobData>("events", await events.getFailed(0, BATCH - 1), (job) => settleFailedEventJob(deps, settings, job));
}

/**
 * A reply job gave up outside its own dead-lettering (it stalled twice, say). The work it
 * stood for is in Postgres; the conversation is driven again by a fresh job (the stuck-work
 * rule dead-letters it if that stalls too). A draft the job kept is stored first: it was
 * paid for (law 4).
 */
async function settleFailedReplyJob(deps: ReconcileDeps, job: Job<ReplyJobData>): Promise<void> {
  const read = readJob("reply", job.data, job.timestamp);
  if (read.ok) {
    const { draft, accepted } = read.data;
    for (const [partId, wamid] of Object.entries(accepted ?? {})) await markAccepted(deps.db, partId, wamid, deps.clock.now());
    if (draft) await storeDraft(deps.db, null, draft.replyId, draft, deps.clock.now());
    await scheduleReply(deps.queues, read.data.conversationId, 0);
  }
  await job.remove();
  deps.logger.warn(
    {
      event: "reconcile.failed_job_redriven",
      queue: "reply",
      conversation: read.ok ? read.data.conversationId : undefined,
      job: job.id,
      failedReason: job.failedReason,
      draftKept: read.ok && read.data.draft !== undefined,
    },
    "failed reply job: conversation driven again",
  );
}

async function settleFailedInboundJob(deps: ReconcileDeps, settings: ReconcileSettings, job: Job<InboundJobData>, result: SweepResult): Promise<void> {
  const read = readJob("inbound", job.data, job.timestamp);
  const log = deps.logger.child({ job: job.id });
  if (!read.ok) {
    // Its worker would settle it at once (workers.ts): do the same here.
    await keepUnreadableMessage(deps, job.data, read.reason);
    await job.remove();
    log.error(
      { event: "reconcile.dead_lettered", queue: "inbound", reason: read.reason },
      "failed inbound job's data can never be processed; message kept for staff",
    );
    return;
  }
  const { phoneNumberId, message } = read.data;
  const stored = await deps.db.inboundMessage.findUnique({ where: { wamid: message.id }, select: { conversationId: true } });
  if (stored) {
    // Stored: the stuck-work sweep sees to its answer.
    await job.remove();
    log.warn({ event: "reconcile.failed_job_settled", queue: "inbound", failedReason: job.failedReason }, "failed inbound job; its message is stored");
    return;
  }
  if (await firstTime(deps, settings, `job.${job.id}`)) {
    await job.retry("failed", { resetAttemptsMade: true });
    log.warn({ event: "reconcile.failed_job_redriven", queue: "inbound", failedReason: job.failedReason }, "failed inbound job driven again");
    return;
  }
  // It failed twice over: keep the message itself as a dead letter, for staff to answer.
  await keepForStaff(
    deps,
    { phoneNumberId, sender: senderOf(read.data), message, sentAt: new Date(Number(message.timestamp) * 1000) },
    {
      code: "inbound_failed",
      reason: "The message could not be processed, even when tried again; it is kept here for staff to answer.",
      detail: { failedReason: job.failedReason },
    },
  );
  result.deadLettered++;
  await job.remove();
  log.error({ event: "reconcile.dead_lettered", queue: "inbound", failedReason: job.failedReason }, "inbound job failed twice; message dead-lettered");
}

/**
 * A receipt carries no customer message: driven again once, then dropped with a log line;
 * but a "failed" one means a reply never arrived, so its reply becomes a dead letter.
 */
async function settleFailedStatusJob(deps: ReconcileDeps, settings: ReconcileSettings, job: Job<StatusJobData>): Promise<void> {
  const read = readJob("status", job.data, job.timestamp);
  const log = deps.logger.child({ job: job.id });
  if (read.ok && (await firstTime(deps, settings, `job.${job.id}`))) {
    await job.retry("failed", { resetAttemptsMade: true });
    log.warn({ event: "reconcile.failed_job_redriven", queue: "status", failedReason: job.failedReason }, "failed status job driven again");
    return;
  }
  const status = read.ok ? read.data.status : undefined;
  const part = status?.status === "failed" ? await findPartOfStatus(deps.db, status.id, status.biz_opaque_callback_data) : null;
  if (status && part) {
    const letter = await deadLetterFailedDelivery(deps, status, part.replyId);
    log.error(
      { event: "reconcile.dead_lettered", queue: "status", deadLetter: letter === "csat_dropped" ? undefined : letter?.id, failedReason: job.failedReason },
      "failed-delivery status could not be processed; its reply dead-lettered",
    );
  } else {
    log.error({ event: "reconcile.status_dropped", failedReason: job.failedReason }, "status job failed twice; dropped");
  }
  await job.remove();
}

/** A business-side event (an echo, a preference, a BSUID change) carries no customer message: driven again once, then logged and dropped. */
async function settleFailedEventJob(deps: ReconcileDeps, settings: ReconcileSettings, job: Job<EventJobData>): Promise<void> {
  const log = deps.logger.child({ job: job.id, type: job.data.type });
  if (await firstTime(deps, settings, `job.${job.id}`)) {
    await job.retry("failed", { resetAttemptsMade: true });
    log.warn({ event: "reconcile.failed_job_redriven", queue: "events", failedReason: job.failedReason }, "failed event job driven again");
    return;
  }
  await job.remove();
  // Its data stays out of the log: an echo carries a message's words and a customer's number.
  log.error({ event: "reconcile.event_dropped", failedReason: job.failedReason }, "event job failed twice; dropped");
}
