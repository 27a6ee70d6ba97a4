import pg from "pg";
import { parseDatabaseUrl } from "../../src/db/client.ts";
import { isTransactionControl, normalizeSql, type RecordedStatement } from "./statement-recorder.ts";

/**
 * Postgres's plan for every statement a run issued, with the parameters it was issued with:
 * plain EXPLAIN (never ANALYZE), so an INSERT or UPDATE is planned, not executed. A statement
 * whose plan reads a large table from end to end (a Seq Scan) is a finding: it gets slower
 * with every message stored.
 */

/** "A few thousand rows": a table past this is large; scanning a smaller one whole is cheap and fine. */
export const LARGE_TABLE_ROWS = 2_000;

export interface SeqScan {
  table: string;
  /** The table's size as the planner knows it (pg_class.reltuples). */
  rows: number;
}

export interface PlannedStatement {
  /** Normalised SQL (the test schema's qualifier dropped). */
  sql: string;
  /** Which job kinds issued it. */
  jobs: string[];
  /** How many times the run issued it. */
  count: number;
  /** Tables the plan reads. */
  tables: string[];
  /** The planner's estimate of the work (its root node's Total Cost), the highest over the executions explained. */
  cost: number;
  /** Sequential scans of large tables, across the statement's explained executions. */
  seqScans: SeqScan[];
  /** The plan (text format) of the first execution that scanned sequentially, else of the first one. */
  plan: string;
  /** The parameters of that execution. */
  values: unknown[] | undefined;
  /** Set when Postgres could not plan it. */
  error?: string;
}

export interface PlanReport {
  /** Tables past LARGE_TABLE_ROWS, with their sizes. */
  largeTables: Record<string, number>;
  /** Every distinct explainable statement, in the order first issued. */
  statements: PlannedStatement[];
  /** Statements not planned: transaction control, SET, and the like. */
  notExplainable: string[];
  /** Statements that scan a large table sequentially, or that could not be planned. */
  failing: PlannedStatement[];
}

