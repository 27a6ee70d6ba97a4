import { DelayedError, type Job, type Queue, Worker } from "bullmq";
import { ClaudeClient } from "../ai/claude.ts";
import { TRANSCRIBE_TIMEOUT_MS, Transcriber } from "../ai/transcriber.ts";
import type { Config } from "../config/config.ts";
import type { Db } from "../db/client.ts";
import { forTheQueue } from "../errors.ts";
import { startKnowledgeBase } from "../knowledge/knowledge.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { staffChannels } from "../notify/channels.ts";
import { collectNotifications, deliverNotification, type NotifierDeps, scheduleCollect } from "../notify/notifier.ts";
import {
  type EventJobData,
  type InboundJobData,
  type NotifyJobData,
  QUEUE_NAMES,
  type QueueName,
  type ReplyJobData,
  readJob,
  type StatusJobData,
} from "../queue/catalog.ts";
import { closeQueues, createQueues, oldestReadySince } from "../queue/queues.ts";
import type { RedisClient } from "../queue/redis.ts";
import type { KnowledgeSource } from "../replies/generation.ts";
import type { Settings } from "../settings.ts";
import { businessActions } from "../tools/actions.ts";
import type { Tracing } from "../tracing/tracing.ts";
import { GraphClient } from "../whatsapp/graph-client.ts";
import { processEvent } from "./events.ts";
import { type InboundDeps, keepUnreadableMessage, processInbound } from "./inbound.ts";
import { decideFate, type RetryDelaySettings, retryDelayMs } from "./policy.ts";
import { reconcile } from "./reconcile.ts";
import { processReply, type ReplyDeps } from "./reply.ts";
import { processStatus, type StatusDeps } from "./status.ts";

export type WorkerDeps = InboundDeps &
  ReplyDeps & {
    connection: RedisClient;
    prefix: string;
    concurrency: { reply: number; inbound: number };
    lockMs: number;
    retry: RetryDelaySettings;
    metrics: Metrics;
    reconcile: { intervalMs: number; afterMs: number };
    /** Meta's rate card, for the price of each message its status webhooks say it billed. */
    metaRates?: StatusDeps["metaRates"];
    /** Traces on: the inbound, reply, status and events runs continue their message's trace. */
    tracing?: Tracing | undefined;
    /** Staff notifications on (a channel configured): this process collects and delivers them (src/notify/). */
    staffNotify?: Pick<NotifierDeps, "channels" | "settings"> | undefined;
  };

export interface Workers {
  all: Worker[];
  close(timeoutMs: number): Promise<void>;
}

/** A run may start a send only this soon after marking its part `sending` (see SendTiming). */
const SEND_LEASE_MAX_MS = 5_000;

/**
 * Before Claude is asked, a run reads the history and downloads the media it shows (each
 * download bounded by GRAPH_TIMEOUT_MS): this long, and no longer, may pass (see GenerationTiming).
 */
const generationStartWithinMs = (graphTimeoutMs: number) => 2 * graphTimeoutMs + 5_000;

/**
 * The numbers' knowledge, read and watched by this worker process once a number has a
 * knowledgeDir. Started in the background: the first reply that needs it waits for its first
 * reading.
 */
function configuredKnowledge(config: Config, db: Db, logger: Logger): (KnowledgeSource & { close(): Promise<void> }) | undefined {
  const dirs = new Map([...config.numbers].flatMap(([id, settings]) => (settings.knowledgeDir ? [[id, settings.knowledgeDir] as const] : [])));
  if (dirs.size === 0) return undefined;
  const started = startKnowledgeBase({ db, logger, dirs, tokenBudget: config.knowledge.tokenBudget });
  return {
    forReply: async (phoneNumberId, query) => (await started).forReply(phoneNumberId, query),
    close: async () => (await started).close(),
  };
}

/**
 * The worker role as configured: its own Graph and Claude clients, and its own queue handles
 * on its own connection (one that waits out a Redis outage, unlike the web role's).
 */
