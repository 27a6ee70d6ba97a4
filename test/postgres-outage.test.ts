import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pgDriver from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DemoShop, shopToolsFile } from "../sim/business/shop.ts";
import { isDatabaseUnavailable, parseDatabaseUrl } from "../src/db/client.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { expectLedgerToMatchBilled } from "./support/ledger.ts";
import { PrivatePostgres } from "./support/private-postgres.ts";
import { untilQuiet } from "./support/quiet.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 6 under the fault that threatens it: Postgres goes away (a failover, a restart), for
 * real: a server of this file's own, stopped with `pg_ctl -m immediate` and started again.
 * Its absence is not the messages' fault: no job spends its attempts on it, nothing ends in
 * BullMQ's failed set, and what Claude wrote meanwhile is not paid for twice (law 4).
 */

let pg: PrivatePostgres;
let h: Harness | undefined;
beforeAll(async () => {
  pg = await PrivatePostgres.start();
});
afterEach(async () => {
  await pg.resume().catch(() => undefined); // a test that failed mid-outage leaves it stopped
  await h?.close();
  h = undefined;
});
afterAll(async () => pg?.destroy());

/** Two attempts, each retry within 300 ms: an outage of seconds outlasts the whole budget. */
const SMALL_BUDGET = { JOB_ATTEMPTS: "2", RETRY_BASE_DELAY_MS: "50", RETRY_MAX_DELAY_MS: "300", REPLY_DEBOUNCE_MS: "0" };
/** Twice the budget: a job started this often has outlived it, so a worker that spent attempts on the outage would have failed it for good. */
const STARTS_PAST_THE_BUDGET = 2 * Number(SMALL_BUDGET.JOB_ATTEMPTS);

async function failedJobs(h: Harness): Promise<number> {
  const counts = await Promise.all([h.queues.inbound, h.queues.reply, h.queues.status].map((q) => q.getJobCounts("failed")));
  return counts.reduce((sum, c) => sum + (c.failed ?? 0), 0);
}

describe("Postgres away for longer than the retry budget", () => {
  it("every message written meanwhile is answered once when it returns; no job spends its attempts or ends in the failed set", async () => {
    h = await startHarness({ databaseUrl: pg.url, env: SMALL_BUDGET });
    await pg.crash();
    const customers = ["491510000001", "491510000002", "491510000003", "491510000004", "491510000005"];
    for (const from of customers) expect((await h.deliver(textWebhook({ text: `hi from ${from}`, from }).body)).statusCode).toBe(200);
    // Every job tried past its whole retry budget (or failed for good, as on a budget-spending worker).
    await eventually(async () => {
      const [failed, waiting] = await Promise.all([h!.queues.inbound.getJobs(["failed"]), h!.queues.inbound.getJobs(["delayed", "waiting", "active"])]);
      return failed.length + waiting.length === customers.length && waiting.every((j) => j.attemptsStarted >= STARTS_PAST_THE_BUDGET);
    }, "every message's job to be tried past its retry budget while Postgres is away");
    expect(await failedJobs(h)).toBe(0);

    await pg.resume();
    await eventually(() => h!.graph.sends.length === customers.length, "every customer to be answered", 30_000);
    await untilQuiet(h);
    expect(h.graph.sends.map((s) => s.body.to).sort()).toEqual(customers);
    expect(h.claude.requests).toHaveLength(customers.length);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect(await failedJobs(h)).toBe(0);
    const inbound = await h.queues.inbound.getJobs(["completed"]);
    // Each ran more than once (it waited for the database) and spent one attempt: the one that succeeded.
    expect(inbound.map((j) => j.attemptsMade)).toEqual(customers.map(() => 1));
    expect(inbound.every((j) => j.attemptsStarted > 1)).toBe(true);
  }, 60_000);

  it("Claude's answer that arrives while Postgres is away is kept in the job, then stored and sent without a second Claude call", async () => {
    h = await startHarness({ databaseUrl: pg.url, env: SMALL_BUDGET });
    h.claude.latencyMs = 1500;
    await h.deliver(textWebhook({ text: "what are your opening hours?" }).body);
    await eventually(() => h!.claude.inFlight === 1, "Claude to be writing the answer");
    await pg.crash();
    await eventually(() => h!.claude.inFlight === 0, "Claude to answer", 10_000);

    // Kept as Claude answered it: its ledger row could not be settled, so nothing after it ran.
    const kept = await eventually(async () => {
      const jobs = await h!.queues.reply.getJobs(["delayed", "waiting", "active"]);
      return jobs.find((j) => j.data.step)?.data.step;
    }, "the answer to be kept in the reply job's data (Redis)");
    expect(kept).toMatchObject({ step: 0, content: [{ type: "text", text: "Reply #1" }] });
    const keeping = async () => (await h!.queues.reply.getJobs(["delayed", "waiting", "active"])).find((j) => j.data.step);
    const { attemptsStarted, attemptsMade } = (await keeping())!;
    // The job keeps waiting for the database, spending no attempt: tried twice more, and more than its budget in all.
    await eventually(async () => {
      const job = await keeping();
      return job && job.attemptsStarted >= Math.max(attemptsStarted + 2, STARTS_PAST_THE_BUDGET) && job.attemptsMade === attemptsMade;
    }, "the reply job to wait on for the database, spending no attempt");

    await pg.resume();
    await eventually(() => h!.graph.sends.length === 1, "the kept answer to be sent", 30_000);
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect(h.claude.requests).toHaveLength(1);
    const reply = await h.db.reply.findFirstOrThrow();
    expect(reply).toMatchObject({ state: "sent", text: "Reply #1" });
    expect(reply.claudeCostUsd).toBeGreaterThan(0); // priced as Claude answered
    // Its row in the ledger, reserved before the call, is settled from the kept answer.
    await expectLedgerToMatchBilled(h.db, h.claude.usages);
    expect(await failedJobs(h)).toBe(0);
  }, 60_000);
});

