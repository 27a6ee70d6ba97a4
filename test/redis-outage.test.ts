import type { Queue } from "bullmq";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp } from "../src/app.ts";
import { createDb } from "../src/db/client.ts";
import { createMetrics } from "../src/metrics/metrics.ts";
import { inboundJobId } from "../src/queue/catalog.ts";
import { closeQueues, createQueues } from "../src/queue/queues.ts";
import { createFailFastRedis } from "../src/queue/redis.ts";
import { loadSettings } from "../src/settings.ts";
import { signMetaBody } from "../src/webhook/signature.ts";
import { eventually, type Harness, startHarness, TEST_APP_SECRET, testEnv } from "./support/harness.ts";
import { PrivateRedis } from "./support/private-redis.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 2: 200 means safely enqueued. When Redis is gone the webhook must answer 5xx promptly
 * (at most a short grace for a reconnection, REDIS_READY_GRACE_MS, so Meta delivers again),
 * and once Redis is back the next delivery must succeed.
 *
 * The machine's shared Redis is used by every other test, so this file runs its own
 * redis-server on a free port and stops and restarts that one.
 */

let redisServer: PrivateRedis | undefined;
let h: Harness | undefined;

async function jobCount(queue: Queue): Promise<number> {
  const counts = await queue.getJobCounts();
  return Object.values(counts).reduce((sum, n) => sum + n, 0);
}

beforeAll(async () => {
  redisServer = await PrivateRedis.start();
  h = await startHarness({ workers: 0, env: { REDIS_URL: redisServer.url } });
});

afterAll(async () => {
  try {
    // Close while Redis is up, so nothing in close() waits on a connection that cannot come back.
    if (h) {
      await redisServer?.resume();
      await eventually(() => h!.redis.status === "ready", "the app's Redis connection to be ready before closing");
      await h.close();
    }
  } finally {
    await redisServer?.destroy();
  }
});

function harness(): Harness {
  if (!h) throw new Error("harness not started");
  return h;
}

describe("Redis outage on the web role (law 2)", () => {
  it("Redis stopped → the webhook answers 503 quickly rather than hanging, and after Redis returns the next delivery is answered 200 and enqueued", async () => {
    const h = harness();
    expect(h.config.redis).toEqual({ kind: "single", url: redisServer!.url, tls: undefined });

    // Before the outage: a normal delivery.
    const before = textWebhook({ text: "before the outage" });
    expect((await h.deliver(before.body)).statusCode).toBe(200);
    expect(await h.queues.inbound.getJob(inboundJobId(before.wamids[0]!))).toBeDefined();

    // Redis dies. Meta delivers at once, perhaps before the app's connection has noticed:
    // 503 (Meta will deliver again), promptly.
    await redisServer!.kill();
    const during = textWebhook({ text: "during the outage" });
    const started = Date.now();
    const refused = await h.deliver(during.body);
    const elapsedMs = Date.now() - started;
    expect(refused.statusCode).toBe(503);
    // It answers rather than hangs (the fail-fast connection: no offline queue).
    expect(elapsedMs).toBeLessThan(10_000);

    // Once the connection knows Redis is gone, deliveries are refused the same way.
    await eventually(() => h.redis.status !== "ready", "the app to notice Redis is gone");
    expect((await h.deliver(during.body)).statusCode).toBe(503);
    expect((await h.deliver(textWebhook({ text: "still down" }).body)).statusCode).toBe(503);

    // Redis comes back on the same address; the app reconnects by itself.
    await redisServer!.resume();
    await eventually(() => h.redis.status === "ready", "the app's Redis connection to be ready again", 15_000);

    // Meta's redelivery of the refused message succeeds and its job is in the queue.
    const redelivered = await h.deliver(during.body);
    expect(redelivered.statusCode).toBe(200);
    const job = await h.queues.inbound.getJob(inboundJobId(during.wamids[0]!));
    expect(job?.data.message.text?.body).toBe("during the outage");
    // Claimed by the same script that queued it (law 3): the refused deliveries left no claim behind.
    expect(await h.queues.inbound.getDeduplicationJobId(inboundJobId(during.wamids[0]!))).toBe(inboundJobId(during.wamids[0]!));

    // And a brand-new message after the outage is enqueued as well.
    const after = textWebhook({ text: "after the outage" });
    expect((await h.deliver(after.body)).statusCode).toBe(200);
    expect(await h.queues.inbound.getJob(inboundJobId(after.wamids[0]!))).toBeDefined();

    // This Redis kept nothing across the restart (no persistence): exactly the two new jobs.
    expect(await jobCount(h.queues.inbound)).toBe(2);
  });
});

