import { DelayedError, type Job, type Queue, Worker } from "bullmq";
import { ClaudeClient } from "../ai/claude.ts";
import { TRANSCRIBE_TIMEOUT_MS, Transcriber } from "../ai/transcriber.ts";
import { type Clock, systemClock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import { DeadLetterDesk } from "../dlq/dead-letters.ts";
import { forTheQueue } from "../errors.ts";
import { type KnowledgeBase, watchNumbersKnowledge } from "../knowledge/knowledge.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { type StaffChannels, staffChannels } from "../notify/channels.ts";
import { JOB_NAMES, JOBS, type JobData, type JobDefinition, type JobName, readJob } from "../queue/catalog.ts";
import { closeQueues, createQueues, type Queues } from "../queue/queues.ts";
import type { RedisClient } from "../queue/redis.ts";
import { StoredAnswers } from "../queue/stored-answers.ts";
import { VoiceNotes } from "../replies/voice-notes.ts";
import type { Settings } from "../settings.ts";
import { type BusinessActions, businessActions } from "../tools/actions.ts";
import type { Tracing } from "../tracing/tracing.ts";
import { GraphClient } from "../whatsapp/graph-client.ts";
import { type RetryDelaySettings, retryDelayMs } from "./backoff.ts";
import { CsatAsks, csatProcessor } from "./csat.ts";
import { eventsProcessor } from "./events.ts";
import { type FetchSlots, type WorkerKind, watchFetching } from "./fetch-watchdog.ts";
import { inboundProcessor } from "./inbound.ts";
import { notifyProcessor, scheduleCollect } from "./notify.ts";
import { decideFate } from "./policy.ts";
import type { Processor, Processors } from "./processor.ts";
import { reconcileProcessor } from "./reconcile.ts";
import { type ReplySettings, replyProcessor } from "./reply.ts";
import { startRetentionSweep } from "./retention.ts";
import { statusProcessor } from "./status.ts";

/**
 * The worker role: one BullMQ worker per job of the catalog (src/queue/catalog.ts), each
 * running its processor, which is made from the dependencies it uses alone.
 */

/** What every worker of a process shares, given by the entry point. */
export interface WorkerShared {
  db: Db;
  logger: Logger;
  metrics: Metrics;
  /** The clock main.ts made (a test may hand in its own); the system's by default. */
  clock?: Clock | undefined;
  /** A connection that waits out a Redis outage (unlike the web role's): the workers' and their queue handles'. */
  connection: RedisClient;
  /** Traces on: the inbound, reply, status and events runs continue their message's trace. */
  tracing?: Tracing | undefined;
}

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

/** The worker role as configured: each processor with its own dependencies, and queue handles on the workers' own connection. */
export function startConfiguredWorkers(settings: Settings, given: WorkerShared): Workers {
  const shared = { ...given, clock: given.clock ?? systemClock };
  const clients = workerClients(settings, shared);
  const processors = configuredProcessors(settings, { ...shared, ...clients });
  const retry = retryOf(settings.jobs);
  const workers = startWorkers(
    { ...shared, queues: clients.queues, prefix: settings.queuePrefix, lockMs: settings.jobs.lockMs, retry, jobs: settings.jobs },
    processors,
  );
  startSweeps(clients.queues.reconcile, settings.reconcile.intervalMs, shared.logger);
  // RETENTION set: this process forgets what is older (src/jobs/retention.ts).
  const retention = settings.retention && startRetentionSweep({ ...shared, queues: clients.queues }, settings.retention);
  // Staff notifications on (a channel configured): this process collects and delivers them (src/notify/).
  if (clients.channels)
    scheduleCollect(clients.queues.notify, settings.staffNotify.batchMs).catch((error: unknown) =>
      shared.logger.warn({ event: "notify.schedule_failed", err: error }, "could not schedule staff notifications; the next start-up will"),
    );
  return {
    all: workers.all,
    async close(timeoutMs) {
      await Promise.all([workers.close(timeoutMs), retention?.close()]);
      await clients.close();
    },
  };
}

const retryOf = (jobs: Settings["jobs"]): RetryDelaySettings => ({ baseDelayMs: jobs.retryBaseDelayMs, maxDelayMs: jobs.retryMaxDelayMs });

/** What the worker role talks to: its queue handles, the DLQ, the staff API's stored answers, Meta, Claude, the transcriber, the numbers' knowledge and tools, staff's channels. */
interface WorkerClients {
  queues: Queues;
  deadLetters: DeadLetterDesk;
  storedAnswers: StoredAnswers;
  graph: GraphClient;
  claude: ClaudeClient;
  transcriber: Transcriber | undefined;
  knowledge: KnowledgeBase | undefined;
  actions: BusinessActions;
  channels: StaffChannels | undefined;
  close(): Promise<void>;
}

/** The worker role's clients, each made from its settings, on the workers' own connection. */
function workerClients(settings: Settings, shared: WorkerShared & { clock: Clock }): WorkerClients {
  const { whatsapp, staffNotify } = settings;
  const queues = createQueues(
    shared.connection,
    { prefix: settings.queuePrefix, attempts: settings.jobs.attempts, telemetry: shared.tracing?.queues },
    (error) => shared.logger.warn({ event: "queue.error", role: "worker", err: error }, "queue connection error"),
  );
  // HOLDING_REPLY belongs to the desk: whatever records a dead letter offers it through the desk alone.
  const deadLetters = new DeadLetterDesk({ db: shared.db, queues, metrics: shared.metrics, clock: shared.clock }, settings.conversation.holdingReply);
  // Beside the queues, under their prefix: an erase the reconciler finishes forgets those quoting its customer.
  const storedAnswers = new StoredAnswers(shared.connection, settings.queuePrefix);
  const graph = { baseUrl: whatsapp.graphBaseUrl, version: whatsapp.graphVersion, accessToken: whatsapp.accessToken, timeoutMs: whatsapp.graphTimeoutMs };
  const knowledge = watchNumbersKnowledge(settings.numbers, {
    db: shared.db,
    logger: shared.logger,
    clock: shared.clock,
    tokenBudget: settings.knowledge.tokenBudget,
    limits: settings.knowledge.limits,
    language: settings.searchLanguage,
  });
  const channels = staffNotify.webhookUrl || staffNotify.email ? staffChannels(staffNotify) : undefined;
  return {
    queues,
    deadLetters,
    storedAnswers,
    graph: new GraphClient({ ...graph, clock: shared.clock }, shared.metrics.graphErrors, shared.tracing?.tracer),
    claude: new ClaudeClient({ ...settings.anthropic }, shared.tracing?.provider),
    transcriber: settings.transcription && new Transcriber({ ...settings.transcription, timeoutMs: TRANSCRIBE_TIMEOUT_MS }),
    knowledge,
    actions: businessActions(settings.businessTools, settings.tools.answerMaxBytes, shared.clock),
    channels,
    async close() {
      channels?.close();
      await Promise.all([closeQueues(queues), knowledge?.close()]);
    },
  };
}

/** Each job's processor, given the clients it talks to and the settings it reads, and nothing more. */
function configuredProcessors(settings: Settings, infra: WorkerShared & WorkerClients & { clock: Clock }): Processors {
  const { db, logger, metrics, clock, queues, deadLetters, storedAnswers } = infra;
  const retry = retryOf(settings.jobs);
  const notifier = infra.channels && { db, queue: queues.notify, logger, metrics, clock, channels: infra.channels };
  const { conversation } = settings;
  const csat = new CsatAsks({ db, queues, logger, clock }, conversation.csat);
  const voiceNotes = new VoiceNotes({ db, graph: infra.graph, transcriber: infra.transcriber }, conversation);
  return {
    inbound: inboundProcessor({ db, queues, deadLetters, clock, logger }, { replyDebounceMs: settings.jobs.replyDebounceMs, conversation }),
    reply: replyProcessor({ ...infra, csat, voiceNotes }, replySettings(settings)),
    status: statusProcessor({ db, queues, deadLetters, csat, clock, logger, metrics }, { metaRates: settings.costs.metaRates }),
    events: eventsProcessor({ db, logger, clock }, { conversation }),
    reconcile: reconcileProcessor(
      { db, queues, deadLetters, csat, clock, redis: infra.connection, storedAnswers, logger },
      { afterMs: settings.reconcile.afterMs, queuePrefix: settings.queuePrefix },
    ),
    csat: csatProcessor(csat),
    notify: notifier && notifyProcessor(notifier, { ...settings.staffNotify, retry }),
  };
}

/** What a reply run reads of the settings: the burst's wait, the history's size, the send's and Claude's clocks, the loop's bounds, prices. */
function replySettings(settings: Settings): ReplySettings {
  const { whatsapp, anthropic, jobs } = settings;
  return {
    retry: retryOf(jobs),
    historyMessages: anthropic.historyMessages,
    historyTokenBudget: anthropic.historyTokenBudget,
    numbers: settings.numbers,
    mediaMaxBytes: settings.conversation.mediaMaxBytes,
    replyDebounceMs: jobs.replyDebounceMs,
    conversation: settings.conversation,
    send: { leaseMs: Math.min(SEND_LEASE_MAX_MS, jobs.lockMs / 2), timeoutMs: whatsapp.graphTimeoutMs, reconcileWaitMs: whatsapp.sendReconcileWaitMs },
    generation: { startWithinMs: generationStartWithinMs(whatsapp.graphTimeoutMs), timeoutMs: anthropic.timeoutMs },
    tools: settings.tools,
    modelPrices: settings.costs.modelPrices,
  };
}

/** What the workers of a process run on, beside their processors. */
export interface WorkerRuntime extends WorkerShared {
  clock: Clock;
  queues: Queues;
  prefix: string;
  /** How long a job's lock lives without renewal: a dead worker's job runs again elsewhere after this. */
  lockMs: number;
  retry: RetryDelaySettings;
  jobs: Settings["jobs"];
}

interface StartableKind extends WorkerKind {
  traced: boolean;
  limiter: { max: number; duration: number } | undefined;
  // A Job of any data, as BullMQ's Worker takes it: each job's own data type is checked by readJob.
  process: (job: Job, token?: string) => Promise<unknown>;
}

/** One worker per job of the catalog that has a processor here, and the watchdog of their fetch loops. */
export function startWorkers(runtime: WorkerRuntime, processors: Processors): Workers {
  const fetching = new Map<string, FetchSlots>();
  const kinds = JOB_NAMES.flatMap((name) => {
    const processor = processors[name] as Processor<typeof name> | undefined;
    if (!processor) return [];
    fetching.set(name, { running: 0, lastStartAt: runtime.clock.monotonicMs() });
    const { limiter, traced, concurrency }: Pick<JobDefinition, "limiter" | "traced" | "concurrency"> = JOBS[name];
    return [{ queue: name, concurrency: concurrency(runtime.jobs), limiter, traced, process: guarded(runtime, name, processor, fetching.get(name)!) }];
  });
  const start = (kind: StartableKind) => startWorker(runtime, kind);
  const all = kinds.map(start);
  const watchdog = watchFetching(
    { queues: runtime.queues as unknown as Record<string, Queue>, logger: runtime.logger, lockMs: runtime.lockMs, clock: runtime.clock },
    kinds,
    all,
    fetching,
    start,
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
        runtime.logger.warn({ event: "worker.shutdown_timeout" }, "active jobs did not finish in time; forcing close");
        await Promise.all(all.map((w) => w.close(true)));
      }
    },
  };
}

