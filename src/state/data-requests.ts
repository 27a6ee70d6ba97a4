import { type Db, Prisma } from "../db/client.ts";
import { execute, queryRows } from "../db/sql.ts";

/**
 * What was done with a customer's data on request (issue 35): an export or an erase, who did it
 * and when, written once; never the data itself, but for one thing held briefly. An erase's row
 * keeps the strings that find the customer in Redis (their jobs, the stored answers that quote
 * them: `redis_needles`) from the erase's own commit until Redis holds none of them, so that a
 * process stopping in between leaves work the reconciler finishes, not data nobody can find.
 */
export async function recordDataRequest(
  db: Db | Prisma.TransactionClient,
  request: { kind: "export" | "erase"; actor: string; contactId: string; identityHash?: string; counts?: Record<string, number>; redisNeedles?: string[] },
  now: Date,
): Promise<{ id: string }> {
  return db.dataRequest.create({
    data: {
      kind: request.kind,
      actor: request.actor,
      contactId: request.contactId,
      identityHash: request.identityHash ?? null,
      counts: request.counts,
      redisNeedles: request.redisNeedles ?? [],
      createdAt: now,
    },
    select: { id: true },
  });
}

/** Erases whose Redis clean-up has not been seen to finish, made before `before`: oldest first. */
export function unfinishedErasures(db: Db, before: Date, limit: number): Promise<{ id: string; redisNeedles: string[] }[]> {
  return queryRows(
    db,
    Prisma.sql`
      SELECT id::text AS id, redis_needles AS "redisNeedles" FROM data_requests
      WHERE kind = 'erase' AND cardinality(redis_needles) > 0 AND created_at < ${before}::timestamptz
      ORDER BY created_at LIMIT ${limit}`,
  );
}

/** Redis holds nothing of the erased customer any more: the row forgets what found them there. */
export async function finishErasure(db: Db, id: string): Promise<void> {
  await execute(db, Prisma.sql`UPDATE data_requests SET redis_needles = '{}' WHERE id = ${id}::uuid`);
}
