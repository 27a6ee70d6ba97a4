import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, startHarness } from "./support/harness.ts";

/** Issue 7 (10.1): sign-in limits that always expire. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ workers: 0 });
});
afterAll(async () => h?.close());

const WINDOW_MS = 15 * 60 * 1000;

function signIn(email: string, options: { from: string; password?: string }) {
  return h.app.inject({
    method: "POST",
    url: "/admin/session",
    remoteAddress: options.from,
    payload: { email, password: options.password ?? "not the password" },
  });
}

async function signInCounters(): Promise<string[]> {
  return (await h.redis.keys(`${h.prefix}:signin:*`)).sort();
}

describe("sign-in counters", () => {
  it("always expire, even one a crash left without its expiry", async () => {
    expect((await signIn("ttl@example.com", { from: "192.0.2.1" })).statusCode).toBe(401);
    const counters = await signInCounters();
    expect(counters.length).toBeGreaterThanOrEqual(2); // per email, and per address
    for (const key of counters) expect(await h.redis.pttl(key)).toBeGreaterThan(0);

    // What a crash, or a Redis error, between INCR and PEXPIRE used to leave: a counter that
    // never expires, and so a lockout that never ends.
    for (const key of counters) await h.redis.persist(key);
    expect((await signIn("ttl@example.com", { from: "192.0.2.1" })).statusCode).toBe(401);
    for (const key of counters) {
      const ttl = await h.redis.pttl(key);
      expect(ttl, key).toBeGreaterThan(0);
      expect(ttl, key).toBeLessThanOrEqual(WINDOW_MS);
    }
  });
});
