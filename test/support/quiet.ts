import type { Queue } from "bullmq";
import type { Queues } from "../../src/queue/queues.ts";
import type { RedisClient } from "../../src/queue/redis.ts";

/**
 * Anything that works for the system outside its queues: a fake service with a request in
 * flight (sim/local-server.ts counts them), the simulated Meta with a webhook still to deliver.
 */
export interface Busy {
  readonly busy: boolean;
}

/** What untilQuiet watches: the system's queues, and the harness's fakes when it has them. */
export interface QuietSystem {
  queues: Queues;
  graph?: Busy;
  claude?: Busy;
}

export interface QuietOptions {
  /** More that must be idle: a fake the test started itself (a transcriber, the shop), the demo's simulators. */
  also?: readonly Busy[];
  /** How long the system may take to go quiet; past it the test fails, saying what was still busy. */
  timeoutMs?: number;
}

/** How often to look. */
const POLL_MS = 25;
/**
 * Quiet must still hold this long after it was first seen: a request a job fired without
 * waiting for it (a read receipt) is on its way to its fake for a moment after the job ends.
 */
const STAYS_QUIET_MS = 50;

/**
 * Resolves once the system has nothing left to do: no job of any queue active, waiting or
 * delayed (follow-ups included: a reply job schedules the next one; a debounced one waits in
 * the delayed set), and no fake with a request in flight. What a test then finds is all the
 * system will ever do, so a second send or call that must not come has had every chance to
 * come; a fixed sleep would only have given it a moment, which a loaded machine may not fill.
 *
 * A job scheduler's next run (the reconciler's sweep, the staff notifications' collect) is
 * always delayed; it does not count, though a run of it does while it runs or waits. Every
 * other delayed job counts, however far off: a test that parks one (a maybe-sent part waiting
 * SEND_RECONCILE_WAIT_MS for its status) waits for what it is about with `eventually` instead.
 */
export async function untilQuiet(system: QuietSystem, options: QuietOptions = {}): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const deadline = Date.now() + timeoutMs;
  const fakes = [system.graph, system.claude, ...(options.also ?? [])].filter((fake): fake is Busy => fake !== undefined);
  let quietSince: number | undefined;
  for (;;) {
    const busy = await busyWork(system.queues, fakes);
    const now = Date.now();
    if (busy.length > 0) quietSince = undefined;
    else if (quietSince === undefined) quietSince = now;
    else if (now - quietSince >= STAYS_QUIET_MS) return;
    if (now > deadline) throw new Error(`the system did not go quiet within ${timeoutMs} ms: ${busy.join("; ")}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** What is still busy, in words (empty: nothing). */
async function busyWork(queues: Queues, fakes: readonly Busy[]): Promise<string[]> {
  const byQueue = await Promise.all(
    (Object.values(queues) as Queue[]).map(async (queue) => {
      const counts = await queue.getJobCounts("active", "wait", "prioritized", "waiting-children");
      counts.delayed = await delayedWork(queue);
      const jobs = Object.entries(counts).filter(([, n]) => n > 0);
      return jobs.length > 0 ? `${queue.name}: ${jobs.map(([state, n]) => `${n} ${state}`).join(", ")}` : undefined;
    }),
  );
  const busyFakes = fakes.filter((fake) => fake.busy).map((fake) => `${fake.constructor.name} is busy`);
  return [...byQueue.filter((line): line is string => line !== undefined), ...busyFakes];
}

/** Delayed jobs, a job scheduler's next run aside. */
async function delayedWork(queue: Queue): Promise<number> {
  // The connection the system's queues were made with (src/queue/redis.ts): ioredis's.
  const client = (await queue.getBackend().client) as unknown as RedisClient;
  const delayed = await client.zrange(queue.toKey("delayed"), 0, "-1");
  // A job scheduler's next run: BullMQ names it repeat:<scheduler>:<when>.
  return delayed.filter((id) => !id.startsWith("repeat:")).length;
}
