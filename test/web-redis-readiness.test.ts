import { afterEach, describe, expect, it } from "vitest";
import { inboundJobId } from "../src/queue/catalog.ts";
import { closeQueues, createQueues } from "../src/queue/queues.ts";
import { createFailFastRedis, untilReady } from "../src/queue/redis.ts";
import { signMetaBody } from "../src/webhook/signature.ts";
import { deliverOverHttp, type EntryPoint, runEntryPoint } from "./support/entry-point.ts";
import { anotherWeb, eventually, type Harness, startHarness, TEST_APP_SECRET, TEST_VERIFY_TOKEN } from "./support/harness.ts";
import { accepts, freePorts } from "./support/ports.ts";
import { PrivateRedis } from "./support/private-redis.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 2 at the edges of the web's Redis connection: the web takes no request before the
 * connection is ready (a verify GET answered then would be followed by a webhook refused), and a
 * webhook that lands while the connection is coming back waits for it, briefly, instead of
 * costing the customer a redelivery. Each test runs its own redis-server, to stop and start it.
 */

let redis: PrivateRedis | undefined;
let h: Harness | undefined;
let web: EntryPoint | undefined;
afterEach(async () => {
  if (web && web.child.exitCode === null && web.child.signalCode === null) web.child.kill("SIGKILL");
  web = undefined;
  try {
    if (h) {
      await redis?.resume();
      await eventually(() => h!.redis.status === "ready", "the harness's Redis connection to be ready before closing", 15_000);
      await h.close();
    }
  } finally {
    h = undefined;
    await redis?.destroy();
    redis = undefined;
  }
});

/**
 * The harness's queues are started (BullMQ's version check done) before Redis is killed: a
 * webhook would otherwise wait for that check too, which is not what these tests are about.
 */
async function queuesStarted(harness: Harness): Promise<void> {
  await Promise.all(Object.values(harness.queues).map((queue) => queue.waitUntilReady()));
}

const signed = (body: string) => ({ "content-type": "application/json", "x-hub-signature-256": signMetaBody(Buffer.from(body), TEST_APP_SECRET) });

describe("the web's start-up", () => {
  it("still enqueues when Redis did not answer its queues' first question in time (BullMQ keeps that answer for the queue's life)", async () => {
    redis = await PrivateRedis.start();
    const client = createFailFastRedis(redis.url);
    client.on("error", () => undefined);
    await untilReady(client);
    // Frozen, not gone: the connection stays ready and the queues' version check (INFO) times out.
    redis.freeze();
    const queues = createQueues(client, { prefix: "{frozen-at-start}", attempts: 3 });
    try {
      await new Promise((r) => setTimeout(r, 2500)); // past the fail-fast connection's 2 s command timeout
      redis.thaw();
      const job = await queues.inbound.add("inbound", { message: { id: "wamid.FROZEN" } } as never, { jobId: "frozen" });
      expect(await queues.inbound.getJob(job.id!)).toBeDefined();
    } finally {
      redis.thaw();
      await closeQueues(queues);
      await client.quit().catch(() => undefined);
    }
  }, 30_000);

  it("does not listen while its Redis connection is not ready, keeps waiting, and its first webhook is accepted", async () => {
    redis = await PrivateRedis.start();
    h = await startHarness({ workers: 0, env: { REDIS_URL: redis.url } });
    await queuesStarted(h);
    await redis.kill();
    const [port, metricsPort] = (await freePorts(2)) as [number, number];
    web = runEntryPoint(["web"], { ...h.env, PORT: String(port), METRICS_PORT: String(metricsPort), LOG_LEVEL: "info" });

    // Up (its metrics listener answers), and not listening: not even the verify GET, which
    // Meta would take as "ready" before delivering.
    await eventually(
      () =>
        fetch(`http://127.0.0.1:${metricsPort}/healthz`).then(
          (r) => r.ok,
          () => false,
        ),
      "the process to be up",
      60_000,
    );
    await expect(fetch(`http://127.0.0.1:${port}/webhook?hub.mode=subscribe&hub.verify_token=${TEST_VERIFY_TOKEN}&hub.challenge=1`)).rejects.toThrow();
    // It says it waits, and keeps waiting through several reconnection attempts.
    await web.event("web.waiting_for_redis");
    await eventually(() => web!.events("redis.error").length >= 3, "reconnection attempts", 20_000);
    expect(web.child.exitCode).toBeNull();
    expect(await accepts(port)).toBe(false);

    await redis.resume();
    await eventually(() => accepts(port), "the web to listen once Redis is back", 30_000);
    const { body, wamids } = textWebhook({ text: "the first message after the start" });
    expect((await deliverOverHttp(`http://127.0.0.1:${port}`, body)).status).toBe(200);
    expect((await web.event("web.redis_ready")).waitedMs).toBeGreaterThan(0);
    await eventually(() => h!.redis.status === "ready", "the harness's connection to be back", 15_000);
    expect(await h.queues.inbound.getJob(inboundJobId(wamids[0]!))).toBeDefined();

    web.child.kill("SIGTERM");
    expect(await web.exited).toBe(0);
  }, 90_000);
});

