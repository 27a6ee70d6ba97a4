import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { type Harness, startHarness } from "./support/harness.ts";

/** Issue 7 (10.1): sign-in limits that always expire, and lock out only the attacker. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ workers: 0 });
  await addStaff(h.db, "alice@example.com", PASSWORD);
  await addStaff(h.db, "bob@example.com", PASSWORD);
});
afterAll(async () => h?.close());

const PASSWORD = "correct horse battery staple";
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
    expect(counters.length).toBeGreaterThanOrEqual(2); // per email from the address, and per address
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

describe("one attacker cannot lock staff out", () => {
  it("hammering alice's and bob's emails from one address locks out that address, while alice and bob sign in from theirs", async () => {
    const attacker = "203.0.113.66";
    const codes = async (email: string, times: number) => {
      const seen: number[] = [];
      for (let i = 0; i < times; i++) seen.push((await signIn(email, { from: attacker })).statusCode);
      return seen;
    };
    expect(await codes("alice@example.com", 6)).toEqual([401, 401, 401, 401, 401, 429]);
    expect(await codes("bob@example.com", 6)).toEqual([401, 401, 401, 401, 401, 429]);
    // The address's own limit: 20 attempts in all, whatever the emails.
    for (let i = 0; i < 8; i++) expect((await signIn(`guess${i}@example.com`, { from: attacker })).statusCode).toBe(401);
    expect((await signIn("carol@example.com", { from: attacker })).statusCode).toBe(429);
    expect((await signIn("alice@example.com", { from: attacker, password: PASSWORD })).statusCode).toBe(429);

    const alice = await signIn("alice@example.com", { from: "198.51.100.20", password: PASSWORD });
    expect(alice.statusCode).toBe(200);
    expect(alice.json()).toMatchObject({ email: "alice@example.com" });
    expect((await signIn("bob@example.com", { from: "198.51.100.21", password: PASSWORD })).statusCode).toBe(200);
  });
});
