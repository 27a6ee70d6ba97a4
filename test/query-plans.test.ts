import { readFileSync, statSync } from "node:fs";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { PrivatePostgres } from "./support/private-postgres.ts";
import { describeFailures, explainStatements, LARGE_TABLE_ROWS, type PlanReport } from "./support/query-plans.ts";
import { untilQuiet } from "./support/quiet.ts";
import { type SeededHistory, seedHistory } from "./support/seed-history.ts";
import { normalizeSql, type RecordedStatement, StatementRecorder } from "./support/statement-recorder.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 10, target 2: every query on the hot path uses an index. Real messages go through
 * the real system (webhook, workers, Postgres) on a database already holding 100 000 messages;
 * every statement Postgres receives is recorded at the driver with its parameters, then
 * planned with plain EXPLAIN (nothing is executed twice). A sequential scan of a large table
 * fails the test, naming the statement and showing its plan.
 *
 * The server is this file's own (test/support/private-postgres.ts), with log_statement = all,
 * so that the recorder (which the bench counts SQL per message with) is checked against what
 * Postgres itself says it received.
 */

const NEW_CUSTOMER = "16500000001";
/** Generous: others share the machine; no timing is asserted. */
const REPLY_WAIT_MS = 30_000;

let server: PrivatePostgres | undefined;
let h: Harness | undefined;
let seeded: SeededHistory;
let recorded: RecordedStatement[] = [];
let logged: string[] = [];
let report: PlanReport;

beforeAll(async () => {
  server = await PrivatePostgres.start();
  await onServer(server.url, ["ALTER SYSTEM SET log_statement = 'all'", "SELECT pg_reload_conf()"]);
  h = await startHarness({ databaseUrl: server.url, workers: 0, env: { REPLY_DEBOUNCE_MS: "0" } });
  seeded = await seedHistory(h.config.databaseUrl);

  const logFrom = statSync(server.logPath).size;
  const recorder = StatementRecorder.start();
  try {
    h.startWorkers(1); // its start-up sweep (the reconciler) is part of what a worker runs
    await answerTheHotPath(h, seeded);
    await h.stopWorkers();
  } finally {
    recorded = recorder.stop();
  }
  logged = statementsLogged(server.logPath, logFrom);
  report = await explainStatements(h.config.databaseUrl, recorded);
}, 120_000);

afterAll(async () => {
  await h?.close();
  await server?.destroy();
});

/**
 * What the hot path does all day: a new customer's first message, a message from a customer
 * with a long history, a second message in a conversation, the statuses of replies (one of
 * them failed: a dead letter), a duplicate delivery, and a duplicate that got past Redis
 * (its claim lost in a failover) to the database's UNIQUE wamid.
 */
async function answerTheHotPath(h: Harness, seeded: SeededHistory): Promise<void> {
  const sends = (to: string) => h.graph.sends.filter((s) => s.body.to === to).length;
  const deliver = async (body: string) => expect((await h.deliver(body)).statusCode).toBe(200);

  const first = textWebhook({ from: NEW_CUSTOMER, text: "Hello, are you open today?" });
  await deliver(first.body);
  await eventually(() => sends(NEW_CUSTOMER) === 1, "the new customer's reply", REPLY_WAIT_MS);

  const regular = seeded.longHistoryCustomers[0]!;
  await deliver(textWebhook({ from: regular, text: "Me again: can I pick up my order at six?" }).body);
  await eventually(() => sends(regular) === 1, "the reply to the customer with a long history", REPLY_WAIT_MS);

  await deliver(textWebhook({ from: NEW_CUSTOMER, text: "And on Sunday?" }).body);
  await eventually(() => sends(NEW_CUSTOMER) === 2, "the reply to the second message", REPLY_WAIT_MS);
  await untilQuiet(h, { timeoutMs: REPLY_WAIT_MS });

  // Our fake Graph API accepts the n-th text send as wamid.OUT<n>; Meta echoes our part id in
  // biz_opaque_callback_data.
  const sent = h.graph.sends.map((s, i) => ({ to: String(s.body.to), wamid: `wamid.OUT${i + 1}`, part: String(s.body.biz_opaque_callback_data) }));
  const toNew = sent.find((s) => s.to === NEW_CUSTOMER)!;
  const toRegular = sent.find((s) => s.to === regular)!;
  for (const status of ["sent", "delivered", "read"]) {
    await deliver(statusWebhook({ id: toNew.wamid, status, recipient_id: NEW_CUSTOMER, biz_opaque_callback_data: toNew.part }));
  }
  await deliver(
    statusWebhook({
      id: toRegular.wamid,
      status: "failed",
      recipient_id: regular,
      biz_opaque_callback_data: toRegular.part,
      errors: [{ code: 131047, title: "Re-engagement message", message: "Re-engagement message" }],
    }),
  );
  await untilQuiet(h, { timeoutMs: REPLY_WAIT_MS });

  await deliver(first.body); // Meta delivers again: the Redis claim stops it
  const job = (await h.queues.inbound.getCompleted()).find((j) => JSON.stringify(j.data).includes(first.wamids[0]!));
  if (!job) throw new Error("the first message's inbound job is not among the completed ones");
  await h.queues.inbound.add(job.name, job.data, { jobId: `${job.id}-past-redis` });
  await untilQuiet(h, { timeoutMs: REPLY_WAIT_MS });
  expect(sends(NEW_CUSTOMER)).toBe(2);
}