/** The harness's web, waiting `graceMs` at most for a Redis connection that is coming back. */
const webWithGrace = (h: Harness, graceMs: number) => anotherWeb(h, { redisGraceMs: graceMs });

describe("a webhook while the web's Redis connection is coming back", () => {
  it("waits for the reconnection and is answered 200, its job queued once Redis is back", async () => {
    redis = await PrivateRedis.start();
    h = await startHarness({ workers: 0, env: { REDIS_URL: redis.url } });
    // A grace far above any restart here: the test is about waiting, not about the 2 s default,
    // and a loaded machine may take a second or two to start redis-server again.
    const app = webWithGrace(h, 30_000);
    try {
      const before = textWebhook({ text: "before the restart" });
      expect((await app.inject({ method: "POST", url: "/webhook", payload: before.body, headers: signed(before.body) })).statusCode).toBe(200);

      await redis.kill();
      await eventually(() => h!.redis.status !== "ready", "the connection to notice Redis is gone");
      const during = textWebhook({ text: "while Redis restarts" });
      let answered = false;
      const delivery = app.inject({ method: "POST", url: "/webhook", payload: during.body, headers: signed(during.body) }).finally(() => {
        answered = true;
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(answered, "answered while Redis was still away").toBe(false);
      await redis.resume();

      expect((await delivery).statusCode).toBe(200);
      const job = await h.queues.inbound.getJob(inboundJobId(during.wamids[0]!));
      expect(job?.data.message.text?.body).toBe("while Redis restarts");
    } finally {
      await app.close();
    }
  }, 60_000);

  it("is answered 503 when the connection is not back within the grace, and Meta's redelivery is accepted later", async () => {
    redis = await PrivateRedis.start();
    h = await startHarness({ workers: 0, env: { REDIS_URL: redis.url } });
    const app = webWithGrace(h, 300);
    try {
      await queuesStarted(h);
      await redis.kill();
      await eventually(() => h!.redis.status !== "ready", "the connection to notice Redis is gone");
      const { body, wamids } = textWebhook({ text: "during a longer outage" });
      expect((await app.inject({ method: "POST", url: "/webhook", payload: body, headers: signed(body) })).statusCode).toBe(503);
      // Refused without a trace (law 3): the redelivery after the outage is queued.
      await redis.resume();
      await eventually(() => h!.redis.status === "ready", "the connection to be back", 15_000);
      expect((await app.inject({ method: "POST", url: "/webhook", payload: body, headers: signed(body) })).statusCode).toBe(200);
      expect(await h.queues.inbound.getJob(inboundJobId(wamids[0]!))).toBeDefined();
    } finally {
      await app.close();
    }
  }, 60_000);
});
