import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildApp } from "../src/app.ts";
import { createMetrics } from "../src/metrics/metrics.ts";
import { loadSettings } from "../src/settings.ts";
import { addStaff } from "../src/staff/accounts.ts";
import { type Harness, startHarness } from "./support/harness.ts";

/** Issue 7 (10.1): sign-in limits that always expire, count the real client, and lock out only the attacker. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ workers: 0 });
  await addStaff(h.db, "alice@example.com", PASSWORD);
  await addStaff(h.db, "bob@example.com", PASSWORD);
});
afterAll(async () => h?.close());

const PASSWORD = "correct horse battery staple";
const WINDOW_MS = 15 * 60 * 1000;

function signIn(email: string, options: { from: string; password?: string; forwardedFor?: string; app?: Harness["app"] }) {
  return (options.app ?? h.app).inject({
    method: "POST",
    url: "/admin/session",
    remoteAddress: options.from,
    headers: options.forwardedFor ? { "x-forwarded-for": options.forwardedFor } : {},
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
    // The address's own limit: 20 failed attempts in all, whatever the emails; the refusals above
    // checked no password, so they are not among them.
    for (let i = 0; i < 10; i++) expect((await signIn(`guess${i}@example.com`, { from: attacker })).statusCode).toBe(401);
    expect((await signIn("carol@example.com", { from: attacker })).statusCode).toBe(429);
    expect((await signIn("alice@example.com", { from: attacker, password: PASSWORD })).statusCode).toBe(429);

    const alice = await signIn("alice@example.com", { from: "198.51.100.20", password: PASSWORD });
    expect(alice.statusCode).toBe(200);
    expect(alice.json()).toMatchObject({ email: "alice@example.com" });
    expect((await signIn("bob@example.com", { from: "198.51.100.21", password: PASSWORD })).statusCode).toBe(200);
  });
});

describe("only failed attempts count", () => {
  it("staff who sign in successfully many times from one address are never limited", async () => {
    const office = "198.51.100.40";
    // Past both limits: five per email from the address, twenty per address.
    for (let i = 0; i < 22; i++) {
      const response = await signIn("alice@example.com", { from: office, password: PASSWORD });
      expect(response.statusCode, `sign-in ${i + 1}`).toBe(200);
    }
  });

  it("a success neither counts nor forgives: four failures, a success, one more failure, and the limit is reached", async () => {
    const from = "198.51.100.41";
    for (let i = 0; i < 4; i++) expect((await signIn("bob@example.com", { from })).statusCode).toBe(401);
    expect((await signIn("bob@example.com", { from, password: PASSWORD })).statusCode).toBe(200);
    expect((await signIn("bob@example.com", { from })).statusCode).toBe(401);
    expect((await signIn("bob@example.com", { from, password: PASSWORD })).statusCode).toBe(429);
  });

  it("guesses sent all at once get no more tries than guesses sent one by one", async () => {
    const from = "198.51.100.42";
    const codes = await Promise.all(Array.from({ length: 12 }, () => signIn("alice@example.com", { from }).then((r) => r.statusCode)));
    expect(codes.filter((code) => code === 401)).toHaveLength(5);
    expect(codes.filter((code) => code === 429)).toHaveLength(7);
    // The refusals handed their attempts back, but the five failures stand.
    expect((await signIn("alice@example.com", { from, password: PASSWORD })).statusCode).toBe(429);
  });
});

describe("TRUST_PROXY", () => {
  async function appWith(trustProxy: string | undefined) {
    const env = { ...h.env };
    if (trustProxy !== undefined) env.TRUST_PROXY = trustProxy;
    const config = loadSettings(env);
    const app = buildApp({ config, logger: pino({ level: "silent" }), redis: h.redis, queues: h.queues, db: h.db, metrics: createMetrics() });
    await app.ready();
    return app;
  }

  /** Five failures for one email from `first`, then one more from `second`: refused only if both are one client. */
  async function sameClient(app: Harness["app"], proxy: string, first: string, second: string): Promise<boolean> {
    for (let i = 0; i < 5; i++) {
      expect((await signIn("dave@example.com", { app, from: proxy, forwardedFor: first })).statusCode).toBe(401);
    }
    return (await signIn("dave@example.com", { app, from: proxy, forwardedFor: second })).statusCode === 429;
  }

  it.each([
    ["true", "10.1.0.1"],
    ["1", "10.1.0.2"],
    ["10.0.0.0/8", "10.1.0.3"],
    ["127.0.0.1, 10.1.0.4", "10.1.0.4"],
  ])("TRUST_PROXY=%s: behind the proxy at %s, X-Forwarded-For names the client", async (trustProxy, proxy) => {
    const app = await appWith(trustProxy);
    try {
      const clients = [`198.18.${proxy.split(".").at(-1)}.1`, `198.18.${proxy.split(".").at(-1)}.2`];
      expect(await sameClient(app, proxy, clients[0]!, clients[1]!)).toBe(false);
    } finally {
      await app.close();
    }
  });

  it.each([
    [undefined, "10.2.0.1"],
    ["false", "10.2.0.2"],
    ["192.168.0.0/16", "10.2.0.3"], // a proxy not listed is a client like any other
  ])("TRUST_PROXY=%s: X-Forwarded-For from %s is ignored, so it cannot dodge the limit", async (trustProxy, peer) => {
    const app = await appWith(trustProxy);
    try {
      const spoofed = [`198.19.${peer.split(".").at(-1)}.1`, `198.19.${peer.split(".").at(-1)}.2`];
      expect(await sameClient(app, peer, spoofed[0]!, spoofed[1]!)).toBe(true);
    } finally {
      await app.close();
    }
  });
});
