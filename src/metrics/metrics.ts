import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { AggregatorRegistry, Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { GeneratedReply } from "../ai/claude.ts";
import { estimateCostUsd, NO_OVERRIDES, type PriceOverrides } from "../ai/pricing.ts";
import type { Clock } from "../clock.ts";
import { safeEqual } from "../crypto/safe-equal.ts";
import type { Db } from "../db/client.ts";
import { oldestReadySince, type Queues } from "../queue/queues.ts";

/**
 * Prometheus metrics. One registry per process (tests make one per system under test). Every
 * counter and histogram is per process and carries no label of the process's own (beyond
 * `role` under npm start), so `sum()` across processes adds them up; the gauges read from
 * Redis and Postgres say the same in every process, so take their `max()`.
 */
export interface Metrics {
  registry: Registry;
  webhookItems: Counter<"kind" | "outcome">;
  /** One observation per delivery (POST /webhook), by what it was answered. */
  webhookDuration: Histogram<"outcome">;
  /** Webhook items answered 200 on the queues' master alone, because it had no replica to wait for. */
  redisUnreplicatedWrites: Counter;
  jobs: Counter<"queue" | "outcome">;
  deadLettersCreated: Counter<"reason">;
  /** From the webhook's receipt of the newest message a reply answers to Meta taking the reply's last part. */
  webhookToReply: Histogram;
  claudeCalls: Counter<"phone_number_id" | "model" | "outcome">;
  claudeTokens: Counter<"phone_number_id" | "model" | "kind">;
  claudeCost: Counter<"phone_number_id" | "model">;
  toolCalls: Counter<"phone_number_id" | "tool" | "outcome">;
  /** Messages Meta priced (a status's `pricing`), once each, by number, category and whether billed. */
  metaMessages: Counter<"phone_number_id" | "category" | "billable">;
  /** Their amount by META_RATES_FILE, in the rate card's currency. */
  metaCost: Counter<"phone_number_id" | "category">;
  /** WhatsApp messages per reply: each one is billed since October 2026. */
  replyParts: Histogram<"phone_number_id">;
  graphErrors: Counter<"code" | "via">;
  staffNotifications: Counter<"channel" | "outcome">;
  /** Rows (and kept jobs) whose words RETENTION's sweep emptied, by kind. */
  retentionErased: Counter<"kind">;
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry });
  const registers = [registry];
  return { registry, ...messagePathMetrics(registers), ...costMetrics(registers) };
}

