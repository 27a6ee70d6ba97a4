import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createFailFastRedis } from "../src/queue/redis.ts";
import { TEST_REDIS_URL, waitForReady } from "./support/harness.ts";

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
