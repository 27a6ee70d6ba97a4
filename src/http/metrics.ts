import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";
import type { Db } from "../db/client.ts";
import type { Queues } from "../queue/queues.ts";

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

const JOB_STATES = ["waiting", "active", "delayed", "failed", "completed"] as const;

export function metricsRoutes(deps: { metrics: Metrics; queues: Queues; db: Db }): FastifyPluginAsync {
  const { registry } = deps.metrics;
  // Gauges read the shared state (Redis, Postgres) at scrape time, so every web process
  // reports the same queue depths and open dead letters.
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

  return async (app: FastifyInstance) => {
    app.get("/metrics", async (request, reply) => {
      try {
        const body = await registry.metrics();
        return reply.type(registry.contentType).send(body);
      } catch (error) {
        request.log.warn({ event: "metrics.unavailable", err: error }, "could not collect metrics");
        return reply.code(503).send("# metrics unavailable: Redis or Postgres did not answer\n");
      }
    });
  };
}
