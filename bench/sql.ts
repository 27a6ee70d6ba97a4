import { type Harness, startHarness } from "../test/support/harness.ts";
import { describeFailures, explainStatements, type PlanReport } from "../test/support/query-plans.ts";
import { untilQuiet } from "../test/support/quiet.ts";
import { type SeededHistory, seedHistory } from "../test/support/seed-history.ts";
import {
  countByJob,
  isTransactionControl,
  normalizeSql,
  OUTSIDE_JOBS,
  type RecordedStatement,
  StatementRecorder,
  shortenSql,
} from "../test/support/statement-recorder.ts";
import { statusWebhook, textWebhook } from "../test/support/webhook-bodies.ts";
import { fmt, table } from "./stats.ts";

/**
 * Targets 1 and 2 (issue 10): SQL statements per answered message, counted at the pg driver
 * (test/support/statement-recorder.ts: every statement Postgres receives, BEGIN, COMMIT and
 * ROLLBACK included, whatever issues it), split by the job that issued them; then every one
 * of those statements EXPLAINed on the database they ran on, which holds 100 000 seeded
 * messages (test/support/seed-history.ts), for sequential scans of large tables.
 *
 * Web, workers and fakes run in this process (statement counts do not depend on where they
 * run); the throughput figures are benchmark 2's, with the worker in a process of its own.
 */

export interface SqlSettings {
  /** Customers in each phase (each sends one message per phase). */
  customers: number;
  /** Messages already stored before the run (the seeded history). */
  storedMessages: number;
  timeoutMs: number;
}

interface Phase {
  name: string;
  /** What one unit is: an answered message, or a status webhook. */
  unit: "message" | "status";
  units: number;
  statements: RecordedStatement[];
}

export interface SqlResult {
  settings: SqlSettings;
  seeded: SeededHistory;
  phases: Phase[];
  plans: PlanReport;
  schema: string;
  poolSize: number;
}

/** The jobs that answer a text message: target 1 counts these two, together. */
const ANSWERING_JOBS = ["inbound", "reply"];

export async function runSqlBench(settings: SqlSettings): Promise<SqlResult> {
  const h = await startHarness({ workers: 0, env: { REPLY_DEBOUNCE_MS: "0" } });
  let recorder: StatementRecorder | undefined;
  try {
    const seeded = await seedHistory(h.config.databaseUrl, { messages: settings.storedMessages });
    recorder = StatementRecorder.start();
    h.startWorkers(1);
    const run = new Customers(h, settings.timeoutMs);

    // Warm-up (and the worker's start-up sweep): not counted.
    await run.write(
      range(5, (i) => `1446${pad(i)}`),
      "warm-up",
    );
    recorder.take();

    const fresh = range(settings.customers, (i) => `1556${pad(i)}`);
    const phases: Phase[] = [];
    await run.write(fresh, "first message");
    phases.push({ name: "new customer, first message", unit: "message", units: fresh.length, statements: recorder.take() });
    await run.write(fresh, "second message");
    phases.push({ name: "second message, same conversation", unit: "message", units: fresh.length, statements: recorder.take() });
    const regulars = seeded.longHistoryCustomers.slice(0, settings.customers);
    await run.write(regulars, "message with a long history");
    phases.push({ name: `customer with ~${fmt(seeded.longHistory)} stored messages`, unit: "message", units: regulars.length, statements: recorder.take() });
    const statuses = await run.statuses(fresh, ["sent", "delivered", "read"]);
    phases.push({ name: "status webhook (sent, delivered, read)", unit: "status", units: statuses, statements: recorder.take() });

    const all = phases.flatMap((p) => p.statements);
    recorder.stop();
    recorder = undefined;
    await h.stopWorkers();
    const plans = await explainStatements(h.config.databaseUrl, all);
    return { settings, seeded, phases, plans, schema: h.schema, poolSize: h.config.databasePoolSize };
  } finally {
    recorder?.stop();
    await h.close();
  }
}

const pad = (i: number) => String(i).padStart(7, "0");
const range = <T>(n: number, f: (i: number) => T) => Array.from({ length: n }, (_, i) => f(i));

