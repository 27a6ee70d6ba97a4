import { afterEach, describe, expect, it } from "vitest";
import { eventually, type Harness, startHarness, TEST_DATABASE_URL } from "./support/harness.ts";
import { PrivatePgBouncer } from "./support/private-pgbouncer.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Postgres past one box (issue 11): the roles behind PgBouncer in transaction pooling, with
 * two server connections for a system that opens many more, so consecutive transactions of
 * one client land on different server connections. The schema is migrated directly, as the
 * README says to (the migration runner holds a session-level advisory lock).
 */

let h: Harness | undefined;
let bouncer: PrivatePgBouncer | undefined;
afterEach(async () => {
  await h?.close();
  await bouncer?.destroy();
  h = undefined;
  bouncer = undefined;
});

describe("behind PgBouncer in transaction pooling", () => {
  it("every message is answered once, a handoff's transaction included, through two server connections", async () => {
    bouncer = await PrivatePgBouncer.start(TEST_DATABASE_URL, { serverConnections: 2 });
    const through = bouncer;
    h = await startHarness({ workers: 1, env: { REPLY_DEBOUNCE_MS: "0", DATABASE_POOL_SIZE: "8" }, databaseUrlForRoles: (direct) => through.via(direct) });
    expect(new URL(h.config.databaseUrl).port).toBe(String(bouncer.port));
    const before = await bouncer.transactions();

    const customers = Array.from({ length: 20 }, (_, i) => `4477009${String(i).padStart(5, "0")}`);
    for (const from of customers) expect((await h.deliver(textWebhook({ from, text: "Are you open on Sunday?" }).body)).statusCode).toBe(200);
    // A handoff opens the staff item and pauses the bot in one interactive transaction.
    expect((await h.deliver(textWebhook({ from: "447700999999", text: "human" }).body)).statusCode).toBe(200);

    await eventually(() => new Set(h!.graph.sends.map((s) => String(s.body.to))).size === customers.length + 1, "a reply to every customer", 30_000);
    expect(h.graph.sends).toHaveLength(customers.length + 1);
    expect(h.claude.requests).toHaveLength(customers.length);
    expect(await h.db.deadLetter.count({ where: { source: "handoff" } })).toBe(1);
    // It really went through PgBouncer: it counted the system's transactions.
    expect((await bouncer.transactions()) - before).toBeGreaterThan(customers.length * 3);
  }, 60_000);
});
