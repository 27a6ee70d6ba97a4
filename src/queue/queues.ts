import type { Job, JobsOptions, Telemetry } from "bullmq";
import { Queue } from "bullmq";
import calculateSlot from "cluster-key-slot";
import { Cluster, type Redis } from "ioredis";
import { connectionOf, deduplicationKey, issueAdd } from "./bullmq-internals.ts";
import { csatJobId, JOB_NAMES, JOBS, type JobData, type JobName, replyDeduplicationId, type WebhookJob } from "./catalog.ts";
import type { RedisClient } from "./redis.ts";
import type { ReplicaCount } from "./replicas.ts";

/** The queues, made from the catalog, and how each job is added: the webhook's items (in the same script as their claim) and the reply job of a conversation. */

export type Queues = { [N in JobName]: Queue<JobData<N>> };

export interface QueueSettings {
  prefix: string;
  /** JOB_ATTEMPTS: the attempts of a customer's work. */
  attempts: number;
  /** BullMQ's telemetry hook (src/tracing/tracing.ts): each job carries its trace across Redis. Absent: no tracing. */
  telemetry?: Telemetry | undefined;
}

/**
 * One queue per job of the catalog, its defaults its definition's. `onError` hears the queues'
 * connection errors (Redis away): BullMQ prints them to stderr when nobody listens, once per
 * reconnection attempt.
 */
export function createQueues(connection: RedisClient, settings: QueueSettings, onError: (error: Error) => void = () => undefined): Queues {
  const queueOf = (name: JobName) => {
    const definition = JOBS[name];
    const defaultJobOptions: JobsOptions =
      definition.attempts === "JOB_ATTEMPTS"
        ? { attempts: settings.attempts, backoff: { type: "policy" }, ...definition.retention }
        : { attempts: definition.attempts, ...definition.retention };
    const telemetry = definition.traced && settings.telemetry ? { telemetry: settings.telemetry } : {};
    const queue = new Queue(name, { connection, prefix: settings.prefix, defaultJobOptions, ...telemetry });
    queue.on("error", onError);
    return [name, queue] as const;
  };
  return Object.fromEntries(JOB_NAMES.map(queueOf)) as unknown as Queues;
}

export async function closeQueues(queues: Queues): Promise<void> {
  await Promise.all(Object.values(queues).map((queue: Queue) => queue.close()));
}

/**
 * How long a webhook item stays a known duplicate once its job is queued. Meta redelivers an
 * unanswered webhook for up to 7 days, but what it sends again after a 200 comes within
 * hours; past this, Postgres's UNIQUE wamid is the second line of defence.
 */
export const WEBHOOK_DEDUP_TTL_MS = 24 * 60 * 60 * 1000;

/** What adding a webhook item did: queued it now, or found it queued already. */
export type EnqueueOutcome = "enqueued" | "duplicate";

/**
 * The add's outcome, and whether it was acknowledged on the master alone although replicas
 * were asked for (REDIS_WAIT_REPLICAS > 0): the master has none to copy it to right now, and
 * its loss before one syncs would take the job along.
 */
export interface EnqueueResult {
  outcome: EnqueueOutcome;
  unreplicated: boolean;
}

/**
 * Law 3 in one Redis script, so in one round trip: BullMQ's add sets the deduplication key
 * (24 h) and stores the job inside the same Lua call, so no crash can leave a claim without
 * its job, and a redelivery finds the key only when the job really was queued. The key is
 * named after the job id and outlives the job: BullMQ's clean-up of finished jobs (KEEP)
 * leaves it. The job id still derives from the wamid, so a job kept longer than the key (a
 * failed one) also turns a redelivery into a no-op.
 *
 * BullMQ answers a new, a duplicated and a deduplicated add alike (with the job id, the same
 * in all three), so whether the item is new is read by an EXISTS issued right before the
 * script, in the same write: Redis runs the two back to back (only another process's add of
 * the same item, landing between them, could make both say "enqueued"). That read only names
 * the outcome for logs and metrics; it never decides the answer. The add is Queue.add's own
 * path without the awaits inside it (bullmq-internals.ts), which would let other requests'
 * commands in between the read and the script.
 */
