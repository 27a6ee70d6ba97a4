import type { Queue } from "bullmq";
import type { Clock } from "../clock.ts";
import type { StaffNotifySettings } from "../config/config.ts";
import type { Db } from "../db/client.ts";
import { describeError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { batchItems, findBatch, makeBatch, recordChannelSent, recordFailure, undeliveredBatches } from "../notify/batches.ts";
import { DeliveryFailed, type StaffChannels } from "../notify/channels.ts";
import { composeStaffMessage } from "../notify/message.ts";
import { deliverJobId, type NotifyJobData } from "../queue/catalog.ts";
import type { RetryDelaySettings } from "./backoff.ts";
import type { Processor } from "./processor.ts";

/**
 * Law 14, for staff: a new dead letter or handoff is told to them without watching the page.
 *
 * Nothing in the dead-letter path changes: a "collect" job (a BullMQ job scheduler, every
 * quarter of STAFF_NOTIFY_BATCH_MS, one worker running each) gathers the open dead letters
 * nobody was told of into one notification row (batches.ts, at most one per
 * STAFF_NOTIFY_BATCH_MS), then queues its "deliver" job, whose id is the notification's, so
 * it is never queued twice. Delivery is retried with backoff (receiver down, 5xx, SMTP
 * errors); when the job's attempts run out, or Redis lost it, the row is still pending and
 * the next collect drives it again: a notification is never lost. Each channel's success is
 * recorded as soon as it answers, so a retry after one channel took it does not send it there
 * again.
 */

export interface NotifierDeps {
  db: Db;
  queue: Queue<NotifyJobData>;
  logger: Logger;
  metrics: Pick<Metrics, "staffNotifications">;
  channels: StaffChannels;
  clock: Clock;
}

/** How often notifications are batched, where their links lead, and the longest backoff (a spent job is retried no sooner). */
export interface NotifierSettings extends Pick<StaffNotifySettings, "batchMs" | "publicBaseUrl"> {
  retry: RetryDelaySettings;
}

/** With RETRY_MAX_DELAY_MS's default (5 min), well over an hour of tries before the collect's slower ones. */
export const DELIVER_ATTEMPTS = 20;
/** Pending notifications looked at per collect. */
const REDRIVE_BATCH = 50;

/** How often to look: a quarter of the batch window, so a batch leaves at most a quarter late; at least every minute, for the pending ones. */
export const collectEveryMs = (batchMs: number) => Math.min(60_000, Math.max(100, Math.floor(batchMs / 4)));

/** A staff notification job: a delivery of one notification, or (no id) the scheduled collect. */
export function notifyProcessor(deps: NotifierDeps, settings: NotifierSettings): Processor<"notify"> {
  return {
    run: (job) => (job.data.notificationId ? deliverNotification(deps, settings, job.data.notificationId) : collectNotifications(deps, settings)),
  };
}

export async function scheduleCollect(queue: NotifierDeps["queue"], batchMs: number): Promise<void> {
  const keep = { removeOnComplete: { count: 100 }, removeOnFail: { count: 100 } };
  await queue.upsertJobScheduler("collect", { every: collectEveryMs(batchMs) }, { name: "collect", data: {}, opts: keep });
}

/** One collect: pending notifications driven again, then a new one if it is time. */
async function collectNotifications(deps: NotifierDeps, settings: NotifierSettings): Promise<string> {
  const now = deps.clock.now();
  await redriveUndelivered(deps, settings.retry.maxDelayMs, now);
  const batch = await makeBatch(deps.db, deps.channels.configured, settings.batchMs, now);
  if (!batch) return "nothing_due";
  await enqueueDelivery(deps, batch.id);
  deps.logger.info({ event: "notify.batched", notification: batch.id, items: batch.items }, "staff notification made");
  return "batched";
}

async function enqueueDelivery(deps: Pick<NotifierDeps, "queue">, notificationId: string): Promise<void> {
  await deps.queue.add(
    "deliver",
    { notificationId },
    // The queue's retention (the catalog's), its own attempts and the policy's backoff.
    { jobId: deliverJobId(notificationId), attempts: DELIVER_ATTEMPTS, backoff: { type: "policy" } },
  );
}

/**
 * A notification whose job is gone (Redis lost it, a crash between the row's commit and the
 * add) is queued again; one whose job failed for good is retried, no more often than the
 * longest backoff. Adding an id that is queued already does nothing.
 */
async function redriveUndelivered(deps: NotifierDeps, longestBackoffMs: number, now: Date): Promise<void> {
  for (const pending of await undeliveredBatches(deps.db, REDRIVE_BATCH)) {
    const job = await deps.queue.getJob(deliverJobId(pending.id));
    const log = deps.logger.child({ notification: pending.id });
    if (!job) {
      await enqueueDelivery(deps, pending.id);
      log.warn({ event: "notify.redriven", why: "no_job" }, "pending staff notification had no job; queued again");
    } else if ((await job.isFailed()) && now.getTime() - (job.finishedOn ?? 0) >= longestBackoffMs) {
      await job.retry("failed");
      log.warn({ event: "notify.redriven", why: "attempts_spent" }, "staff notification still undelivered; tried again");
    }
  }
}

/** Sends one notification to each channel that has not taken it yet. Throws (to be retried) when one did not. */
async function deliverNotification(deps: NotifierDeps, settings: NotifierSettings, notificationId: string): Promise<string> {
  const log = deps.logger.child({ notification: notificationId });
  const batch = await findBatch(deps.db, notificationId);
  if (!batch) {
    log.error({ event: "notify.missing" }, "staff notification job without its row; nothing to send");
    return "missing";
  }
  if (batch.deliveredAt) return "already_delivered";
  const message = composeStaffMessage(await batchItems(deps.db, notificationId), settings.publicBaseUrl);
  const failures: string[] = [];
  for (const channel of batch.channels) {
    if (channel === "webhook" ? batch.webhookSentAt : batch.emailSentAt) continue; // took it on an earlier attempt
    try {
      await deps.channels.send(channel, message);
    } catch (error) {
      const reason = error instanceof DeliveryFailed ? error.message : `${channel}: ${describeError(error)}`;
      failures.push(reason);
      deps.metrics.staffNotifications.inc({ channel, outcome: "failed" });
      log.warn({ event: "notify.failed", channel, reason }, "staff notification not delivered; will retry");
      continue;
    }
    // As law 5 says of sends: a crash (or Postgres lost) after the receiver took it and before
    // this line commits sends this channel once more on the retry. The window is this one
    // statement; nothing else resends a channel once it is recorded.
    await recordChannelSent(deps.db, notificationId, channel, deps.clock.now());
    deps.metrics.staffNotifications.inc({ channel, outcome: "sent" });
    log.info({ event: "notify.sent", channel }, "staff notified");
  }
  if (failures.length > 0) {
    await recordFailure(deps.db, notificationId, failures.join("; "));
    throw new Error(`staff notification not delivered: ${failures.join("; ")}`);
  }
  return "delivered";
}