/**
 * What every job shares: its data read first (law 11: data that can never succeed is settled
 * now, never retried, as the catalog says); a wait (Postgres or Redis away, a postponement)
 * moves the job to the delayed set without spending an attempt, for as long as it takes
 * (law 6); a run fenced out by a newer one ends quietly (law 8). Everything else is the job's
 * own failure.
 */
function guarded<N extends JobName>(runtime: WorkerRuntime, name: N, processor: Processor<N>, slots: FetchSlots) {
  const { logger } = runtime;
  return async (job: Job, token?: string): Promise<unknown> => {
    slots.running++;
    slots.lastStartAt = runtime.clock.monotonicMs();
    try {
      const read = readJob(name, job.data, job.timestamp);
      if (!read.ok) {
        logger.error({ event: "job.invalid", queue: name, job: job.id, reason: read.reason }, "job data can never be processed; settled without retrying");
        if (JOBS[name].invalid === "dead_letter") await processor.keepInvalid?.(job.data, read.reason);
        return "invalid";
      }
      if (read.cleaned.length > 0)
        logger.warn({ event: "job.cleaned", queue: name, job: job.id, cleaned: read.cleaned }, "job data cleaned so it can be stored");
      job.data = read.data;
      return await processor.run(job as Job<JobData<N>>);
    } catch (error) {
      const fate = decideFate(error, job, runtime.retry, runtime.clock.now().getTime());
      if (fate.action === "stop") {
        logger.warn({ event: "job.fenced_out", queue: name, job: job.id, reason: fate.reason }, "another worker took this job over; this run stops");
        return "fenced_out";
      }
      if (fate.action !== "wait") throw forTheQueue(error);
      logger.info({ event: "job.waiting", queue: name, job: job.id, delayMs: fate.delayMs, reason: fate.reason }, "job waits without spending an attempt");
      await job.moveToDelayed(runtime.clock.now().getTime() + fate.delayMs, token);
      throw new DelayedError();
    } finally {
      slots.running--;
    }
  };
}

