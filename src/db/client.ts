import { PrismaPg } from "@prisma/adapter-pg";
import { Prisma, PrismaClient } from "../generated/prisma/client.ts";

export { Prisma, PrismaClient };
export type Db = PrismaClient;

/**
 * Prisma's convention: `?schema=name` in DATABASE_URL selects the Postgres schema. The pg
 * driver does not know that parameter, so it is taken out here and handed to the adapter.
 */
export function splitSchema(databaseUrl: string): { connectionString: string; schema: string | undefined } {
  const url = new URL(databaseUrl);
  const schema = url.searchParams.get("schema") ?? undefined;
  url.searchParams.delete("schema");
  return { connectionString: url.toString(), schema };
}

export function createDb(databaseUrl: string, options: { poolSize: number }): Db {
  const { connectionString, schema } = splitSchema(databaseUrl);
  const adapter = new PrismaPg({ connectionString, max: options.poolSize }, schema ? { schema } : undefined);
  // Under load a transaction may wait for a pooled connection longer than Prisma's 2 s default.
  return new PrismaClient({ adapter, transactionOptions: { maxWait: 10_000, timeout: 15_000 } });
}

/** A unique-constraint violation: the row is already there (e.g. a wamid seen before). */
export function isUniqueViolation(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2002";
}