describe("a settle lost with its connection", () => {
  it("Claude's answer whose ledger row could not be settled (the connection dropped under the statement) is kept in the job, and the next run settles it: the row is answered, Claude asked once", async () => {
    h = await startHarness({ env: SMALL_BUDGET });
    h.claude.latencyMs = 300;
    await h.deliver(textWebhook({ text: "what are your opening hours?" }).body);
    await eventually(() => h!.claude.inFlight === 1, "Claude to be writing the answer");
    // The call's row, reserved before it was made, is held by another session: the worker's
    // settle waits on it, and its connection is then terminated under it, as a failover or a
    // pooler's restart would drop it. Every other statement finds a connection of its own.
    const locker = new pgDriver.Client({ connectionString: parseDatabaseUrl(h.env.DATABASE_URL!).connectionString });
    await locker.connect();
    try {
      await locker.query("BEGIN");
      expect((await locker.query(`SELECT id FROM "${h.schema}".claude_calls WHERE state = 'reserved' FOR UPDATE`)).rowCount).toBe(1);
      const settling = await eventually(async () => {
        // Within a transaction Postgres keeps its first reading of the activity: read it afresh.
        await locker.query("SELECT pg_stat_clear_snapshot()");
        const { rows } = await locker.query<{ pid: number }>(
          "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE claude_calls SET state = ''answered''%'",
        );
        return rows[0]?.pid;
      }, "the settle to wait on the row");
      await locker.query("SELECT pg_terminate_backend($1)", [settling]);
      await locker.query("ROLLBACK");
    } finally {
      await locker.end();
    }

    await eventually(() => h!.graph.sends.length === 1, "the answer to be sent", 30_000);
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect(h.claude.requests).toHaveLength(1);
    await expectLedgerToMatchBilled(h.db, h.claude.usages);
    expect(await failedJobs(h)).toBe(0);
  }, 60_000);
});