describe("every query on the hot path uses an index, on a database holding 100 000 messages", () => {
  it("the database is large and the run went through the hot path's tables", () => {
    expect(seeded.messages).toBeGreaterThanOrEqual(100_000);
    for (const table of ["contacts", "conversations", "inbound_messages", "replies", "outbound_messages", "dead_letters"]) {
      expect(report.largeTables[table], `${table} holds more than ${LARGE_TABLE_ROWS} rows`).toBeGreaterThan(LARGE_TABLE_ROWS);
    }
    const read = new Set(report.statements.flatMap((s) => s.tables));
    for (const table of ["contacts", "conversations", "inbound_messages", "replies", "outbound_messages", "dead_letters"]) {
      expect(read, `some statement of the run reads ${table}`).toContain(table);
    }
  });

  it("no statement scans a large table sequentially", () => {
    expect(report.failing.length, `${report.failing.length} of ${report.statements.length} distinct statements:\n\n${describeFailures(report)}`).toBe(0);
  });

  it("the check does see a sequential scan when a query has no index to use", async () => {
    const unindexed: RecordedStatement = {
      sql: `SELECT id FROM inbound_messages WHERE text = $1`,
      values: ["Seeded question 7: are you open today?"],
      job: "test",
    };
    const found = await explainStatements(h!.config.databaseUrl, [unindexed]);
    expect(found.failing.map((f) => f.seqScans.map((s) => s.table))).toEqual([["inbound_messages"]]);
    expect(describeFailures(found)).toMatch(/Seq Scan on inbound_messages/);
  });
});

describe("the statement count the bench reports", () => {
  it("is what Postgres itself logged receiving (log_statement = all), statement for statement", () => {
    expect(recorded.length).toBeGreaterThan(30);
    const ours = recorded.map((s) => normalizeSql(s.sql)).sort();
    expect(ours).toEqual([...logged].sort());
  });

  it("includes BEGIN, COMMIT and ROLLBACK, which Prisma's query events do not all show", async () => {
    const logFrom = statSync(server!.logPath).size;
    const recorder = StatementRecorder.start();
    try {
      await h!.db.$transaction(async (tx) => tx.$queryRaw`SELECT 1 AS committed`);
      await h!.db
        .$transaction(async (tx) => {
          await tx.$queryRaw`SELECT 2 AS rolled_back`;
          throw new Error("roll back");
        })
        .catch(() => undefined);
    } finally {
      recorder.stop();
    }
    const expected = ["BEGIN", "SELECT 1 AS committed", "COMMIT", "BEGIN", "SELECT 2 AS rolled_back", "ROLLBACK"];
    expect(recorder.statements.map((s) => normalizeSql(s.sql))).toEqual(expected);
    expect(statementsLogged(server!.logPath, logFrom)).toEqual(expected);
  });
});

async function onServer(url: string, statements: string[]): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const sql of statements) await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * The statements Postgres logged (log_statement = all) after byte `from` of its log: simple
 * queries ("statement: …") and executions of extended-protocol ones ("execute <name>: …").
 * Log lines start with the default prefix (`%m [%p] `); a statement's further lines are
 * indented by Postgres, so every entry starts where a timestamp does.
 */
function statementsLogged(path: string, from: number): string[] {
  const text = readFileSync(path).subarray(from).toString("utf8");
  const entries = text.split(/\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)/);
  const statements: string[] = [];
  for (const entry of entries) {
    const match = /^\S+ \S+ \S+ \[\d+\] LOG: {2}(?:statement|execute [^:]+): ([\s\S]*)$/.exec(entry.trimEnd());
    if (match) statements.push(normalizeSql(match[1]!));
  }
  return statements;
}
