import { PrismaPg } from "@prisma/adapter-pg";
import { Prisma, PrismaClient } from "../generated/prisma/client.ts";

export { Prisma, PrismaClient };
export type Db = PrismaClient;

/** `schema` lets each test file own a Postgres schema, so tests never see each other's rows. */
export function createDb(databaseUrl: string, options: { schema?: string; poolSize?: number } = {}): Db {
  const adapter = new PrismaPg(
    { connectionString: databaseUrl, max: options.poolSize ?? 20 },
    options.schema ? { schema: options.schema } : undefined,
  );
  return new PrismaClient({ adapter });
}

/** A unique-constraint violation: the row is already there (e.g. a wamid seen before). */
export function isUniqueViolation(error: unknown): boolean {
  return error instanceof Prisma.PrismaClientKnownRequestError && error.code === "P2002";
}
