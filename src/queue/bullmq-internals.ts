import { Job, type JobsOptions, type Queue } from "bullmq";
import type { RedisClient } from "./redis.ts";

/**
 * The parts of BullMQ that are not its public API, all in this one file: the webhook's add
 * (queues.ts, addOnce) issues Queue.add's own script without the awaits inside Queue.add, so
 * that the commands beside it go to Redis in the same write, and names the deduplication key
 * that add sets. test/bullmq-contract.test.ts holds these to the installed bullmq: an upgrade
 * that changes them fails there, loudly, not in a webhook.
 */

/** The bullmq these internals were read from (package.json pins it). */
export const BULLMQ_VERSION = "6.7.0";

/** The key BullMQ's deduplication keeps for `id` (Queue.add with `deduplication: { id }`), which outlives the job. */
export function deduplicationKey(queue: Queue, id: string): string {
  return `${queue.keys.de}:${id}`;
}

/** The queue's own connection, once open: ioredis underneath BullMQ's backend interface. */
export async function connectionOf(queue: Queue): Promise<RedisClient> {
  return (await queue.getBackend().client) as unknown as RedisClient;
}

/**
 * Queue.add's path (its option merge, Job.create's script) for one job, issued at once on
 * `connection`: nothing is awaited before the script goes out, so what the caller issues in
 * the same turn rides in the same write. Its checks hold for the callers' ids and options by
 * construction (no parent, no repeat, a valid id).
 */
export function issueAdd<T>(queue: Queue<T>, connection: RedisClient, name: string, data: T, opts: JobsOptions & { jobId: string }): Promise<unknown> {
  const job = new Job(queue, name, data, { ...queue.jobsOpts, ...opts }, opts.jobId);
  // biome-ignore lint/suspicious/noExplicitAny: the backend takes BullMQ's own client type, which ioredis's is underneath (connectionOf).
  return queue.getBackend().addJobToTransaction(connection as any, job.asJSON(), opts.jobId);
}
