import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp, buildMetricsApp } from "../src/app.ts";
import { createDb } from "../src/db/client.ts";
import { createMetrics } from "../src/metrics/metrics.ts";
import { redisPersistenceWarnings } from "../src/queue/redis.ts";
import { loadSettings } from "../src/settings.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.close());

describe("health", () => {
  it("/healthz answers while the process is alive", async () => {
    const res = await h.app.inject({ method: "GET", url: "/healthz" });
    expect(res.statusCode).toBe(200);
  });

  it("/readyz answers 200 when Redis and Postgres both answer", async () => {
    const res = await h.app.inject({ method: "GET", url: "/readyz" });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({ ok: true, redis: true, postgres: true });
  });

  it("/readyz answers 503 naming Postgres when the database is unreachable", async () => {
    const db = createDb("postgresql://postgres@127.0.0.1:1/none", { poolSize: 1 });
    const app = buildApp({ config: h.config, logger: pino({ level: "silent" }), redis: h.redis, queues: h.queues, db, metrics: createMetrics() });
    try {
      const res = await app.inject({ method: "GET", url: "/readyz" });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toEqual({ ok: false, redis: true, postgres: false });
    } finally {
      await app.close();
      await db.$disconnect();
    }
  });
});

describe("/metrics", () => {
  it("the metrics app reports webhook items, finished jobs, queue depths and open dead letters in Prometheus text format", async () => {
    const metricsApp = buildMetricsApp({ logger: pino({ level: "silent" }), queues: h.queues, db: h.db, metrics: h.metrics });
    try {
      h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
      await h.deliver(textWebhook({ text: "hi" }).body);
      await eventually(async () => (await h.db.deadLetter.count()) === 1, "a dead letter");
      await eventually(async () => {
        const text = (await metricsApp.inject({ method: "GET", url: "/metrics" })).body;
        return text.includes('wa_jobs_total{queue="reply",outcome="dead_lettered"} 1');
      }, "the reply job to be counted");

      const res = await metricsApp.inject({ method: "GET", url: "/metrics" });
      expect(res.statusCode).toBe(200);
      expect(res.headers["content-type"]).toMatch(/^text\/plain/);
      expect(res.body).toContain('wa_webhook_items_total{kind="message",outcome="enqueued"} 1');
      expect(res.body).toContain('wa_jobs_total{queue="inbound",outcome="done"} 1');
      expect(res.body).toContain("wa_dead_letters_open 1");
      expect(res.body).toMatch(/wa_queue_jobs\{queue="reply",state="completed"\} \d+/);
    } finally {
      await metricsApp.close();
    }
  });

  it("the webhook's port does not serve them without METRICS_TOKEN", async () => {
    expect(h.config.metrics.token).toBeUndefined();
    expect((await h.app.inject({ method: "GET", url: "/metrics" })).statusCode).toBe(404);
  });

  it("with METRICS_TOKEN, the webhook's port and the metrics listener serve them to that bearer only, from the same registry", async () => {
    const token = "metrics-token-0123456789";
    const config = loadSettings({ ...h.env, METRICS_TOKEN: token });
    const logger = pino({ level: "silent" });
    const metrics = createMetrics();
    const app = buildApp({ config, logger, redis: h.redis, queues: h.queues, db: h.db, metrics });
    const metricsApp = buildMetricsApp({ logger, queues: h.queues, db: h.db, metrics, bearerToken: config.metrics.token });
    try {
      for (const served of [app, metricsApp]) {
        for (const headers of [{}, { authorization: "Bearer wrong-token-0123456789" }, { authorization: token }, { authorization: `Basic ${token}` }]) {
          const refused = await served.inject({ method: "GET", url: "/metrics", headers });
          expect(refused.statusCode).toBe(401);
          expect(refused.body).not.toContain("wa_");
        }
        const res = await served.inject({ method: "GET", url: "/metrics", headers: { authorization: `Bearer ${token}` } });
        expect(res.statusCode).toBe(200);
        expect(res.body).toContain("wa_dead_letters_open");
      }
      // Liveness tells nothing: a worker's HEALTHCHECK asks it without the token.
      expect((await metricsApp.inject({ method: "GET", url: "/healthz" })).statusCode).toBe(200);
    } finally {
      await Promise.all([app.close(), metricsApp.close()]);
    }
  });
});

describe("Redis settings", () => {
  it("the worker's start-up check names what BullMQ needs when Redis runs without AOF or noeviction", async () => {
    const [, aof] = (await h.redis.config("GET", "appendonly")) as [string, string];
    const [, policy] = (await h.redis.config("GET", "maxmemory-policy")) as [string, string];
    const warnings = await redisPersistenceWarnings(h.redis);
    expect(warnings.some((w) => w.includes("appendonly"))).toBe(aof !== "yes");
    expect(warnings.some((w) => w.includes("noeviction"))).toBe(policy !== "noeviction");
  });
});
