import { PrismaPg } from "@prisma/adapter-pg";
import pg from "pg";
import { Prisma, PrismaClient } from "../generated/prisma/client.ts";

export { Prisma, PrismaClient };
export type Db = PrismaClient;

/** What DATABASE_URL says beyond what the pg driver reads: Prisma's own parameters, taken out here. */
export interface DatabaseUrl {
  /** The URL without them, for the pg driver. */
  connectionString: string;
  /** `?schema=name`: the Postgres schema, handed to the adapter (the driver does not know the parameter). */
  schema: string | undefined;
  /**
   * `?pgbouncer=true`: a pooler that cannot keep named prepared statements (PgBouncer before
   * 1.21, or without max_prepared_statements) sits in front, so every statement goes unnamed.
   */
  pgbouncer: boolean;
}

export function parseDatabaseUrl(databaseUrl: string): DatabaseUrl {
  const url = new URL(databaseUrl);
  const schema = url.searchParams.get("schema") ?? undefined;
  const pgbouncer = url.searchParams.get("pgbouncer") === "true";
  url.searchParams.delete("schema");
  url.searchParams.delete("pgbouncer");
  return { connectionString: url.toString(), schema, pgbouncer };
}

/**
 * How many distinct statements a process prepares, on each of its connections. The reply path
 * runs about a dozen; the rest of the code a few dozen more. The cap bounds what a statement
 * built from varying input could leave in Postgres's backends; past it, statements go unnamed.
 */
export const PREPARED_STATEMENTS_MAX = 100;

/**
 * Names each distinct SQL text once, so every pooled connection parses and plans it once and
 * then only binds and runs it; after five runs Postgres keeps a generic plan. Unnamed, the
 * reply path's statements spent more of Postgres's time being planned than being executed
 * (bench/RESULTS.md). A name stays its text's for the life of the process: the pg driver
 * refuses one name for two texts. "" is the driver's unnamed statement.
 */
function statementNames(): (query: { sql: string }) => string {
  const names = new Map<string, string>();
  return ({ sql }) => {
    let name = names.get(sql);
    if (name === undefined && names.size < PREPARED_STATEMENTS_MAX) {
      name = `wa_${names.size}`;
      names.set(sql, name);
    }
    return name ?? "";
  };
}

/** The pool beneath a client's adapter and its statement names: the hot statements' way past Prisma's runtime (db/sql.ts). */
export interface DirectPool {
  pool: pg.Pool;
  /** The statement's name on every connection; "" when it goes unnamed. Shared with the adapter: one name, one text. */
  nameOf: (query: { sql: string }) => string;
}

const directPools = new WeakMap<object, DirectPool>();

/** The pool beneath `db`'s adapter; undefined for a transaction's client, whose statements must stay on its connection. */
export function directPoolOf(db: object): DirectPool | undefined {
  return directPools.get(db);
}

export function createDb(databaseUrl: string, options: { poolSize: number }): Db {
  const { connectionString, schema, pgbouncer } = parseDatabaseUrl(databaseUrl);
  const pool = new pg.Pool({
    connectionString,
    max: options.poolSize,
    // Prisma qualifies its own queries with the schema; the reply state machine's SQL
    // (src/state/) finds its tables through the search path instead.
    ...(schema ? { options: `-c search_path="${schema.replaceAll('"', '""')}"` } : {}),
  });
  // An idle connection that dies (Postgres restarted) is reported here; without a listener
  // it would end the process. The next statement on the pool fails, and its caller decides.
  pool.on("error", () => {});
  const nameOf = pgbouncer ? () => "" : statementNames();
  const adapter = new PrismaPg(pool, {
    ...(schema ? { schema } : {}),
    ...(pgbouncer ? {} : { statementNameGenerator: nameOf }),
    disposeExternalPool: true,
  });
  // Under load a transaction may wait for a pooled connection longer than Prisma's 2 s default.
  const db = new PrismaClient({ adapter, transactionOptions: { maxWait: 10_000, timeout: 15_000 } });
  directPools.set(db, { pool, nameOf });
  return db;
}

/**
 * A unique-constraint violation: the row is already there (e.g. a wamid seen before). Prisma's
 * own queries say P2002; a raw statement says P2010 with the driver's error underneath; a
 * statement of db/sql.ts, the driver's error itself.
 */
export function isUniqueViolation(error: unknown): boolean {
  // The pg driver's own error, from a statement of db/sql.ts: SQLSTATE unique_violation.
  if (error instanceof pg.DatabaseError) return error.code === "23505";
  if (!(error instanceof Prisma.PrismaClientKnownRequestError)) return false;
  if (error.code === "P2002") return true;
  const cause = (error.meta?.driverAdapterError as { cause?: { kind?: string } } | undefined)?.cause;
  return cause?.kind === "UniqueConstraintViolation";
}

/** Prisma's codes for "the database is not there right now" (unreachable, gone, pool or transaction timed out). */
const UNAVAILABLE_CODES = new Set(["P1001", "P1002", "P1008", "P1017", "P2024", "P2028"]);
/** The pg driver adapter's error kinds that mean the same. */
const UNAVAILABLE_KINDS = new Set([
  "DatabaseNotReachable",
  "ConnectionClosed",
  "SocketTimeout",
  "TooManyConnections",
  "TransactionWriteConflict",
  "TlsConnectionError",
]);
/**
 * Postgres SQLSTATEs of the same family: connection exceptions (08), the server shutting down
 * or starting (57P01–57P03), out of resources (53), serialisation failures and deadlocks (40).
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|57P0[123]|40001|40P01)/;
/** What the pg driver throws, unconverted, when a connection dies under it. */
const UNAVAILABLE_MESSAGE =
  /Connection terminated|connection error and is not queryable|Client was closed|timeout exceeded when trying to connect|Can't reach database server|terminating connection/i;

/**
 * True when an error says the database is unreachable or overloaded, not that the request
 * was wrong: such a failure is not the message's fault, and its job waits for the database
 * without spending an attempt (DESIGN.md law 6).
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    if (e instanceof Prisma.PrismaClientInitializationError) return true;
    if (e instanceof Prisma.PrismaClientKnownRequestError) {
      if (UNAVAILABLE_CODES.has(e.code)) return true;
      const cause = (e.meta?.driverAdapterError as { cause?: { kind?: string; originalCode?: string; code?: string } } | undefined)?.cause;
      if (cause?.kind && UNAVAILABLE_KINDS.has(cause.kind)) return true;
      const sqlState = cause?.originalCode ?? cause?.code;
      if (typeof sqlState === "string" && UNAVAILABLE_SQLSTATE.test(sqlState)) return true;
    }
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && UNAVAILABLE_SQLSTATE.test(code)) return true;
    if (typeof code === "string" && ["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE"].includes(code)) return true;
    if (e instanceof Error && UNAVAILABLE_MESSAGE.test(e.message)) return true;
  }
  return false;
}