/** Only these can be EXPLAINed. */
const EXPLAINABLE = /^\s*(\(?\s*SELECT|WITH|INSERT|UPDATE|DELETE|MERGE|VALUES|TABLE)\b/i;

interface PlanNode {
  "Node Type": string;
  "Total Cost"?: number;
  "Relation Name"?: string;
  Plans?: PlanNode[];
}

function* nodesOf(node: PlanNode): Generator<PlanNode> {
  yield node;
  for (const child of node.Plans ?? []) yield* nodesOf(child);
}

/**
 * Plans `statements` (as recorded by StatementRecorder) in the schema of `databaseUrl`.
 * Each distinct statement is planned with the parameters of up to `samplesPerStatement`
 * of its executions, spread evenly from its first to its last (a run's phases come in order:
 * a new customer's message, then one with a long history), since a plan depends on the values.
 */
export async function explainStatements(
  databaseUrl: string,
  statements: RecordedStatement[],
  options: { samplesPerStatement?: number; largeTableRows?: number } = {},
): Promise<PlanReport> {
  const samples = options.samplesPerStatement ?? 8;
  const threshold = options.largeTableRows ?? LARGE_TABLE_ROWS;
  const { connectionString, schema } = parseDatabaseUrl(databaseUrl);
  if (!schema) throw new Error("explainStatements wants a DATABASE_URL with ?schema=");
  const client = new pg.Client({ connectionString, options: `-c search_path=${pg.escapeIdentifier(schema)}`, application_name: "explain-statements" });
  await client.connect();
  try {
    const sizes = await client.query<{ table: string; rows: string }>(
      `SELECT relname AS table, reltuples::bigint AS rows FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p')`,
      [schema],
    );
    const largeTables = Object.fromEntries(sizes.rows.filter((r) => Number(r.rows) > threshold).map((r) => [r.table, Number(r.rows)]));

    const distinct = new Map<string, { executions: RecordedStatement[]; jobs: Set<string>; count: number }>();
    const notExplainable = new Set<string>();
    for (const s of statements) {
      const sql = normalizeSql(s.sql, schema);
      if (isTransactionControl(s.sql) || !EXPLAINABLE.test(s.sql)) {
        notExplainable.add(sql);
        continue;
      }
      const entry = distinct.get(sql) ?? { executions: [], jobs: new Set<string>(), count: 0 };
      entry.count++;
      entry.jobs.add(s.job);
      entry.executions.push(s);
      distinct.set(sql, entry);
    }

    const planned: PlannedStatement[] = [];
    for (const [sql, entry] of distinct) {
      const result: PlannedStatement = {
        sql,
        jobs: [...entry.jobs],
        count: entry.count,
        tables: [],
        cost: 0,
        seqScans: [],
        plan: "",
        values: entry.executions[0]?.values,
      };
      const tables = new Set<string>();
      const scanned = new Map<string, number>();
      let shownPlanScans = false;
      for (const execution of spread(entry.executions, samples)) {
        try {
          const json = await client.query<{ "QUERY PLAN": { Plan: PlanNode }[] }>({ text: `EXPLAIN (FORMAT JSON) ${execution.sql}`, values: execution.values });
          const root = json.rows[0]!["QUERY PLAN"][0]!.Plan;
          result.cost = Math.max(result.cost, root["Total Cost"] ?? 0);
          let scansLarge = false;
          for (const node of nodesOf(root)) {
            const table = node["Relation Name"];
            if (!table) continue;
            tables.add(table);
            const rows = largeTables[table];
            if (node["Node Type"] === "Seq Scan" && rows !== undefined) {
              scanned.set(table, rows);
              scansLarge = true;
            }
          }
          // Show the first plan, unless a later execution is the one that scans.
          if (!result.plan || (scansLarge && !shownPlanScans)) {
            result.plan = await planText(client, execution);
            result.values = execution.values;
            shownPlanScans = scansLarge;
          }
        } catch (error) {
          result.error = error instanceof Error ? error.message : String(error);
          result.values = execution.values;
          break;
        }
      }
      result.tables = [...tables];
      result.seqScans = [...scanned].map(([table, rows]) => ({ table, rows }));
      planned.push(result);
    }
    return {
      largeTables,
      statements: planned,
      notExplainable: [...notExplainable],
      failing: planned.filter((p) => p.seqScans.length > 0 || p.error !== undefined),
    };
  } finally {
    await client.end();
  }
}

/** Up to `n` of `items`, evenly spaced, the first and the last included. */
function spread<T>(items: T[], n: number): T[] {
  if (items.length <= n) return items;
  const picked = new Set(Array.from({ length: n }, (_, i) => Math.round((i * (items.length - 1)) / (n - 1))));
  return [...picked].map((i) => items[i]!);
}

async function planText(client: pg.Client, execution: RecordedStatement): Promise<string> {
  const text = await client.query<{ "QUERY PLAN": string }>({ text: `EXPLAIN ${execution.sql}`, values: execution.values });
  return text.rows.map((r) => r["QUERY PLAN"]).join("\n");
}

/** A reader's account of the failing statements: which, issued by which job, how often, scanning what, and the plan. */
export function describeFailures(report: PlanReport): string {
  return report.failing
    .map((p, i) => {
      const what = p.error
        ? `could not be planned: ${p.error}`
        : `Seq Scan on ${p.seqScans.map((s) => `${s.table} (${s.rows.toLocaleString("en-US")} rows)`).join(", ")}`;
      return [
        `${i + 1}. ${what}`,
        `   issued ${p.count}× by ${p.jobs.join(", ")}`,
        `   SQL: ${p.sql}`,
        `   parameters: ${JSON.stringify(p.values)}`,
        ...p.plan.split("\n").map((line) => `   | ${line}`),
      ].join("\n");
    })
    .join("\n\n");
}
