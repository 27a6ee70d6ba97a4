import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { AggregatorRegistry, Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";
import type { Db } from "../db/client.ts";
import type { Queues } from "../queue/queues.ts";
import { safeEqual } from "../webhook/signature.ts";

/** Prometheus metrics. One registry per process (tests make one per system under test). */
export interface Metrics {
  registry: Registry;
  webhookItems: Counter<"kind" | "outcome">;
  jobs: Counter<"queue" | "outcome">;
}

export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics) collectDefaultMetrics({ register: registry });
  return {
    registry,
    webhookItems: new Counter({
      name: "wa_webhook_items_total",
      help: "Webhook items by kind (message, status, ignored) and outcome (enqueued, duplicate, ignored, failed)",
      labelNames: ["kind", "outcome"],
      registers: [registry],
    }),
    jobs: new Counter({
      name: "wa_jobs_total",
      help: "Finished jobs by queue and outcome (reply outcomes: sent, dead_lettered, nothing_to_answer; failed = will retry or gave up)",
      labelNames: ["queue", "outcome"],
      registers: [registry],
    }),
  };
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
 * `/metrics`. On the metrics listener it is open (that port belongs on the private network);
 * on the web port it exists only with `bearerToken`, and answers only to that bearer.
 */
export function metricsRoutes(deps: {
  metrics: Metrics;
  queues: Queues;
  db: Db;
  bearerToken?: string | undefined;
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
function registerStateGauges(deps: { metrics: Metrics; queues: Queues; db: Db }): void {
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
    name: "wa_dead_letters_open",
    help: "Dead letters waiting for staff",
    registers: [registry],
    async collect() {
      this.set(await deps.db.deadLetter.count({ where: { state: "open" } }));
    },
  });
}
