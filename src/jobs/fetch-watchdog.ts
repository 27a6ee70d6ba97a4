import type { Queue, Worker } from "bullmq";
import type { Clock } from "../clock.ts";
import type { Logger } from "../logger.ts";
import { oldestReadySince } from "../queue/queues.ts";

/** Per queue: jobs this process is running, and when it last started one (the clock's monotonic reading). */
export interface FetchSlots {
  running: number;
  lastStartAt: number;
}

/** One queue's worker as it is started, and started again by the watchdog. */
export interface WorkerKind {
  queue: string;
  concurrency: number;
}

/**
 * A worker with free slots that starts no job while its queue holds jobs ready to run has lost
 * its fetch loop: seen after a Redis Cluster failover, when BullMQ's reset of its blocking
 * connection never came back (test/redis-topologies.test.ts). Past `2 × JOB_LOCK_MS` (the
 * time a stalled job is given back to the queue) it is replaced by a new worker on a new
 * blocking connection; the old one is closed without waiting, letting its own jobs finish. A
 * queue Meta rate-limits waits on purpose and is left alone.
 */
export function watchFetching<K extends WorkerKind>(
  deps: { queues: Record<string, Queue>; logger: Logger; lockMs: number; clock: Clock },
  kinds: readonly K[],
  all: Worker[],
  fetching: Map<string, FetchSlots>,
  start: (kind: K) => Worker,
): NodeJS.Timeout {
  const stallMs = 2 * deps.lockMs;
  const queues = new Map<string, Queue>(Object.values(deps.queues).map((queue) => [queue.name, queue]));
  const check = async () => {
    for (const [i, kind] of kinds.entries()) {
      const slots = fetching.get(kind.queue)!;
      const idleMs = deps.clock.monotonicMs() - slots.lastStartAt;
      if (slots.running >= kind.concurrency || idleMs < stallMs) continue;
      const queue = queues.get(kind.queue)!;
      // The jobs' times are Redis's epoch milliseconds: compared with the wall clock.
      const now = deps.clock.now().getTime();
      const readySince = await oldestReadySince(queue, now);
      if (readySince === undefined || now - readySince < stallMs || (await queue.getRateLimitTtl()) > 0) continue;
      deps.logger.error(
        { event: "worker.fetch_stalled", queue: kind.queue, readyForMs: now - readySince, idleForMs: idleMs },
        "jobs are ready but this worker has started none; its fetch loop is replaced",
      );
      const stalled = all[i]!;
      slots.lastStartAt = deps.clock.monotonicMs();
      all[i] = start(kind);
      void stalled.close().catch(() => undefined);
    }
  };
  let checking = false;
  const timer = setInterval(() => {
    if (checking) return;
    checking = true;
    check()
      .catch(() => undefined) // Redis away: nothing is known, and the next check asks again
      .finally(() => {
        checking = false;
      });
  }, stallMs / 4);
  timer.unref();
  return timer;
}
