import { afterEach, describe, expect, it } from "vitest";
import { createDb, type Db, PREPARED_STATEMENTS_MAX } from "../src/db/client.ts";
import { TEST_DATABASE_URL } from "./support/harness.ts";

/**
 * Named prepared statements (src/db/client.ts): each SQL text is parsed and planned once per
 * connection, not on every run. One pooled connection, so every statement below meets the
 * same Postgres session, whose pg_prepared_statements lists what it keeps.
 */

let db: Db | undefined;

afterEach(async () => {
  await db?.$disconnect();
  db = undefined;
});

const kept = async (db: Db) => db.$queryRawUnsafe<{ statement: string }[]>("SELECT statement FROM pg_prepared_statements");

describe("prepared statements", () => {
  it("a statement run three times is prepared once on its connection and reused", async () => {
    db = createDb(TEST_DATABASE_URL, { poolSize: 1 });
    for (const n of [1, 2, 3]) expect(await db.$queryRaw<{ x: number }[]>`SELECT ${n}::int AS x`).toEqual([{ x: n }]);
    const statements = (await kept(db)).map((s) => s.statement);
    expect(statements.filter((s) => s.includes("::int AS x"))).toEqual(["SELECT $1::int AS x"]);
  });

  it("behind ?pgbouncer=true (a pooler that cannot keep them) no statement is prepared", async () => {
    const url = new URL(TEST_DATABASE_URL);
    url.searchParams.set("pgbouncer", "true");
    db = createDb(url.toString(), { poolSize: 1 });
    for (const n of [1, 2, 3]) expect(await db.$queryRaw<{ x: number }[]>`SELECT ${n}::int AS x`).toEqual([{ x: n }]);
    expect(await kept(db)).toEqual([]);
  });

  it(`past ${PREPARED_STATEMENTS_MAX} distinct statements the rest run unnamed, so Postgres keeps no more than that`, async () => {
    db = createDb(TEST_DATABASE_URL, { poolSize: 1 });
    const distinct = PREPARED_STATEMENTS_MAX + 20;
    for (let i = 0; i < distinct; i++) expect(await db.$queryRawUnsafe<{ n: number }[]>(`SELECT ${i}::int AS n`)).toEqual([{ n: i }]);
    // The first ones were named; the last ones, past the cap, were not.
    const statements = new Set((await kept(db)).map((s) => s.statement));
    expect(statements.size).toBe(PREPARED_STATEMENTS_MAX);
    expect(statements.has("SELECT 0::int AS n")).toBe(true);
    expect(statements.has(`SELECT ${distinct - 1}::int AS n`)).toBe(false);
  });
});