/** A message's way through: the webhook, the jobs, the dead letters, the time to a reply, Meta's errors, staff told. */
function messagePathMetrics(registers: Registry[]) {
  return {
    webhookItems: new Counter({
      name: "wa_webhook_items_total",
      help: "Webhook items by kind (message, status, event, ignored) and outcome (enqueued, duplicate: Meta delivered it again, ignored, failed)",
      labelNames: ["kind", "outcome"],
      registers,
    }),
    webhookDuration: new Histogram({
      name: "wa_webhook_duration_seconds",
      help: "Time to answer a delivery (POST /webhook), by outcome: accepted (200), unavailable (503: Meta delivers again), bad_signature, malformed, too_large, error",
      labelNames: ["outcome"],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    redisUnreplicatedWrites: new Counter({
      name: "wa_redis_unreplicated_writes_total",
      help: "Webhook items acknowledged (200) with no Redis replica holding their job: REDIS_WAIT_REPLICAS asks for replicas and the queues' master has none (REDIS_WAIT_STRICT off); losing that master before a replica syncs would lose them",
      registers,
    }),
    jobs: new Counter({
      name: "wa_jobs_total",
      help: "Finished jobs by queue and outcome (reply outcomes: sent, dead_lettered, nothing_to_answer; failed = will retry or gave up)",
      labelNames: ["queue", "outcome"],
      registers,
    }),
    retentionErased: new Counter({
      name: "wa_retention_erased_total",
      help: "Rows whose customers' words the RETENTION sweep emptied (the rows, counts and costs stay), and finished jobs it removed (kind jobs), by kind",
      labelNames: ["kind"],
      registers,
    }),
    deadLettersCreated: new Counter({
      name: "wa_dead_letters_created_total",
      help: "Dead letters created, by reason (the staff queue's kinds, src/dlq/explain.ts); a failure joining an open one is not counted again",
      labelNames: ["reason"],
      registers,
    }),
    webhookToReply: new Histogram({
      name: "wa_webhook_to_reply_seconds",
      help: "From the webhook's receipt of the newest customer message a reply answers (its debounce included) to Meta accepting the reply's last part; a staff resend counts the whole wait",
      buckets: [0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 900, 3600],
      registers,
    }),
  };
}

/** What replies cost: Claude's calls and tokens, the business's tools, the messages Meta bills. */
function costMetrics(registers: Registry[]) {
  return {
    claudeCalls: new Counter({
      name: "wa_claude_calls_total",
      help: "Claude calls by business number, model asked for, and outcome (ok, retryable_error, permanent_error, timeout: reached Anthropic and may be billed, with no answer read)",
      labelNames: ["phone_number_id", "model", "outcome"],
      registers,
    }),
    claudeTokens: new Counter({
      name: "wa_claude_tokens_total",
      help: "Tokens Claude billed, by business number, model and kind (input, cache_read, cache_write: 5-minute and 1-hour together, output); the share read from cache is cache_read / (input + cache_read + cache_write)",
      labelNames: ["phone_number_id", "model", "kind"],
      registers,
    }),
    claudeCost: new Counter({
      name: "wa_claude_cost_usd_total",
      help: "Estimated cost of Claude's answers in USD (src/ai/models.ts's prices, cache writes at their TTL's), by business number and model; models without a price are not counted",
      labelNames: ["phone_number_id", "model"],
      registers,
    }),
    toolCalls: new Counter({
      name: "wa_tool_calls_total",
      help: "Calls of a business's tools (issue 19), by business number, tool and outcome (ok; error: an answer with an error status, or nothing sent; no_answer: the business may have acted and its answer was lost); a call repeated after a crash counts again",
      labelNames: ["phone_number_id", "tool", "outcome"],
      registers,
    }),
    metaMessages: new Counter({
      name: "wa_meta_messages_total",
      help: "Sent messages Meta priced in a status webhook, counted once each however many statuses carried it, by business number, pricing category and billable (true: Meta bills it; false: free, e.g. free_entry_point)",
      labelNames: ["phone_number_id", "category", "billable"],
      registers,
    }),
    metaCost: new Counter({
      name: "wa_meta_cost_total",
      help: "What Meta bills for the messages sent, by META_RATES_FILE's rate card (in its currency), by business number and pricing category; billed messages the card has no price for are not counted here",
      labelNames: ["phone_number_id", "category"],
      registers,
    }),
    replyParts: new Histogram({
      name: "wa_reply_parts",
      help: "WhatsApp messages per reply, as stored to be sent (a reply over 4096 characters is split; each part is a billed message)",
      labelNames: ["phone_number_id"],
      buckets: [1, 2, 3, 4, 5, 10],
      registers,
    }),
    graphErrors: new Counter({
      name: "wa_graph_errors_total",
      help: "Graph API failures by Meta's error code (or http_<status>, timeout, network, ...) and via: api (the answer to our request) or status (a failed delivery webhook)",
      labelNames: ["code", "via"],
      registers,
    }),
    staffNotifications: new Counter({
      name: "wa_staff_notifications_total",
      help: "Staff notifications of new dead letters and handoffs (law 14), by channel (webhook, email) and outcome (sent; failed: an attempt the receiver did not take, retried)",
      labelNames: ["channel", "outcome"],
      registers,
    }),
  };
}

/** One Claude call: its outcome, and when it answered, its tokens and estimated cost. */
export function countClaudeCall(
  metrics: Metrics,
  labels: { phoneNumberId: string; model: string },
  result: { ok: GeneratedReply } | { error: { retryable: boolean; timedOut: boolean } },
  prices: PriceOverrides = NO_OVERRIDES,
): void {
  const by = { phone_number_id: labels.phoneNumberId, model: labels.model };
  if ("error" in result) {
    // A timed-out call may have been billed without an answer we could use: counted apart, since its retry is a second paid call.
    const outcome = result.error.timedOut ? "timeout" : result.error.retryable ? "retryable_error" : "permanent_error";
    metrics.claudeCalls.inc({ ...by, outcome });
    return;
  }
  const usage = result.ok;
  metrics.claudeCalls.inc({ ...by, outcome: "ok" });
  metrics.claudeTokens.inc({ ...by, kind: "input" }, usage.inputTokens);
  metrics.claudeTokens.inc({ ...by, kind: "cache_read" }, usage.cacheReadTokens);
  metrics.claudeTokens.inc({ ...by, kind: "cache_write" }, usage.cacheCreationTokens);
  metrics.claudeTokens.inc({ ...by, kind: "output" }, usage.outputTokens);
  // Priced by the model that answered (a dated id), counted under the one asked for.
  const cost = estimateCostUsd(usage.model, usage, prices) ?? estimateCostUsd(labels.model, usage, prices);
  if (cost !== undefined) metrics.claudeCost.inc(by, cost);
}

/** A registry's metrics as plain data (`getMetricsAsJSON`), which crosses a process boundary. */
export type MetricsSnapshot = Awaited<ReturnType<Registry["getMetricsAsJSON"]>>;

/**
 * Several processes' metrics as one exposition (the `all` role: the web and its worker child
 * behind one METRICS_PORT). Each process labels its series with a default label of its own
 * (`role`), so no two series coincide and summing leaves every value as its process wrote it;
 * prom-client's per-metric aggregators (average, omit, ...) would blur or drop them.
 */
export function mergeMetrics(snapshots: MetricsSnapshot[]): Registry {
  return AggregatorRegistry.aggregate(snapshots.map((metrics) => metrics.map((metric) => ({ ...metric, aggregator: "sum" }))));
}

const JOB_STATES = ["waiting", "active", "delayed", "failed", "completed"] as const;

/**
 * `/metrics`. On the web port it exists only with `bearerToken`, and answers only to that
 * bearer; on the metrics listener (loopback unless METRICS_HOST opens it) it asks for the same
 * bearer when there is one, and is open otherwise.
 */
export function metricsRoutes(deps: {
  metrics: Metrics;
  queues: Queues;
  db: Db;
  bearerToken?: string | undefined;
  /** The clock the queues' ages are measured with. */
  clock: Clock;
  /** Other processes' metrics to serve beside ours (the worker child of the `all` role). */
  otherProcesses?: (() => Promise<MetricsSnapshot[]>) | undefined;
}): FastifyPluginAsync {
  const { registry } = deps.metrics;
  registerStateGauges(deps);
  return async (app: FastifyInstance) => {
    app.get("/metrics", async (request, reply) => {
      if (deps.bearerToken !== undefined) {
        const header = request.headers.authorization ?? "";
        if (!header.startsWith("Bearer ") || !safeEqual(header.slice("Bearer ".length), deps.bearerToken)) {
          return reply.code(401).header("www-authenticate", "Bearer").send({ error: "unauthorized" });
        }
      }
      try {
        const body = deps.otherProcesses
          ? await mergeMetrics([await registry.getMetricsAsJSON(), ...(await deps.otherProcesses())]).metrics()
          : await registry.metrics();
        return reply.type(registry.contentType).send(body);
      } catch (error) {
        request.log.warn({ event: "metrics.unavailable", err: error }, "could not collect metrics");
        return reply.code(503).send("# metrics unavailable: Redis or Postgres did not answer\n");
      }
    });
  };
}

/**
 * Gauges that read the shared state (Redis, Postgres) at scrape time, so every process reports
 * the same queue depths and open dead letters. Registered once per registry: the metrics
 * listener and the web port may serve the same one.
 */
function registerStateGauges(deps: { metrics: Metrics; queues: Queues; db: Db; clock: Clock }): void {
  const now = () => deps.clock.now().getTime();
  const { registry } = deps.metrics;
  if (registry.getSingleMetric("wa_queue_jobs")) return;
  new Gauge({
    name: "wa_queue_jobs",
    help: "Jobs in each BullMQ queue by state",
    labelNames: ["queue", "state"],
    registers: [registry],
    async collect() {
      for (const queue of Object.values(deps.queues)) {
        const counts = await queue.getJobCounts(...JOB_STATES);
        for (const state of JOB_STATES) this.set({ queue: queue.name, state }, counts[state] ?? 0);
      }
    },
  });
  new Gauge({
    name: "wa_queue_oldest_waiting_seconds",
    help: "How long the longest-ready job of each BullMQ queue (waiting, or delayed and come due) has waited for a worker (0 when none is ready): workers missing, stuck or behind",
    labelNames: ["queue"],
    registers: [registry],
    async collect() {
      const ages = await Promise.all(Object.values(deps.queues).map(async (queue) => [queue.name, await readyForMs(queue, now())] as const));
      for (const [queue, ageMs] of ages) this.set({ queue }, ageMs / 1000);
    },
  });
  new Gauge({
    name: "wa_dead_letters_open",
    help: "Dead letters waiting for staff",
    registers: [registry],
    async collect() {
      this.set(await deps.db.deadLetter.count({ where: { state: "open" } }));
    },
  });
}

/** How long the queue's longest-ready job has waited for a worker (0 when none is ready). */
async function readyForMs(queue: Queues[keyof Queues], nowMs: number): Promise<number> {
  const since = await oldestReadySince(queue, nowMs);
  return since === undefined ? 0 : nowMs - since;
}
