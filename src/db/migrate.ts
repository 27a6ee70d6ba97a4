import { createHash, randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { parseDatabaseUrl } from "./client.ts";

/**
 * Applies prisma/migrations the way `prisma migrate deploy` would (TOOLCHAIN.md: the native
 * migrate engine cannot run here): in order, each in its own transaction, under an advisory
 * lock so processes starting together do not race, recorded in Prisma's own
 * `_prisma_migrations` table with Prisma's checksum (sha256 of the file), so `prisma migrate
 * status` agrees on any machine that has the engine.
 */

export const MIGRATIONS_DIR = new URL("../../prisma/migrations/", import.meta.url).pathname;

/** Prisma's lock key for migrate (any fixed number works; this one matches no other use). */
const ADVISORY_LOCK_KEY = 72707369;

const CREATE_TABLE = `CREATE TABLE IF NOT EXISTS "_prisma_migrations" (
    "id"                    VARCHAR(36) PRIMARY KEY NOT NULL,
    "checksum"              VARCHAR(64) NOT NULL,
    "finished_at"           TIMESTAMPTZ,
    "migration_name"        VARCHAR(255) NOT NULL,
    "logs"                  TEXT,
    "rolled_back_at"        TIMESTAMPTZ,
    "started_at"            TIMESTAMPTZ NOT NULL DEFAULT now(),
    "applied_steps_count"   INTEGER NOT NULL DEFAULT 0
)`;

export interface MigrationResult {
  applied: string[];
  alreadyApplied: string[];
}

export class MigrationError extends Error {
  override readonly name = "MigrationError";
}

interface MigrationFile {
  name: string;
  sql: string;
  checksum: string;
}

async function readMigrations(dir: string): Promise<MigrationFile[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const names = entries
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  return Promise.all(
    names.map(async (name) => {
      const sql = await readFile(join(dir, name, "migration.sql"), "utf8");
      return { name, sql, checksum: createHash("sha256").update(sql).digest("hex") };
    }),
  );
}

/** Migrates the schema named by `?schema=` in the URL (Prisma's convention), else the default one. */
export async function migrate(databaseUrl: string, options: { dir?: string } = {}): Promise<MigrationResult> {
  const migrations = await readMigrations(options.dir ?? MIGRATIONS_DIR);
  const { connectionString, schema } = parseDatabaseUrl(databaseUrl);
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query("SELECT pg_advisory_lock($1)", [ADVISORY_LOCK_KEY]);
    try {
      // Under the lock: CREATE SCHEMA IF NOT EXISTS itself races between concurrent callers.
      if (schema) {
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${pg.escapeIdentifier(schema)}`);
        await client.query(`SET search_path TO ${pg.escapeIdentifier(schema)}`);
      }
      await client.query(CREATE_TABLE);
      const { rows } = await client.query<{ migration_name: string; checksum: string; finished_at: Date | null }>(
        `SELECT migration_name, checksum, finished_at FROM "_prisma_migrations" WHERE rolled_back_at IS NULL`,
      );
      const done = new Map(rows.map((r) => [r.migration_name, r]));
      const result: MigrationResult = { applied: [], alreadyApplied: [] };
      for (const migration of migrations) {
        const previous = done.get(migration.name);
        if (previous?.finished_at) {
          if (previous.checksum !== migration.checksum) {
            throw new MigrationError(`migration ${migration.name} was edited after it was applied (checksum differs)`);
          }
          result.alreadyApplied.push(migration.name);
          continue;
        }
        if (previous) {
          throw new MigrationError(`migration ${migration.name} failed earlier and needs attention before more can run`);
        }
        await apply(client, migration);
        result.applied.push(migration.name);
      }
      return result;
    } finally {
      await client.query("SELECT pg_advisory_unlock($1)", [ADVISORY_LOCK_KEY]);
    }
  } finally {
    await client.end();
  }
}

async function apply(client: pg.Client, migration: MigrationFile): Promise<void> {
  const id = randomUUID();
  await client.query("BEGIN");
  try {
    await client.query(migration.sql);
    await client.query(
      `INSERT INTO "_prisma_migrations" (id, checksum, migration_name, finished_at, applied_steps_count)
       VALUES ($1, $2, $3, now(), 1)`,
      [id, migration.checksum, migration.name],
    );
    await client.query("COMMIT");
  } catch (error) {
    await client.query("ROLLBACK");
    throw new MigrationError(`migration ${migration.name} failed: ${(error as Error).message}`);
  }
}