export function startConfiguredWorkers(
  config: Settings,
  shared: { db: Db; logger: Logger; metrics: Metrics; connection: RedisClient; tracing?: Tracing | undefined },
): Workers {
  const tracer = shared.tracing?.tracer;
  const queues = createQueues(shared.connection, { prefix: config.queuePrefix, attempts: config.jobs.attempts, telemetry: shared.tracing?.queues }, (error) =>
    shared.logger.warn({ event: "queue.error", role: "worker", err: error }, "queue connection error"),
  );
  const knowledge = configuredKnowledge(config, shared.db, shared.logger);
  const notify = config.staffNotify;
  const channels = notify.webhookUrl || notify.email ? staffChannels(notify) : undefined;
  const workers = startWorkers({
    ...shared,
    queues,
    graph: new GraphClient(
      {
        baseUrl: config.whatsapp.graphBaseUrl,
        version: config.whatsapp.graphVersion,
        accessToken: config.whatsapp.accessToken,
        timeoutMs: config.whatsapp.graphTimeoutMs,
      },
      shared.metrics.graphErrors,
      tracer,
    ),
    claude: new ClaudeClient({ ...config.anthropic }, shared.tracing?.provider),
    transcriber: config.transcription && new Transcriber({ ...config.transcription, timeoutMs: TRANSCRIBE_TIMEOUT_MS }),
    prefix: config.queuePrefix,
    historyMessages: config.anthropic.historyMessages,
    historyTokenBudget: config.anthropic.historyTokenBudget,
    numbers: config.numbers,
    mediaMaxBytes: config.conversation.mediaMaxBytes,
    replyDebounceMs: config.jobs.replyDebounceMs,
    conversation: config.conversation,
    concurrency: { reply: config.jobs.replyConcurrency, inbound: config.jobs.inboundConcurrency },
    lockMs: config.jobs.lockMs,
    retry: { baseDelayMs: config.jobs.retryBaseDelayMs, maxDelayMs: config.jobs.retryMaxDelayMs },
    send: {
      leaseMs: Math.min(SEND_LEASE_MAX_MS, config.jobs.lockMs / 2),
      timeoutMs: config.whatsapp.graphTimeoutMs,
      reconcileWaitMs: config.whatsapp.sendReconcileWaitMs,
    },
    generation: { startWithinMs: generationStartWithinMs(config.whatsapp.graphTimeoutMs), timeoutMs: config.anthropic.timeoutMs },
    actions: businessActions(config.businessTools, config.tools.answerMaxBytes),
    knowledge,
    tools: config.tools,
    reconcile: config.reconcile,
    staffNotify: channels ? { channels, settings: notify } : undefined,
    modelPrices: config.costs.modelPrices,
    metaRates: config.costs.metaRates,
  });
  return {
    all: workers.all,
    async close(timeoutMs) {
      await workers.close(timeoutMs);
      channels?.close();
      await Promise.all([closeQueues(queues), knowledge?.close()]);
    },
  };
}

