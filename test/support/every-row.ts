import type { Harness } from "./harness.ts";

/**
 * What a test reads to prove a customer's data is gone (issue 35): every column of every row of
 * the harness's schema, and every Redis key under its prefix whatever the key's type.
 */

/** Every row of every table of the test's schema, as text: each column of each row. */
export async function everyRow(h: Pick<Harness, "db" | "schema">): Promise<string> {
  const tables = await h.db.$queryRawUnsafe<{ table_name: string }[]>(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = '${h.schema}' AND table_type = 'BASE TABLE'`,
  );
  const rows: string[] = [];
  for (const { table_name } of tables)
    for (const row of await h.db.$queryRawUnsafe<{ row: string }[]>(`SELECT t::text AS row FROM "${h.schema}"."${table_name}" t`))
      rows.push(`${table_name}: ${row.row}`);
  return rows.join("\n");
}

/** Every key under the harness's prefix, and what it holds, whatever its type. */
export async function everyKey(h: Pick<Harness, "redis" | "prefix">): Promise<string> {
  const out: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await h.redis.scan(cursor, "MATCH", `${h.prefix}*`, "COUNT", "500");
    cursor = next;
    for (const key of keys) {
      const type = await h.redis.type(key);
      const value =
        type === "string"
          ? await h.redis.getBuffer(key).then((b) => b?.toString("latin1"))
          : type === "hash"
            ? await h.redis.hgetallBuffer(key).then((o) => Object.entries(o).map(([k, v]) => `${k}=${v.toString("latin1")}`))
            : type === "list"
              ? await h.redis.lrange(key, 0, -1)
              : type === "set"
                ? await h.redis.smembers(key)
                : type === "zset"
                  ? await h.redis.zrange(key, "0", "-1")
                  : type === "stream"
                    ? await h.redis.xrange(key, "-", "+")
                    : type;
      out.push(`${key} ${JSON.stringify(value)}`);
    }
  } while (cursor !== "0");
  return out.join("\n");
}