describe("a tool loop's step while Postgres is away", () => {
  it("a tool step Claude answers while Postgres is away is kept in the job, then recorded: Claude is asked for it once, the business called once", async () => {
    const shop = await new DemoShop().start();
    const dir = await mkdtemp(join(tmpdir(), "wa-outage-tools-"));
    try {
      await writeFile(join(dir, "tools.json"), JSON.stringify(shopToolsFile(shop.url)));
      await writeFile(join(dir, "numbers.json"), JSON.stringify({ [PHONE_NUMBER_ID]: { toolsFile: "tools.json" } }));
      h = await startHarness({ databaseUrl: pg.url, env: { ...SMALL_BUDGET, PHONE_NUMBERS_FILE: join(dir, "numbers.json") } });
      h.claude.latencyMs = 1500;
      h.claude.answer(
        { content: [{ type: "tool_use", id: "toolu_01kept", name: "lookup_order", input: { orderId: "A1001" } }] },
        { text: "A1001 has shipped." },
      );
      await h.deliver(textWebhook({ text: "where is A1001?" }).body);
      await eventually(() => h!.claude.inFlight === 1, "Claude to be writing the step");
      await pg.crash();
      await eventually(() => h!.claude.inFlight === 0, "Claude to answer", 10_000);
      const kept = await eventually(async () => {
        const jobs = await h!.queues.reply.getJobs(["delayed", "waiting", "active"]);
        return jobs.find((j) => j.data.step)?.data.step;
      }, "the step to be kept in the reply job's data (Redis)");
      expect(kept).toMatchObject({ step: 0, stopReason: "tool_use", content: [{ type: "tool_use", id: "toolu_01kept" }] });
      h.claude.latencyMs = 0;

      await pg.resume();
      await eventually(() => h!.graph.sends.length === 1, "the answer to be sent", 30_000);
      expect(h.graph.sentTexts).toEqual(["A1001 has shipped."]);
      expect(h.claude.requests).toHaveLength(2); // the kept step, then the answer: the step was not asked again
      expect(shop.requests).toHaveLength(1);
      expect(await h.db.claudeStep.count()).toBe(1);
      await expectLedgerToMatchBilled(h.db, h.claude.usages);
      expect(await failedJobs(h)).toBe(0);
    } finally {
      await shop.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("a refusal while Postgres is away", () => {
  it("Claude's refusal is kept in the job, then the customer is handed off when Postgres returns: Claude is asked once", async () => {
    h = await startHarness({ databaseUrl: pg.url, env: { ...SMALL_BUDGET, HANDOFF_REPLY: "A person will answer you here." } });
    h.claude.latencyMs = 1500;
    h.claude.answer({ content: [], stopReason: "refusal" });
    await h.deliver(textWebhook({ text: "something Claude will not answer" }).body);
    await eventually(() => h!.claude.inFlight === 1, "Claude to be answering");
    await pg.crash();
    await eventually(() => h!.claude.inFlight === 0, "Claude to refuse", 10_000);
    const kept = await eventually(async () => {
      const jobs = await h!.queues.reply.getJobs(["delayed", "waiting", "active"]);
      return jobs.find((j) => j.data.step)?.data.step;
    }, "the refusal to be kept in the reply job's data (Redis)");
    expect(kept).toMatchObject({ step: 0, stopReason: "refusal" });
    h.claude.latencyMs = 0;

    await pg.resume();
    await eventually(() => h!.graph.sends.length === 1, "the handoff reply to be sent", 30_000);
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual(["A person will answer you here."]);
    expect(h.claude.requests).toHaveLength(1);
    expect((await h.db.deadLetter.findFirstOrThrow()).reason).toContain("Claude declined");
    expect(await failedJobs(h)).toBe(0);
  }, 60_000);
});

describe("telling an outage from a bad request", () => {
  it("recognises what Prisma and the pg driver throw when Postgres is gone, and nothing else", async () => {
    h = await startHarness({ databaseUrl: pg.url, workers: 0 });
    await h.db.contact.count(); // a pooled connection that will break
    await pg.crash();
    const errors: unknown[] = [];
    for (const query of [
      () => h!.db.contact.count(),
      () => h!.db.contact.count(),
      () => h!.db.$queryRaw`SELECT 1`,
      () => h!.db.$transaction(async (tx) => tx.contact.count()),
    ]) {
      errors.push(
        await query().then(
          () => undefined,
          (error: unknown) => error,
        ),
      );
    }
    expect(errors.every((e) => e !== undefined && isDatabaseUnavailable(e))).toBe(true);
    await pg.resume();
    const badRequest = await h.db.$queryRaw`SELECT * FROM no_such_table`.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(badRequest).toBeDefined();
    expect(isDatabaseUnavailable(badRequest)).toBe(false);
    expect(isDatabaseUnavailable(new Error("reply has no messages to answer"))).toBe(false);
  }, 60_000);
});