export function startWorkers(deps: WorkerDeps): Workers {
  const settings = { backoffStrategy: (attemptsMade: number, _type?: string, err?: Error) => retryDelayMs(attemptsMade, err, deps.retry) };
  // A worker that dies mid-job loses its lock after lockMs; the job then runs again elsewhere.
  const common = { connection: deps.connection, prefix: deps.prefix, settings, lockDuration: deps.lockMs, stalledInterval: deps.lockMs };

  /** Per queue: jobs this process is running, and when it last started one (the fetch watchdog reads them). */
  const fetching = new Map<string, { running: number; lastStartAt: number }>();

  /**
   * What every job shares: a wait (Postgres or Redis away, a postponement) moves the job to
   * the delayed set without spending an attempt, for as long as it takes (law 6); a run
   * fenced out by a newer one ends quietly (law 8). Everything else is the job's own failure.
   */
  const guarded =
    <T>(queue: QueueName, processor: (job: Job<T>) => Promise<unknown>, onInvalid?: (data: unknown, reason: string) => Promise<void>) =>
    async (job: Job<T>, token?: string): Promise<unknown> => {
      const slots = fetching.get(queue)!;
      slots.running++;
      slots.lastStartAt = Date.now();
      try {
        // Law 11: data that can never succeed is settled now, never retried (catalog.ts, readJob).
        const read = readJob(queue, job.data, job.timestamp);
        if (!read.ok) {
          deps.logger.error({ event: "job.invalid", queue, job: job.id, reason: read.reason }, "job data can never be processed; settled without retrying");
          await onInvalid?.(job.data, read.reason);
          return "invalid";
        }
        if (read.cleaned.length > 0)
          deps.logger.warn({ event: "job.cleaned", queue, job: job.id, cleaned: read.cleaned }, "job data cleaned so it can be stored");
        job.data = read.data as T;
        return await processor(job);
      } catch (error) {
        const fate = decideFate(error, job, deps.retry);
        if (fate.action === "stop") {
          deps.logger.warn({ event: "job.fenced_out", queue, job: job.id, reason: fate.reason }, "another worker took this job over; this run stops");
          return "fenced_out";
        }
        if (fate.action !== "wait") throw forTheQueue(error);
        deps.logger.info({ event: "job.waiting", queue, job: job.id, delayMs: fate.delayMs, reason: fate.reason }, "job waits without spending an attempt");
        await job.moveToDelayed(Date.now() + fate.delayMs, token);
        throw new DelayedError();
      } finally {
        slots.running--;
      }
    };

  const kinds: WorkerKind[] = [
    {
      queue: QUEUE_NAMES.inbound,
      concurrency: deps.concurrency.inbound,
      process: guarded(
        "inbound",
        (job: Job<InboundJobData>) => processInbound(deps, job.data),
        (data, reason) => keepUnreadableMessage(deps, data, reason),
      ),
    },
    {
      // Replies wait on Claude for seconds: many run at once, one per conversation (law 8).
      queue: QUEUE_NAMES.reply,
      concurrency: deps.concurrency.reply,
      process: guarded("reply", (job: Job<ReplyJobData>) =>
        processReply(deps, job, async (kept) => {
          await job.updateData({ ...job.data, ...kept, accepted: { ...job.data.accepted, ...kept.accepted } });
        }),
      ),
      // BullMQ honours a manual queue.rateLimit() (Meta's sender-wide limits, see
      // processReply) only for workers with a limiter; this one is far above any real rate.
      limiter: { max: 10_000, duration: 1000 },
    },
    {
      queue: QUEUE_NAMES.status,
      concurrency: deps.concurrency.inbound,
      process: guarded("status", (job: Job<StatusJobData>) => processStatus(deps, job.data)),
    },
    { queue: QUEUE_NAMES.events, concurrency: deps.concurrency.inbound, process: guarded("events", (job: Job<EventJobData>) => processEvent(deps, job.data)) },
    {
      queue: QUEUE_NAMES.reconcile,
      concurrency: 1,
      process: guarded("reconcile", () => reconcile({ ...deps, redis: deps.connection, afterMs: deps.reconcile.afterMs })),
    },
  ];
  const notifier: NotifierDeps | undefined = deps.staffNotify && {
    ...deps.staffNotify,
    db: deps.db,
    queue: deps.queues.notify,
    logger: deps.logger,
    metrics: deps.metrics,
    retry: deps.retry,
  };
  if (notifier) {
    kinds.push({
      queue: QUEUE_NAMES.notify,
      concurrency: 2,
      process: guarded("notify", (job: Job<NotifyJobData>) =>
        job.data.notificationId ? deliverNotification(notifier, job.data.notificationId) : collectNotifications(notifier),
      ),
    });
  }

  const start = (kind: WorkerKind): Worker => {
    const worker = new Worker(kind.queue, kind.process, {
      ...common,
      concurrency: kind.concurrency,
      ...(kind.limiter ? { limiter: kind.limiter } : {}),
      // The reconciler's sweeps are housekeeping, not a message's path: untraced.
      ...(deps.tracing && kind.queue !== QUEUE_NAMES.reconcile ? { telemetry: deps.tracing.queues } : {}),
    });
    worker.on("completed", (_job, result: unknown) => {
      deps.metrics.jobs.inc({ queue: worker.name, outcome: typeof result === "string" ? result : "done" });
    });
    worker.on("failed", (job, error) => {
      deps.metrics.jobs.inc({ queue: worker.name, outcome: "failed" });
      const final = job ? job.attemptsMade >= (job.opts.attempts ?? 1) : true;
      deps.logger[final ? "error" : "warn"](
        { event: final ? "job.failed" : "job.retrying", queue: worker.name, job: job?.id, attempt: job?.attemptsMade, err: error },
        final ? "job failed for good; the reconciler drives it again or dead-letters it" : "job failed; will retry",
      );
    });
    worker.on("error", (error) => deps.logger.error({ event: "worker.error", queue: worker.name, err: error }, "worker error"));
    return worker;
  };
  for (const kind of kinds) fetching.set(kind.queue, { running: 0, lastStartAt: Date.now() });
  const all = kinds.map(start);
  const watchdog = watchFetching(deps, kinds, all, fetching, start);

  startSweeps(deps);
  if (notifier)
    scheduleCollect(notifier).catch((error: unknown) =>
      deps.logger.warn({ event: "notify.schedule_failed", err: error }, "could not schedule staff notifications; the next start-up will"),
    );

  return {
    all,
    /** Stop taking jobs and let active ones finish, for at most `timeoutMs`; the rest are picked up again as stalled. */
    async close(timeoutMs: number) {
      clearInterval(watchdog);
      let timer: NodeJS.Timeout | undefined;
      const graceful = Promise.all(all.map((w) => w.close()));
      const timeout = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), timeoutMs);
      });
      const outcome = await Promise.race([graceful, timeout]);
      clearTimeout(timer);
      if (outcome === "timeout") {
        deps.logger.warn({ event: "worker.shutdown_timeout" }, "active jobs did not finish in time; forcing close");
        await Promise.all(all.map((w) => w.close(true)));
      }
    },
  };
}

