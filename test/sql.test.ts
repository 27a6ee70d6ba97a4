import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Prisma } from "../src/db/client.ts";
import { execute, queryRows } from "../src/db/sql.ts";
import { saysAndIsAnswered } from "./support/customer.ts";
import { type Harness, startHarness } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";

/**
 * Issue 36.2: the reply path's statements go to the pg pool beneath Prisma's adapter
 * (src/db/sql.ts), past Prisma's runtime. The code that reads their rows was written against
 * what `$queryRaw` answers, so the two must agree: for every column of every table the
 * migrations make, for the types the statements compute (counts, sums, dates), and for every
 * kind of parameter the code sends.
 */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ env: { REPLY_DEBOUNCE_MS: "0" } });
  // A reply answered and sent: the reply path's tables hold rows to read back.
  await saysAndIsAnswered(h, { phone: "447700900777", name: "Tess Ward" }, "Are you open on Sunday?");
  await untilQuiet(h);
}, 60_000);
afterAll(async () => h?.close());

const bothWays = async (query: Prisma.Sql) => ({
  direct: await queryRows<Record<string, unknown>>(h.db, query),
  prisma: await h.db.$queryRaw<Record<string, unknown>[]>(query),
});

describe("a statement sent on the pg pool answers what $queryRaw answers", () => {
  it("for every column of every table of the schema", async () => {
    const tables = await h.db.$queryRaw<{ table: string }[]>`
      SELECT table_name AS table FROM information_schema.tables WHERE table_schema = ${h.schema} AND table_type = 'BASE TABLE' ORDER BY 1`;
    expect(tables.length).toBeGreaterThan(15);
    const withRows: string[] = [];
    for (const { table } of tables) {
      const columns = await readableColumns(table);
      const { direct, prisma } = await bothWays(Prisma.sql`SELECT ${Prisma.raw(columns.join(", "))} FROM ${Prisma.raw(`"${table}"`)} ORDER BY 1 LIMIT 50`);
      expect(direct, table).toStrictEqual(prisma);
      if (prisma.length > 0) withRows.push(table);
    }
    // The comparison read real rows of the reply path, not only empty tables.
    expect(withRows).toEqual(expect.arrayContaining(["contacts", "conversations", "inbound_messages", "replies", "outbound_messages", "claude_calls"]));
  });

  it("for every type the schema's columns have, a value and a null of each", async () => {
    const types = await h.db.$queryRaw<{ type: string }[]>`
      SELECT DISTINCT format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
      JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ${h.schema} AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1`;
    expect(types.map((t) => t.type)).toEqual(
      expect.arrayContaining(["bigint", "boolean", "double precision", "integer", "jsonb", "text", "text[]", "timestamp with time zone", "uuid"]),
    );
    for (const { type } of types.filter((t) => !UNREADABLE.includes(t.type))) {
      const sample = Prisma.raw(`(SELECT ${sqlString(type)})`);
      const { direct, prisma } = await bothWays(Prisma.sql`SELECT NULL::${Prisma.raw(quoteType(type))} AS "null", ${sample} AS "type"`);
      expect(direct, type).toStrictEqual(prisma);
    }
  });

  it("for what the statements compute: counts, sums, averages, dates, arrays and JSON", async () => {
    const { direct, prisma } = await bothWays(Prisma.sql`
      SELECT count(*) AS count, sum(x) AS sum, avg(x) AS avg, 1.25::numeric AS numeric, 2.5::float8 AS float,
             '2026-12-05'::date AS date, '2026-12-05 10:11:12.345'::timestamp AS timestamp,
             '2026-12-05 10:11:12.345+01'::timestamptz AS timestamptz, ARRAY[1, 2]::int8[] AS bigints,
             ARRAY['a', 'b'] AS texts, jsonb_build_object('at', '2026-12-05 10:11:12.345678+00'::timestamptz, 'n', 9007199254740993::int8) AS json,
             gen_random_uuid() IS NOT NULL AS bool
      FROM generate_series(1, 3) x`);
    expect(direct).toStrictEqual(prisma);
    expect(typeof direct[0]?.count).toBe("bigint");
  });

  it("for every kind of parameter the code sends", async () => {
    const at = new Date("2026-12-05T10:11:12.345Z");
    const query = Prisma.sql`
      SELECT ${at}::timestamptz AS at, ${12n}::bigint AS big, ${7}::int AS int, ${0.1}::float8 AS float, ${"tëxt"} AS text,
             ${true} AS bool, ${null}::text AS nothing, ${["a", "b"]}::text[] AS texts, ${JSON.stringify({ a: [1] })}::jsonb AS json,
             ${new Prisma.Decimal("1.50")}::numeric AS decimal, ${Prisma.join([1, 2, 3])} AS joined`;
    const { direct, prisma } = await bothWays(query);
    expect(direct).toStrictEqual(prisma);
    expect(direct[0]?.at).toEqual(at);
  });

  it("counts the rows a change touched as $executeRaw does", async () => {
    const change = Prisma.sql`UPDATE contacts SET name = name WHERE name = ${"Tess Ward"}`;
    expect(await execute(h.db, change)).toBe(1);
    expect(await h.db.$executeRaw(change)).toBe(1);
  });

  it("in a transaction, goes through Prisma on the transaction's own connection", async () => {
    const seen = await h.db.$transaction(async (tx) => {
      await execute(tx, Prisma.sql`SET LOCAL application_name = 'sql-test'`);
      return queryRows<{ name: string }>(tx, Prisma.sql`SELECT current_setting('application_name') AS name`);
    });
    expect(seen).toEqual([{ name: "sql-test" }]);
  });
});

/** Column types `$queryRaw` refuses to read (the search index's words): no code reads them back. */
const UNREADABLE = ["tsvector"];

async function readableColumns(table: string): Promise<string[]> {
  const columns = await h.db.$queryRaw<{ name: string; type: string }[]>`
    SELECT column_name AS name, udt_name AS type FROM information_schema.columns
    WHERE table_schema = ${h.schema} AND table_name = ${table} ORDER BY ordinal_position`;
  return columns.filter((c) => !UNREADABLE.includes(c.type)).map((c) => `"${c.name}"`);
}

const sqlString = (type: string) => {
  const samples: Record<string, string> = {
    bigint: "9007199254740993::bigint",
    boolean: "true",
    "double precision": "0.1::float8",
    integer: "42",
    jsonb: `'{"a": [1, "b"], "at": "2026-12-05T10:11:12Z"}'::jsonb`,
    json: `'{"a": 1}'::json`,
    text: "'tëxt'",
    "text[]": "ARRAY['a', 'b']",
    "timestamp with time zone": "'2026-12-05 10:11:12.345+00'::timestamptz",
    "timestamp(3) with time zone": "'2026-12-05 10:11:12.345+00'::timestamptz(3)",
    uuid: "'6f1c0d5e-6d8a-4a1e-9f6c-2b7b3c1d9e0f'::uuid",
  };
  // An enum of the schema, or a type not listed: one of its values read from the catalogue.
  return (
    samples[type] ??
    `(SELECT e.enumlabel::${quoteType(type)} FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid WHERE t.typname = ${sqlLiteral(type.replaceAll('"', ""))} LIMIT 1)`
  );
};
const quoteType = (type: string) =>
  /^[a-z_]+$/.test(type) && !["bigint", "boolean", "integer", "jsonb", "json", "text", "uuid"].includes(type) ? `"${type}"` : type;
const sqlLiteral = (text: string) => `'${text.replaceAll("'", "''")}'`;
