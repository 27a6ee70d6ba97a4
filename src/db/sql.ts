import pg from "pg";
import { type Db, directPoolOf, Prisma } from "./client.ts";

/**
 * The reply path's statements, sent on the pg pool beneath Prisma's driver adapter instead of
 * through Prisma's runtime: a quarter of the worker's CPU per reply went to that runtime
 * (issue 36.2, bench/RESULTS.md). Prisma keeps the schema, the migrations, the generated types
 * and every other query; these statements are written as they were, with `Prisma.sql`, and
 * answer what `$queryRaw` would: the same JavaScript values for every column type the schema
 * has (test/sql.test.ts holds the two side by side).
 *
 * A transaction's client has no pool of its own here: its statements go through Prisma, on the
 * transaction's connection.
 */

type Client = Db | Prisma.TransactionClient;

/** The rows a statement answers, as `db.$queryRaw` would give them. */
export async function queryRows<T>(db: Client, query: Prisma.Sql): Promise<T[]> {
  const direct = directPoolOf(db);
  if (!direct) return db.$queryRaw<T[]>(query);
  const result = await direct.pool.query<T & pg.QueryResultRow>(statementOf(direct.nameOf, query));
  return result.rows;
}

/** How many rows a statement changed, as `db.$executeRaw` would count them. */
export async function execute(db: Client, query: Prisma.Sql): Promise<number> {
  const direct = directPoolOf(db);
  if (!direct) return db.$executeRaw(query);
  const result = await direct.pool.query(statementOf(direct.nameOf, query));
  return result.rowCount ?? 0;
}

function statementOf(nameOf: (query: { sql: string }) => string, query: Prisma.Sql): pg.QueryConfig {
  // `text` is a getter that joins the statement anew at every read: read once.
  const text = query.text;
  const name = nameOf({ sql: text });
  return { ...(name ? { name } : {}), text, values: query.values.map(parameterOf), types: PRISMA_TYPES };
}

/**
 * What pg cannot send as Prisma does: a Decimal (pg would send its JSON, a quoted string). A
 * Date goes as its ISO string, the instant in UTC, which pg would otherwise spell out in the
 * process's time zone field by field.
 */
function parameterOf(value: unknown): unknown {
  // Most parameters are strings and numbers: they pass untouched, without the checks below.
  if (typeof value !== "object" || value === null) return value;
  if (value instanceof Date) return value.toISOString();
  return value instanceof Prisma.Decimal ? value.toString() : value;
}

/** text[]: pg-types knows its parser, its typings only the scalar types. */
const TEXT_ARRAY = 1009 as unknown as Parameters<typeof pg.types.getTypeParser>[0];
const OID = { INT8: 20, NUMERIC: 1700, INT8_ARRAY: 1016, NUMERIC_ARRAY: 1231, DATE: 1082, TIMESTAMP: 1114 } as const;

const arrayOf =
  <T>(parse: (text: string) => T) =>
  (text: string): T[] =>
    (pg.types.getTypeParser(TEXT_ARRAY, "text") as (text: string) => string[])(text).map(parse);

/** Midnight UTC of a `date`, and a `timestamp` read as UTC: what Prisma answers for them. */
const utcDate = (text: string) => new Date(`${text}T00:00:00Z`);
const utcTimestamp = (text: string) => new Date(`${text.replace(" ", "T")}Z`);

/** pg's parsers, except where Prisma answers otherwise: int8 as BigInt, numeric as Decimal, dates in UTC. */
const PRISMA_PARSERS: Record<number, (text: string) => unknown> = {
  [OID.INT8]: BigInt,
  [OID.INT8_ARRAY]: arrayOf(BigInt),
  [OID.NUMERIC]: (text) => new Prisma.Decimal(text),
  [OID.NUMERIC_ARRAY]: arrayOf((text) => new Prisma.Decimal(text)),
  [OID.DATE]: utcDate,
  [OID.TIMESTAMP]: utcTimestamp,
};

const PRISMA_TYPES = {
  getTypeParser: (oid: number, format?: "text" | "binary") => {
    const own = format !== "binary" ? PRISMA_PARSERS[oid] : undefined;
    return own ?? pg.types.getTypeParser(oid, format ?? "text");
  },
} as pg.CustomTypesConfig;