/** One queue's worker, as it is started (and started again by the fetch watchdog). */
interface WorkerKind {
  queue: string;
  concurrency: number;
  // A Job of any data, as BullMQ's Worker takes it: each kind's own data type is checked where it is written.
  process: (job: Job, token?: string) => Promise<unknown>;
  limiter?: { max: number; duration: number };
}

/**
 * A worker with free slots that starts no job while its queue holds jobs ready to run has lost
 * its fetch loop: seen after a Redis Cluster failover, when BullMQ's reset of its blocking
 * connection never came back (test/redis-topologies.test.ts). Past `2 × JOB_LOCK_MS` (the
 * time a stalled job is given back to the queue) it is replaced by a new worker on a new
 * blocking connection; the old one is closed without waiting, letting its own jobs finish. A
 * queue Meta rate-limits waits on purpose and is left alone.
 */
function watchFetching(
  deps: Pick<WorkerDeps, "queues" | "logger" | "lockMs">,
  kinds: WorkerKind[],
  all: Worker[],
  fetching: Map<string, { running: number; lastStartAt: number }>,
  start: (kind: WorkerKind) => Worker,
): NodeJS.Timeout {
  const stallMs = 2 * deps.lockMs;
  const queues = new Map<string, Queue>(Object.values(deps.queues).map((queue: Queue) => [queue.name, queue]));
  let checking = false;
  const check = async () => {
    for (const [i, kind] of kinds.entries()) {
      const slots = fetching.get(kind.queue)!;
      const now = Date.now();
      if (slots.running >= kind.concurrency || now - slots.lastStartAt < stallMs) continue;
      const queue = queues.get(kind.queue)!;
      const readySince = await oldestReadySince(queue, now);
      if (readySince === undefined || now - readySince < stallMs || (await queue.getRateLimitTtl()) > 0) continue;
      deps.logger.error(
        { event: "worker.fetch_stalled", queue: kind.queue, readyForMs: now - readySince, idleForMs: now - slots.lastStartAt },
        "jobs are ready but this worker has started none; its fetch loop is replaced",
      );
      const stalled = all[i]!;
      slots.lastStartAt = now;
      all[i] = start(kind);
      void stalled.close().catch(() => undefined);
    }
  };
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

/** One sweep now (this worker just started) and one every interval across all workers (a BullMQ job scheduler: one worker runs each). */
function startSweeps(deps: Pick<WorkerDeps, "queues" | "reconcile" | "logger">): void {
  const { reconcile: queue } = deps.queues;
  const keep = { removeOnComplete: { count: 100 }, removeOnFail: { count: 100 } };
  Promise.all([queue.add("sweep", {}, keep), queue.upsertJobScheduler("sweep", { every: deps.reconcile.intervalMs }, { name: "sweep", opts: keep })]).catch(
    (error: unknown) => deps.logger.warn({ event: "reconcile.schedule_failed", err: error }, "could not schedule the reconciler; the next start-up will"),
  );
}