/** Customers writing through the real webhook, and Meta's statuses for what we sent them. */
class Customers {
  constructor(
    private readonly h: Harness,
    private readonly timeoutMs: number,
  ) {}

  private sendsTo(to: string): number {
    return this.h.graph.sends.filter((s) => s.body.to === to).length;
  }

  /** Each customer sends one text; resolves once each has one more reply and every job has finished. */
  async write(customers: string[], what: string): Promise<void> {
    const before = new Map(customers.map((c) => [c, this.sendsTo(c)]));
    for (const [i, from] of customers.entries()) {
      const response = await this.h.deliver(textWebhook({ from, text: `Hello, this is ${what} ${i}. Are you open today?` }).body);
      if (response.statusCode !== 200) throw new Error(`webhook answered ${response.statusCode} for ${what}`);
    }
    const deadline = Date.now() + this.timeoutMs;
    while (customers.some((c) => this.sendsTo(c) <= before.get(c)!)) {
      if (Date.now() > deadline) throw new Error(`not every ${what} was answered within ${this.timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await untilQuiet(this.h, { timeoutMs: this.timeoutMs });
  }

  /**
   * Meta's statuses for the first reply each customer got. Our fake Graph API accepts the
   * n-th text send as wamid.OUT<n>; Meta echoes our part id in biz_opaque_callback_data.
   * Returns how many status webhooks were delivered.
   */
  async statuses(customers: string[], statuses: string[]): Promise<number> {
    const wanted = new Set(customers);
    const first = new Map<string, { wamid: string; part: string }>();
    this.h.graph.sends.forEach((s, i) => {
      const to = String(s.body.to);
      if (wanted.has(to) && !first.has(to)) first.set(to, { wamid: `wamid.OUT${i + 1}`, part: String(s.body.biz_opaque_callback_data) });
    });
    let delivered = 0;
    for (const [to, sent] of first) {
      for (const status of statuses) {
        const response = await this.h.deliver(statusWebhook({ id: sent.wamid, status, recipient_id: to, biz_opaque_callback_data: sent.part }));
        if (response.statusCode !== 200) throw new Error(`webhook answered ${response.statusCode} for a status`);
        delivered++;
      }
    }
    await untilQuiet(this.h, { timeoutMs: this.timeoutMs });
    return delivered;
  }
}

/** Statement kinds, in the order a reader expects them: the answering jobs, then the rest. */
function jobOrder(jobs: Iterable<string>): string[] {
  const rank = (j: string) => (j === "inbound" ? 0 : j === "reply" ? 1 : j === "status" ? 2 : j === OUTSIDE_JOBS ? 4 : 3);
  return [...new Set(jobs)].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

/** Prisma's long column lists and table qualifiers folded, so a statement fits a line. */
export function readableSql(sql: string, width = 120): string {
  const folded = sql
    .replace(/"(\w+)"\."(\w+)"/g, '"$2"')
    .replace(/^SELECT (?!COUNT)(.{60,}?) FROM /, "SELECT … FROM ")
    .replace(/ \(("\w+",)+"\w+"\) VALUES \(.*?\)( RETURNING .*)?$/, (_m, _column, returning?: string) => ` (…) VALUES (…)${returning ?? ""}`)
    .replace(/ RETURNING (.{40,})$/, " RETURNING …")
    .replace(/"(\w+)"(?=\w)/g, "$1 ")
    .replace(/"(\w+)"/g, "$1");
  return shortenSql(folded, width);
}

/** A per-unit figure: whole numbers as such, the rest to two decimals. */
const perUnit = (n: number) => (Math.abs(n - Math.round(n)) < 1e-9 ? fmt(n) : fmt(n, 2));

export function formatSql(result: SqlResult): string {
  const out: string[] = [];
  const { seeded, phases, plans } = result;
  out.push(
    `Database: ${fmt(seeded.messages)} stored messages in ${fmt(seeded.conversations)} conversations, ${fmt(seeded.replies)} replies, ` +
      `${fmt(seeded.parts)} parts, ${fmt(seeded.deadLetters)} dead letters (seeded in ${fmt(seeded.ms / 1000, 1)} s); ` +
      `REPLY_DEBOUNCE_MS 0, DATABASE_POOL_SIZE ${result.poolSize}; ${result.settings.customers} customers per phase.`,
    "Counted at the pg driver: every statement Postgres receives, BEGIN/COMMIT/ROLLBACK included (checked against Postgres's own",
    "statement log by test/query-plans.test.ts), by the job that issued it.",
    "",
  );

  const perUnitOf = (p: Phase, jobs: string[]) => p.statements.filter((s) => jobs.includes(s.job)).length / p.units;
  const jobs = jobOrder(phases.flatMap((p) => p.statements.map((s) => s.job)));
  const header = ["phase", "units", ...jobs.map((j) => `${j}/unit`), "inbound+reply/msg", "of which BEGIN/COMMIT/…", "target ≤ 8"];
  out.push(
    table(
      header,
      phases.map((p) => {
        const counts = countByJob(p.statements);
        const answering = perUnitOf(p, ANSWERING_JOBS);
        const tx = p.statements.filter((s) => ANSWERING_JOBS.includes(s.job) && isTransactionControl(s.sql)).length / p.units;
        return [
          p.name,
          `${fmt(p.units)} ${p.unit === "message" ? "msgs" : "statuses"}`,
          ...jobs.map((j) => perUnit((counts.get(j) ?? 0) / p.units)),
          p.unit === "message" ? perUnit(answering) : "-",
          p.unit === "message" ? perUnit(tx) : "-",
          p.unit === "message" ? (answering <= 8 ? "met" : "not met") : "-",
        ];
      }),
    ),
    "  units: answered messages (each customer's message got its reply) or status webhooks; figures are statements per unit.",
    "",
  );

  // Which statement costs what: per unit, in each phase, in the order first issued.
  const keyOf = (s: RecordedStatement) => `${s.job}\u0000${normalizeSql(s.sql, result.schema)}`;
  const rows = new Map<string, { job: string; sql: string; perPhase: number[] }>();
  phases.forEach((p, i) => {
    for (const s of p.statements) {
      const key = keyOf(s);
      const row = rows.get(key) ?? { job: s.job, sql: normalizeSql(s.sql, result.schema), perPhase: phases.map(() => 0) };
      row.perPhase[i]! += 1 / p.units;
      rows.set(key, row);
    }
  });
  const ordered = jobOrder([...rows.values()].map((r) => r.job)).flatMap((job) => [...rows.values()].filter((r) => r.job === job));
  out.push(`Distinct statements, per unit of each phase (${phases.map((p, i) => `${i + 1}: ${p.name}`).join("; ")}):`);
  const costs = new Map(plans.statements.map((p) => [p.sql, p.cost]));
  const counts = table(
    ["job", ...phases.map((_, i) => `${i + 1}`), "plan cost"],
    ordered.map((r) => [r.job, ...r.perPhase.map((n) => (n ? perUnit(n) : "")), costs.has(r.sql) ? fmt(costs.get(r.sql)!, 1) : ""]),
  ).split("\n");
  out.push(
    ...counts.map((line, i) => `${line.padEnd(counts[0]!.length)}  ${i === 0 ? "statement" : i === 1 ? "-".repeat(9) : readableSql(ordered[i - 2]!.sql)}`),
  );
  out.push("  plan cost: Postgres's estimate for the statement (EXPLAIN's total cost, the highest over its explained executions).");
  out.push(
    "",
    `Plans (plain EXPLAIN with each statement's own parameters, on the ${fmt(seeded.messages)}-message database): ` +
      `${plans.statements.length} distinct statements planned, ${plans.failing.length} read a large table (> 2,000 rows) by Seq Scan` +
      ` -> target "every query on the hot path uses an index": ${plans.failing.length === 0 ? "met" : "not met"}`,
  );
  if (plans.failing.length) out.push(describeFailures(plans).replace(/^/gm, "  "));
  return out.join("\n");
}

/** Statements per answered message, inbound + reply jobs: the phase a target line quotes. */
export function answeringPerMessage(result: SqlResult): { phase: string; perMessage: number }[] {
  return result.phases
    .filter((p) => p.unit === "message")
    .map((p) => ({ phase: p.name, perMessage: p.statements.filter((s) => ANSWERING_JOBS.includes(s.job)).length / p.units }));
}