async function addOnce<T>(queue: Queue<T>, name: string, data: T, jobId: string, durability: Durability, present?: ReplicaCount): Promise<EnqueueResult> {
  const client = await connectionOf(queue);
  const telemetry = queue.opts.telemetry;
  const traced = telemetry ? { telemetry: { metadata: telemetry.contextManager.getMetadata(telemetry.contextManager.active()) } } : {};
  const keys = [queue.toKey(jobId), deduplicationKey(queue, jobId)] as const;
  const awaited = replicasToAwait(durability, keys[0], present);
  // WAIT covers the writes made before it on its own connection: in a cluster that is the
  // connection to the master of the queue's slot (the prefix's hash tag), not any node.
  const waiter = awaited === 0 ? undefined : client instanceof Cluster ? masterOf(client, keys[0]) : client;
  const known = client.exists(...keys);
  const added = issueAdd(queue, client, name, data, { jobId, deduplication: { id: jobId, ttl: WEBHOOK_DEDUP_TTL_MS }, ...traced });
  // Issued in the same turn, so in the same write, right behind the add on this connection.
  const copied = waiter?.wait(awaited, durability.timeoutMs);
  const [found, , acknowledged] = await Promise.all([known, added, copied]);
  if (acknowledged !== undefined && !(acknowledged >= awaited)) {
    // Nothing proves the add was copied. The reading may name a replica that is gone: the
    // next deliveries should know.
    present?.doubt();
    throw new NotReplicatedError(acknowledged, awaited, durability.timeoutMs);
  }
  return { outcome: found > 0 ? "duplicate" : "enqueued", unreplicated: awaited === 0 && durability.replicas > 0 };
}

/**
 * The replicas a webhook's add waits for: as many as REDIS_WAIT_REPLICAS asks, but no more
 * than the master has now, so a master left without a replica (a failover's promoted
 * replica, until a new one syncs) takes webhooks on its own; or all that are asked, whatever
 * the master has, when the operator chose to refuse instead (REDIS_WAIT_STRICT), or when
 * nothing is known of the master (a WAIT that comes back short then answers 503).
 */
function replicasToAwait(durability: Durability, key: string, present: ReplicaCount | undefined): number {
  if (durability.replicas === 0 || durability.strict || !present) return durability.replicas;
  const replicas = present.of(key, durability.replicas);
  return replicas === undefined ? durability.replicas : Math.min(durability.replicas, replicas);
}

/**
 * The connection to the master that serves `key`, as the cluster client knows it now. After a
 * failover it may name the old master for a moment: then WAIT fails (gone, or a replica
 * refusing WAIT) and the delivery is answered 503, never 200 on a guess.
 */
function masterOf(cluster: Cluster, key: string): Redis {
  const [address] = cluster.slots[calculateSlot(key)] ?? [];
  const node = cluster.nodes("master").find((n) => `${n.options.host}:${n.options.port}` === address);
  if (!node) {
    // Its master is gone and nothing has told the client who took over: ask the cluster now.
    cluster.refreshSlotsCache();
    throw new Error(`the cluster client knows no live master for the slot of ${key} (last known: ${address ?? "none"})`);
  }
  return node;
}

/**
 * How many replicas should hold a webhook's job before it is answered 200 (REDIS_WAIT_REPLICAS),
 * how long to wait for them, and whether a master with fewer refuses webhooks (`strict`).
 * Redis replicates after it answers: a master lost right after an add takes the add with it,
 * and the replica promoted in its place never saw the job.
 */
export interface Durability {
  replicas: number;
  timeoutMs: number;
  /** REDIS_WAIT_STRICT: wait for `replicas` even when the master has fewer, so 503 until they are back. */
  strict: boolean;
}

/** Fewer replicas than awaited acknowledged an add in time: the item is not safely queued yet. */
class NotReplicatedError extends Error {
  override readonly name = "NotReplicatedError";
  constructor(acknowledged: number, awaited: number, timeoutMs: number) {
    super(`${acknowledged} of ${awaited} Redis replicas acknowledged the add within ${timeoutMs} ms`);
  }
}