describe("Redis down when the web role starts (law 2)", () => {
  it("the webhook answers 503 after the grace rather than waiting for the queues to connect, and 200 once Redis is up", async () => {
    const redisServer = await PrivateRedis.start();
    await redisServer.kill();
    const config = loadSettings(testEnv({ REDIS_URL: redisServer.url, QUEUE_PREFIX: `{t-down-${Date.now().toString(36)}}` }));
    const redis = createFailFastRedis(config.redis);
    redis.on("error", () => undefined);
    // BullMQ's queues wait for their connection's first "ready" before any add, with no timeout.
    const queues = createQueues(redis, { prefix: config.queuePrefix, attempts: config.jobs.attempts });
    const db = createDb(config.databaseUrl, { poolSize: 1 });
    const app = buildApp({ config, logger: pino({ level: "silent" }), redis, queues, db, metrics: createMetrics() });
    const deliver = (body: string) =>
      app.inject({
        method: "POST",
        url: "/webhook",
        payload: body,
        headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(Buffer.from(body), TEST_APP_SECRET) },
      });
    try {
      await app.ready();
      const { body, wamids } = textWebhook({ text: "while Redis is still down" });
      expect((await deliver(body)).statusCode).toBe(503);

      await redisServer.resume();
      await eventually(() => redis.status === "ready", "the web connection to reach Redis", 15_000);
      expect((await deliver(body)).statusCode).toBe(200);
      expect(await queues.inbound.getJob(inboundJobId(wamids[0]!))).toBeDefined();
    } finally {
      await redisServer.resume();
      await app.close();
      await closeQueues(queues);
      await redis.quit().catch(() => undefined);
      await db.$disconnect();
      await redisServer.destroy();
    }
  }, 30_000);
});

describe("Redis outage on the worker role", () => {
  it("Redis killed while a reply is in flight (AOF on, as in production): the worker rides it out and the reply goes out once", async () => {
    const redis = await PrivateRedis.start({ aof: true });
    const w = await startHarness({ env: { REDIS_URL: redis.url, REPLY_DEBOUNCE_MS: "0" } });
    try {
      w.claude.latencyMs = 1500;
      expect((await w.deliver(textWebhook({ text: "still there?" }).body)).statusCode).toBe(200);
      await eventually(() => w.claude.inFlight === 1, "the reply to be in Claude's hands");
      await redis.kill();
      await new Promise((r) => setTimeout(r, 2500)); // Claude answers and the send goes out while Redis is gone
      await redis.resume();
      await eventually(() => w.redis.status === "ready", "the test's own Redis connection to be back", 15_000);
      await eventually(async () => ((await w.queues.reply.getJobCounts("completed")).completed ?? 0) >= 1, "the reply job to complete", 20_000);
      expect(w.graph.sentTexts).toEqual(["Reply #1"]);
      expect(w.claude.requests).toHaveLength(1);
      const failed = await Promise.all([w.queues.inbound, w.queues.reply].map((q) => q.getJobCounts("failed")));
      expect(failed.map((c) => c.failed ?? 0)).toEqual([0, 0]);
    } finally {
      await redis.resume();
      await eventually(() => w.redis.status === "ready", "the app's Redis connection to be ready before closing", 15_000);
      await w.close();
      await redis.destroy();
    }
  }, 60_000);
});
