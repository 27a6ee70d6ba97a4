import type { Prisma } from "../db/client.ts";
import { FencedOut } from "../errors.ts";

/**
 * Law 8's fence: each reply job run takes its conversation by raising `reply_fence`
 * (conversations.ts, takeConversation) and holds it while that number is current. A run that
 * stalled past its queue lock and wakes behind a newer number can neither write nor send.
 */

type Tx = Prisma.TransactionClient;

/** A reply job run's hold on its conversation, valid while `fence` is the conversation's current one. */
export interface Lease {
  conversationId: string;
  fence: bigint;
}

/**
 * Inside a transaction: proves the lease still holds and keeps it until commit (FOR SHARE
 * waits for a takeover in flight, then sees it).
 */
export async function assertLease(tx: Tx, lease: Lease): Promise<void> {
  const [held] = await tx.$queryRaw<{ held: boolean }[]>`
    SELECT true AS held FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE`;
  if (!held) throw new FencedOut(`conversation ${lease.conversationId} was taken over by another worker`);
}

/**
 * Raises the conversation's fence without taking it: whatever run holds it now stops before
 * its next write or send. For a change made outside the reply job (a reply dead-lettered by a
 * status webhook or the reconciler, reopened by a person): the caller schedules a reply job,
 * which takes the conversation afresh.
 */
export async function fenceOff(tx: Tx, conversationId: string): Promise<void> {
  await tx.$executeRaw`UPDATE conversations SET reply_fence = reply_fence + 1 WHERE id = ${conversationId}::uuid`;
}
