import { AsyncLocalStorage, AsyncResource } from "node:async_hooks";
import { Worker } from "bullmq";
import pg from "pg";

/**
 * Every SQL statement this process sends to Postgres, seen at the pg driver: whatever issues
 * it (Prisma's client, its driver adapter, raw SQL, a pg.Pool of the code's own), so the count
 * keeps meaning the same when every query of the reply path is rewritten.
 *
 * Why the driver and not Prisma's `$on("query")` events: with @prisma/adapter-pg those events
 * miss every BEGIN (the adapter sends it itself, in startTransaction), while COMMIT and
 * ROLLBACK do show; a per-message count must include all three. test/query-plans.test.ts
 * checks this count against Postgres's own statement log (log_statement = all).
 *
 * Each statement is attributed to the BullMQ queue whose job issued it ("inbound", "reply",
 * "status", ...), or to OUTSIDE_JOBS (the webhook, start-up, the test itself), by an
 * AsyncLocalStorage entered around each job's processor.
 *
 * Nothing in src/ knows about this: it patches pg.Client.prototype.query (every query of every
 * pg client, pooled or not), pg.Pool.prototype.connect (so that a query that waited for a
 * pooled connection is attributed to the job that asked, not to the one that released the
 * connection) and bullmq's Worker.prototype.callProcessJob, and puts them back on stop().
 * Only benchmarks and tests install it; production code pays nothing.
 */

export interface RecordedStatement {
  /** The SQL text exactly as sent to the driver. */
  sql: string;
  /** Its bind parameters as handed to pg (undefined for a simple-protocol statement). */
  values: unknown[] | undefined;
  /** The queue of the job that issued it, or OUTSIDE_JOBS. */
  job: string;
}

export const OUTSIDE_JOBS = "outside jobs";

const currentJob = new AsyncLocalStorage<string>();

/** A method of any shape: the wrappers pass `this` and the arguments through untouched. */
// biome-ignore lint/suspicious/noExplicitAny: a wrapper stands in for methods whose `this` has any type
type AnyFunction = (this: any, ...args: unknown[]) => unknown;

let active: StatementRecorder | undefined;

export class StatementRecorder {
  readonly statements: RecordedStatement[] = [];
  private readonly restore: (() => void)[] = [];
  private recording = true;

  private constructor() {}

  /** Patches the driver and starts recording; one recorder at a time per process. */
  static start(): StatementRecorder {
    if (active) throw new Error("a StatementRecorder is already recording in this process");
    const recorder = new StatementRecorder();
    recorder.install();
    active = recorder;
    return recorder;
  }

  /** Stops recording and puts the driver back as it was; returns what was recorded. */
  stop(): RecordedStatement[] {
    this.recording = false;
    for (const undo of this.restore.splice(0).reverse()) undo();
    if (active === this) active = undefined;
    return this.statements;
  }

  /** What was recorded since the last take (or the start), forgotten here; recording goes on. */
  take(): RecordedStatement[] {
    return this.statements.splice(0);
  }

  private install(): void {
    const recorder = this;
    this.patch(
      pg.Client.prototype,
      "query",
      (query) =>
        function (this: pg.Client, ...args: unknown[]) {
          if (recorder.recording) recorder.note(args);
          return query.apply(this, args);
        },
    );
    this.patch(
      pg.Pool.prototype,
      "connect",
      (connect) =>
        function (this: pg.Pool, ...args: unknown[]) {
          const [callback] = args;
          return connect.apply(this, typeof callback === "function" ? [AsyncResource.bind(callback as (...a: unknown[]) => unknown)] : args);
        },
    );
    this.patch(
      Worker.prototype,
      "callProcessJob",
      (callProcessJob) =>
        function (this: Worker, ...args: unknown[]) {
          return currentJob.run(this.name, () => callProcessJob.apply(this, args));
        },
    );
  }

  /** Replaces a method on a prototype, and remembers how to put back exactly what was there (own or inherited). */
  private patch(target: object, name: string, wrap: (original: AnyFunction) => AnyFunction): void {
    const own = Object.getOwnPropertyDescriptor(target, name);
    const original = (target as Record<string, unknown>)[name];
    if (typeof original !== "function") throw new Error(`cannot record statements: ${name} is not a method here (did pg or bullmq change?)`);
    Object.defineProperty(target, name, { value: wrap(original as AnyFunction), writable: true, configurable: true });
    this.restore.push(() => {
      if (own) Object.defineProperty(target, name, own);
      else delete (target as Record<string, unknown>)[name];
    });
  }

  private note(args: unknown[]): void {
    const [first, second] = args;
    const config = typeof first === "object" && first !== null ? (first as { text?: unknown; values?: unknown }) : undefined;
    const sql = typeof first === "string" ? first : config?.text;
    if (typeof sql !== "string") return;
    const values = Array.isArray(second) ? second : Array.isArray(config?.values) ? config.values : undefined;
    this.statements.push({ sql, values, job: currentJob.getStore() ?? OUTSIDE_JOBS });
  }
}

/** BEGIN, COMMIT, ROLLBACK, SAVEPOINT and friends: statements that only frame a transaction. */
export function isTransactionControl(sql: string): boolean {
  return /^\s*(BEGIN|START\s+TRANSACTION|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|SET\s+TRANSACTION)\b/i.test(sql);
}

/**
 * One line per statement for a reader: whitespace collapsed and the test schema's qualifier
 * (`"t_0123456789".`) dropped, so the same query in two schemas reads, and counts, as one.
 */
export function normalizeSql(sql: string, schema?: string): string {
  let text = sql.replace(/\s+/g, " ").trim();
  if (schema) text = text.replaceAll(`"${schema}".`, "");
  return text;
}

export function shortenSql(sql: string, width = 110): string {
  return sql.length <= width ? sql : `${sql.slice(0, width - 1)}…`;
}

export interface StatementTally {
  job: string;
  /** Normalised SQL (see normalizeSql). */
  sql: string;
  count: number;
}

/** Distinct statements per job, in the order each was first issued (the order a run reads in). */
export function tallyStatements(statements: RecordedStatement[], schema?: string): StatementTally[] {
  const byKey = new Map<string, StatementTally>();
  for (const s of statements) {
    const sql = normalizeSql(s.sql, schema);
    const key = `${s.job}\u0000${sql}`;
    const entry = byKey.get(key);
    if (entry) entry.count++;
    else byKey.set(key, { job: s.job, sql, count: 1 });
  }
  return [...byKey.values()];
}

/** How many statements each job kind issued. */
export function countByJob(statements: RecordedStatement[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const s of statements) counts.set(s.job, (counts.get(s.job) ?? 0) + 1);
  return counts;
}
