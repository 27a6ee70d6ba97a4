import { Queue } from "bullmq";
import { sleep } from "../bench/stats.ts";
import { JOB_NAMES } from "../src/queue/catalog.ts";
import { createFailFastRedis } from "../src/queue/redis.ts";
import { type ChaosSystem, QUEUE_PREFIX } from "./system.ts";
import { allResolved, type Tally, tally } from "./tally.ts";

/**
 * When a scenario is over. It ends when every message is answered, dead-lettered or skipped
 * AND the system has stopped working (no job waiting, active or delayed, no webhook still
 * being redelivered, nothing sent or asked of Claude for a quiet spell), so a late second send
 * is still seen; or at its deadline, whatever state it is in.
 */

export interface QuietSpell {
  /** After the last activity, when no reply or part is left unfinished. */
  shortMs: number;
  /** When some are: long enough for a reconciler (RECONCILE_AFTER_MS) to act on them. */
  longMs: number;
}

export interface Settled {
  /** False when the deadline came first. */
  settled: boolean;
  tally: Tally;
  /** BullMQ's failed sets, by queue: jobs nobody will run again. */
  failedJobs: Record<string, number>;
  /** Jobs still waiting, active or delayed at the end, by queue: what a failure was stuck on (empty when none). */
  leftJobs: Record<string, Record<string, number>>;
}

export async function settle(system: ChaosSystem, deadline: number, quiet: QuietSpell): Promise<Settled> {
  const redis = createFailFastRedis(system.redisTarget);
  redis.on("error", () => undefined);
  const queues = JOB_NAMES.map((name) => new Queue(name, { connection: redis, prefix: QUEUE_PREFIX }));
  try {
    let settled = false;
    while (Date.now() < deadline) {
      const now = Date.now();
      const t = await tally(system).catch(() => undefined); // Postgres may be down right now
      if (t && allResolved(t) && !system.deliverer.busy && !(await busy(queues))) {
        if (now - system.lastActivityAt >= (t.unfinished > 0 ? quiet.longMs : quiet.shortMs)) {
          settled = true;
          break;
        }
      }
      await sleep(500);
    }
    system.deliverer.close();
    const failedJobs: Record<string, number> = {};
    const leftJobs: Record<string, Record<string, number>> = {};
    for (const queue of queues) {
      failedJobs[queue.name] = await queue.getFailedCount().catch(() => Number.NaN);
      const left = await queue.getJobCounts("wait", "active", "prioritized", "delayed").catch(() => ({ unknown: Number.NaN }));
      const nonZero = Object.entries(left).filter(([, n]) => n !== 0);
      if (nonZero.length > 0) leftJobs[queue.name] = Object.fromEntries(nonZero);
    }
    return { settled, tally: await finalTally(system), failedJobs, leftJobs };
  } finally {
    await Promise.allSettled(queues.map((q) => q.close()));
    redis.disconnect();
  }
}

/** Jobs that will still run: waiting, active, prioritized, or delayed (a job scheduler's next run aside). */
async function busy(queues: Queue[]): Promise<boolean> {
  try {
    for (const queue of queues) {
      const counts = await queue.getJobCounts("active", "wait", "prioritized", "delayed");
      if (counts.active || counts.wait || counts.prioritized) return true;
      if (counts.delayed) {
        const delayed = await queue.getDelayed(0, 200);
        if (delayed.some((job) => !job.id?.startsWith("repeat:"))) return true;
      }
    }
    return false;
  } catch {
    return true; // Redis is not answering: nothing is known to be idle
  }
}

/** The count at the end; Postgres should be up by now, but give a slow restart a moment. */
async function finalTally(system: ChaosSystem): Promise<Tally> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await tally(system);
    } catch (error) {
      if (attempt >= 20) throw error;
      await sleep(500);
    }
  }
}
