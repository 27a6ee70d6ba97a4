import { type Job, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { ClaudeClient } from "../ai/claude.ts";
import type { Config } from "../config.ts";
import type { Db } from "../db/client.ts";
import type { Metrics } from "../http/metrics.ts";
import type { Logger } from "../logger.ts";
import { QUEUE_NAMES, type InboundJobData, type Queues, type ReplyJobData, type StatusJobData } from "../queue/queues.ts";
import { GraphClient } from "../whatsapp/graph-client.ts";
import { processInbound, type InboundDeps } from "./inbound.ts";
import { retryDelayMs, type RetryDelaySettings } from "./policy.ts";
import { processReply, type ReplyDeps } from "./reply.ts";
import { processStatus } from "./status.ts";

export type WorkerDeps = InboundDeps &
  ReplyDeps & {
    connection: Redis;
    prefix: string;
    concurrency: { reply: number; inbound: number };
    lockMs: number;
    retry: RetryDelaySettings;
    metrics: Metrics;
  };

export interface Workers {
  all: Worker[];
  close(timeoutMs: number): Promise<void>;
}

/** The worker role as configured: its own Graph and Claude clients over the shared connections. */
export function startConfiguredWorkers(
  config: Config,
  shared: { db: Db; queues: Queues; logger: Logger; metrics: Metrics; connection: Redis },
): Workers {
  return startWorkers({
    ...shared,
    graph: new GraphClient({
      baseUrl: config.whatsapp.graphBaseUrl,
      version: config.whatsapp.graphVersion,
      accessToken: config.whatsapp.accessToken,
      timeoutMs: config.whatsapp.graphTimeoutMs,
      reconcileWaitMs: config.whatsapp.sendReconcileWaitMs,
    }),
    claude: new ClaudeClient({ ...config.anthropic }),
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
  });
}

export function startWorkers(deps: WorkerDeps): Workers {
  const settings = { backoffStrategy: (attemptsMade: number, _type?: string, err?: Error) => retryDelayMs(attemptsMade, err, deps.retry) };
  // A worker that dies mid-job loses its lock after lockMs; the job then runs again elsewhere.
  const common = { connection: deps.connection, prefix: deps.prefix, settings, lockDuration: deps.lockMs, stalledInterval: deps.lockMs };

  const all = [
    new Worker<InboundJobData>(QUEUE_NAMES.inbound, (job: Job<InboundJobData>) => processInbound(deps, job.data), {
      ...common,
      concurrency: deps.concurrency.inbound,
    }),
    // Replies wait on Claude for seconds: many run at once, one per conversation (law 8).
    new Worker<ReplyJobData>(QUEUE_NAMES.reply, (job: Job<ReplyJobData>) => processReply(deps, job), {
      ...common,
      concurrency: deps.concurrency.reply,
      // BullMQ honours a manual queue.rateLimit() (Meta's sender-wide limits, see
      // processReply) only for workers with a limiter; this one is far above any real rate.
      limiter: { max: 10_000, duration: 1000 },
    }),
    new Worker<StatusJobData>(QUEUE_NAMES.status, (job: Job<StatusJobData>) => processStatus(deps, job.data), {
      ...common,
      concurrency: deps.concurrency.inbound,
    }),
  ];
  for (const worker of all) {
    worker.on("completed", (_job, result: unknown) => {
      deps.metrics.jobs.inc({ queue: worker.name, outcome: typeof result === "string" ? result : "done" });
    });
    worker.on("failed", (job, error) => {
      deps.metrics.jobs.inc({ queue: worker.name, outcome: "failed" });
      const final = job ? job.attemptsMade >= (job.opts.attempts ?? 1) : true;
      deps.logger[final ? "error" : "warn"](
        { event: final ? "job.failed" : "job.retrying", queue: worker.name, job: job?.id, attempt: job?.attemptsMade, err: error },
        final ? "job failed for good; it stays in the failed set for inspection" : "job failed; will retry",
      );
    });
    worker.on("error", (error) => deps.logger.error({ event: "worker.error", queue: worker.name, err: error }, "worker error"));
  }

  return {
    all,
    /** Stop taking jobs and let active ones finish, for at most `timeoutMs`; the rest are picked up again as stalled. */
    async close(timeoutMs: number) {
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