/**
 * A webhook item's job: its id and how to add it (in the same script as its claim). `present`
 * says how many replicas the master has now; without it the add waits for all `durability` asks.
 */
export function webhookJobOf(
  queues: Queues,
  job: WebhookJob,
  durability: Durability,
  present?: ReplicaCount,
): { id: string; enqueue: () => Promise<EnqueueResult> } {
  switch (job.queue) {
    case "inbound": {
      const id = JOBS.inbound.jobId(job.data);
      return { id, enqueue: () => addOnce(queues.inbound, "inbound", job.data, id, durability, present) };
    }
    case "status": {
      const id = JOBS.status.jobId(job.data);
      return { id, enqueue: () => addOnce(queues.status, "status", job.data, id, durability, present) };
    }
    case "events": {
      const id = JOBS.events.jobId(job.data);
      return { id, enqueue: () => addOnce(queues.events, job.data.type, job.data, id, durability, present) };
    }
  }
}

/**
 * Law 8: one reply job per conversation at a time, across every worker. BullMQ's
 * deduplication keeps at most one active and one waiting job per conversation
 * (`keepLastIfActive`). A job already waiting or delayed absorbs the new work as it is:
 * nothing moves its delay, because that delay may be a retry waiting out Meta's pair limit,
 * a Retry-After or a maybe-sent part's status (law 5), not only the debounce. The debounce
 * slides in the reply job itself (a burst still gets one answer).
 *
 * Traces: the add is a span of whatever schedules it (an inbound run; a reply run with more
 * waiting), and every run of the reply job is a child of the add its job was created from, so
 * the first message of a burst carries the whole path to the Graph send. A later message that
 * finds a reply job for its conversation already there is answered in another message's trace:
 * its own ends at its add span, whose `bullmq.job.id` names the reply job it found. (A job kept
 * while one is active takes the last add's options, trace included: BullMQ's keepLastIfActive.)
 */
export async function scheduleReply(queues: Queues, conversationId: string, delayMs: number): Promise<void> {
  await queues.reply.add("reply", { conversationId }, { delay: delayMs, deduplication: { id: replyDeduplicationId(conversationId), keepLastIfActive: true } });
}

/** Whether the conversation has a reply job that will run (waiting, delayed or active), for the reconciler. */
export async function hasLiveReplyJob(queues: Queues, conversationId: string): Promise<boolean> {
  const jobId = await queues.reply.getDeduplicationJobId(replyDeduplicationId(conversationId));
  if (!jobId) return false;
  const state = await queues.reply.getJobState(jobId);
  return state === "waiting" || state === "delayed" || state === "active" || state === "prioritized" || state === "waiting-children";
}

/** Since when the queue's longest-ready job could have run: the oldest waiting one, or a delayed one that came due. */
export async function oldestReadySince(queue: Queue, now: number): Promise<number | undefined> {
  const [[waiting], [delayed]] = await Promise.all([queue.getWaiting(0, 0), queue.getDelayed(0, 0)]);
  const since = [waiting && readySince(waiting), delayed && readySince(delayed)].filter((t): t is number => typeof t === "number" && t <= now);
  return since.length > 0 ? Math.min(...since) : undefined;
}

/**
 * When a job became ready to run: added (or last started, for a retry) plus its delay. A retry
 * that has only just come due is not an old backlog.
 */
function readySince(job: Pick<Job, "timestamp" | "processedOn" | "delay">): number {
  return (job.processedOn ?? job.timestamp) + (job.delay ?? 0);
}

/** Wakes a CSAT ask when it falls due; its id derives from the ask and the due time (catalog.ts, csatJobId). */
export async function scheduleCsatJob(queues: Queues, askId: string, dueAt: Date, now: Date): Promise<void> {
  await queues.csat.add("csat", { askId }, { jobId: csatJobId(askId, dueAt.getTime()), delay: Math.max(0, dueAt.getTime() - now.getTime()) });
}
