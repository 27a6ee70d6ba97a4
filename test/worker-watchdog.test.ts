import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { startConfiguredWorkers, type Workers } from "../src/jobs/workers.ts";
import { createWorkerRedis } from "../src/queue/redis.ts";
import { eventually, type Harness, startHarness, TEST_REDIS_URL } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * The fetch watchdog (src/jobs/workers.ts): a worker that has stopped taking jobs while jobs
 * are ready is replaced. Here its fetch loop is stopped with BullMQ's own pause, which this
 * system never uses otherwise; after a Redis Cluster failover the loop stops by itself
 * (test/redis-topologies.test.ts).
 */

let h: Harness | undefined;
let workers: Workers | undefined;
afterEach(async () => {
  await workers?.close(2000);
  await h?.close();
  h = undefined;
  workers = undefined;
});

async function start() {
  h = await startHarness({ workers: 0, env: { JOB_LOCK_MS: "1000", REPLY_DEBOUNCE_MS: "0" } });
  const logged: { event?: string; queue?: string }[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  const connection = createWorkerRedis(TEST_REDIS_URL);
  connection.on("error", () => undefined);
  workers = startConfiguredWorkers(h.config, { db: h.db, logger, metrics: h.metrics, connection });
  const inbound = () => workers!.all.find((w) => w.name === "inbound")!;
  return { h, logged, inbound };
}

describe("a worker that stops taking jobs", () => {
  it("is replaced once a job has been ready for twice JOB_LOCK_MS with none started, and the message is answered", async () => {
    const { h, logged, inbound } = await start();
    const stopped = inbound();
    await stopped.pause(true);
    expect((await h.deliver(textWebhook({ text: "anyone?" }).body)).statusCode).toBe(200);

    await eventually(() => h.graph.sentTexts.length === 1, "the reply, sent by the worker that replaced the stopped one", 15_000);
    expect(inbound()).not.toBe(stopped);
    expect(logged.filter((l) => l.event === "worker.fetch_stalled").map((l) => l.queue)).toEqual(["inbound"]);
  });

  it("is not replaced while it has nothing to do", async () => {
    const { logged, inbound } = await start();
    const idle = inbound();
    await new Promise((r) => setTimeout(r, 3000)); // six of its checks
    expect(inbound()).toBe(idle);
    expect(logged.filter((l) => l.event === "worker.fetch_stalled")).toEqual([]);
  });
});
