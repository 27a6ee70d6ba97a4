import { randomBytes } from "node:crypto";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../bench/stats.ts";
import { createFailFastRedis, createWorkerRedis, isRedisUnavailable } from "../src/queue/redis.ts";
import { eventually, TEST_REDIS_URL, waitForReady } from "./support/harness.ts";
import { PrivateRedis } from "./support/private-redis.ts";

/** The web role's connection coalesces the commands of one event-loop turn into a few socket writes. */

let redis: Redis;
const prefix = `{t-writes-${randomBytes(4).toString("hex")}}`;
let writes = 0;

beforeAll(async () => {
  redis = createFailFastRedis(TEST_REDIS_URL);
  await waitForReady(redis);
  // Count what reaches the socket's own write functions: one call is one write to the kernel.
  const socket = redis.stream as unknown as { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void };
  for (const method of ["_write", "_writev"] as const) {
    const original = socket[method].bind(socket);
    socket[method] = (...args: unknown[]) => {
      writes++;
      original(...args);
    };
  }
});
afterAll(async () => {
  const keys = await redis.keys(`${prefix}*`);
  if (keys.length) await redis.del(...keys);
  await redis.quit();
});

describe("the web role's Redis connection", () => {
  it("sends the commands issued in one turn in writes of eight, each answered on its own, in order", async () => {
    writes = 0;
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => redis.incr(`${prefix}:n`).then((n) => [i, n])));
    expect(answers).toEqual(Array.from({ length: 20 }, (_, i) => [i, i + 1]));
    expect(writes).toBe(3); // 8 + 8 at once, the last 4 at the end of the turn
  });

  it("sends a turn's few commands together at the end of the turn", async () => {
    writes = 0;
    expect(await Promise.all([redis.set(`${prefix}:b`, "1"), redis.get(`${prefix}:b`), redis.exists(`${prefix}:b`)])).toEqual(["OK", "1", 1]);
    expect(writes).toBe(1);
  });

  it("sends a command issued alone, and the next turn's commands in a write of their own", async () => {
    writes = 0;
    expect(await redis.set(`${prefix}:a`, "1")).toBe("OK");
    expect(await redis.get(`${prefix}:a`)).toBe("1");
    expect(writes).toBe(2);
  });

  it("fails a command with the error it would have had, without holding back the others of its turn", async () => {
    await redis.set(`${prefix}:string`, "x");
    const [wrongType, fine] = await Promise.allSettled([redis.lpush(`${prefix}:string`, "y"), redis.get(`${prefix}:string`)]);
    expect(wrongType.status).toBe("rejected");
    expect(fine).toEqual({ status: "fulfilled", value: "x" });
  });
});

describe("a master demoted to a replica under our connections (a failover's old master back, a managed Redis's switch)", () => {
  it("the web's write fails as unavailable and it reconnects; the worker's write waits and lands once the server is master again", async () => {
    const server = await PrivateRedis.start();
    const admin = new Redis(server.url);
    const web = createFailFastRedis(server.url);
    const worker = createWorkerRedis(server.url);
    try {
      await Promise.all([waitForReady(web), waitForReady(worker)]);
      const webConnection = await web.client("ID");
      // A replica of a master that is not there: it refuses every write, as a demoted master does.
      await admin.replicaof("127.0.0.1", "1");

      const refused = await web.set("k:web", "1").catch((error: unknown) => error);
      expect(isRedisUnavailable(refused)).toBe(true); // a 503, and Meta delivers again
      await eventually(
        async () => web.status === "ready" && (await web.client("ID").catch(() => webConnection)) !== webConnection,
        "the web connection to reconnect",
      );

      // Staying on the demoted server would refuse it for good; a reconnect finds the master.
      const landed = worker.set("k:worker", "1");
      await sleep(300);
      await admin.replicaof("NO", "ONE");
      expect(await landed).toBe("OK");
      expect(await admin.get("k:worker")).toBe("1");
    } finally {
      web.disconnect();
      worker.disconnect();
      admin.disconnect();
      await server.destroy();
    }
  });
});