function startWorker(runtime: WorkerRuntime, kind: StartableKind): Worker {
  const { logger, metrics } = runtime;
  const worker = new Worker(kind.queue, kind.process, {
    connection: runtime.connection,
    prefix: runtime.prefix,
    settings: { backoffStrategy: (attemptsMade: number, _type?: string, err?: Error) => retryDelayMs(attemptsMade, err, runtime.retry) },
    // A worker that dies mid-job loses its lock after lockMs; the job then runs again elsewhere.
    lockDuration: runtime.lockMs,
    stalledInterval: runtime.lockMs,
    concurrency: kind.concurrency,
    ...(kind.limiter ? { limiter: kind.limiter } : {}),
    ...(runtime.tracing && kind.traced ? { telemetry: runtime.tracing.queues } : {}),
  });
  worker.on("completed", (_job, result: unknown) => {
    metrics.jobs.inc({ queue: worker.name, outcome: typeof result === "string" ? result : "done" });
  });
  worker.on("failed", (job, error) => {
    metrics.jobs.inc({ queue: worker.name, outcome: "failed" });
    const final = job ? job.attemptsMade >= (job.opts.attempts ?? 1) : true;
    logger[final ? "error" : "warn"](
      { event: final ? "job.failed" : "job.retrying", queue: worker.name, job: job?.id, attempt: job?.attemptsMade, err: error },
      final ? "job failed for good; the reconciler drives it again or dead-letters it" : "job failed; will retry",
    );
  });
  worker.on("error", (error) => logger.error({ event: "worker.error", queue: worker.name, err: error }, "worker error"));
  return worker;
}

/** One sweep now (this worker just started) and one every interval across all workers (a BullMQ job scheduler: one worker runs each). */
function startSweeps(queue: Queues["reconcile"], intervalMs: number, logger: Logger): void {
  // The scheduler's jobs take their options from its template alone: the catalog's retention, given here.
  const keep = JOBS.reconcile.retention;
  Promise.all([queue.add("sweep", {}, keep), queue.upsertJobScheduler("sweep", { every: intervalMs }, { name: "sweep", opts: keep })]).catch((error: unknown) =>
    logger.warn({ event: "reconcile.schedule_failed", err: error }, "could not schedule the reconciler; the next start-up will"),
  );
}
