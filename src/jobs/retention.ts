import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { Queues } from "../queue/queues.ts";
import { forgetOlderThan } from "../state/retention.ts";

/**
 * RETENTION's sweep (issue 35.3), in each worker process: at start-up and every
 * RETENTION_SWEEP_SECONDS, customers' words older than RETENTION are emptied in Postgres
 * (src/state/retention.ts), and the finished jobs kept in Redis from before then (an inbound
 * job holds the webhook's words) are removed. Workers sweeping at once empty each row once.
 */

export interface RetentionDeps {
  db: Db;
  queues: Queues;
  clock: Clock;
  logger: Logger;
  metrics: Pick<Metrics, "retentionErased">;
}

const BATCH = 500;

export function startRetentionSweep(deps: RetentionDeps, retention: { afterMs: number; sweepMs: number }): { close(): Promise<void> } {
  let running: Promise<void> | undefined;
  const sweep = () => {
    running ??= sweepOnce(deps, retention.afterMs)
      .catch((error: unknown) => deps.logger.warn({ event: "retention.sweep_failed", err: error }, "the retention sweep failed; tried again next period"))
      .finally(() => {
        running = undefined;
      });
  };
  sweep();
  const timer = setInterval(sweep, retention.sweepMs);
  timer.unref();
  return {
    async close() {
      clearInterval(timer);
      await running;
    },
  };
}

async function sweepOnce(deps: RetentionDeps, afterMs: number): Promise<void> {
  const cutoff = new Date(deps.clock.now().getTime() - afterMs);
  const counts = await forgetOlderThan(deps.db, cutoff, BATCH);
  counts.jobs = await removeJobsFinishedBefore(deps.queues, cutoff.getTime());
  for (const [kind, n] of Object.entries(counts)) if (n > 0) deps.metrics.retentionErased.inc({ kind }, n);
  deps.logger.info({ event: "retention.swept", before: cutoff.toISOString(), counts }, "words older than RETENTION emptied");
}

async function removeJobsFinishedBefore(queues: Queues, cutoffMs: number): Promise<number> {
  let removed = 0;
  for (const queue of Object.values(queues))
    for (const job of await queue.getJobs(["completed", "failed"]))
      if (
        job.finishedOn !== undefined &&
        job.finishedOn < cutoffMs &&
        (await job.remove().then(
          () => true,
          () => false,
        ))
      )
        removed++;
  return removed;
}
