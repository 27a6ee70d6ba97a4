import type { Db, Prisma } from "../db/client.ts";

/**
 * What was done with a customer's data on request (issue 35): an export or an erase, who did it
 * and when, written once and never changed; never the data itself.
 */
export async function recordDataRequest(
  db: Db | Prisma.TransactionClient,
  request: { kind: "export" | "erase"; actor: string; contactId: string; identityHash?: string; counts?: Record<string, number> },
  now: Date,
): Promise<void> {
  await db.dataRequest.create({
    data: {
      kind: request.kind,
      actor: request.actor,
      contactId: request.contactId,
      identityHash: request.identityHash ?? null,
      counts: request.counts,
      createdAt: now,
    },
  });
}
