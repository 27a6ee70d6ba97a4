import { createHmac } from "node:crypto";
import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import { isInfrastructureFailure } from "../infrastructure.ts";
import type { Queues } from "../queue/queues.ts";
import type { StoredAnswers } from "../queue/stored-answers.ts";
import { finishErasure } from "../state/data-requests.ts";
import { type Erased, eraseContact } from "../state/erasure.ts";

/**
 * Erasing a customer on request (issue 35.2): Postgres emptied in one transaction, audited
 * (src/state/erasure.ts), then Redis cleaned of them: every BullMQ job that carried them
 * removed, whatever its state (an inbound job holds the webhook: their number, name and words; a
 * status job their number; a reply job a kept step of Claude's), and every stored answer of the
 * staff API that quotes them. A job running as the erase lands cannot be removed: it finds its
 * conversation fenced off and sends nothing, and is removed by the reconciler once it has ended.
 * The audit row keeps what finds them in Redis until all of that is done, so an erase whose
 * process stops after its commit is finished by the reconciler too (cleanRedisOf, from
 * src/jobs/reconcile.ts).
 */

/** What cleaning Redis of an erased customer takes: the queues, where stored answers are, and the audit row to tell it is done. */
export interface RedisCleanUpDeps {
  db: Db;
  queues: Queues;
  /** The staff API's answers kept for each Idempotency-Key: one may quote the customer. */
  storedAnswers: StoredAnswers;
}

export interface EraseDeps extends RedisCleanUpDeps {
  clock: Clock;
  logger: { info(fields: object, message: string): void; warn(fields: object, message: string): void };
  /** The key of the identity's hash in the audit (WHATSAPP_APP_SECRET): the same number hashes alike for as long as it stays. */
  identityKey: string;
}

const STATES = ["wait", "prioritized", "delayed", "waiting-children", "active", "completed", "failed"] as const;

/**
 * The erase, then Redis cleaned of the customer. Erased is erased once the transaction commits:
 * when a job of theirs is running, or Redis (or Postgres, for the last step) is away for the
 * clean-up, the answer says it is pending, and the reconciler finishes it, rather than a failure
 * that a retry would meet as a 404.
 */
export async function eraseCustomer(
  deps: EraseDeps,
  contactId: string,
  actor: string,
): Promise<{ erased: Record<string, number>; jobs: number; redis: "clean" | "pending" } | null> {
  const erased = await eraseContact(deps.db, contactId, { actor, hashOf: (identity) => identityHash(deps.identityKey, identity) }, deps.clock.now());
  if (!erased) return null;
  const fields = { contact: contactId, counts: erased.counts };
  try {
    const { jobs, answers, held } = await cleanRedisOf(deps, erased);
    deps.logger.info({ event: "customer.erased", ...fields, jobs, answers, held }, "a customer's data was erased on request");
    return { erased: erased.counts, jobs, redis: held === 0 ? "clean" : "pending" };
  } catch (error) {
    // Anything else is a fault of ours, answered as one (500), not hidden as a clean-up to come.
    if (!isInfrastructureFailure(error)) throw error;
    deps.logger.warn(
      { event: "customer.erased", ...fields, redis: "pending", err: error },
      "a customer's data was erased on request; Redis could not be cleaned of them now, and the reconciler will",
    );
    return { erased: erased.counts, jobs: 0, redis: "pending" };
  }
}

/**
 * Removes what Redis holds of an erased customer; once nothing is left (no job of theirs was
 * running), the audit row forgets what found them there. How many jobs and stored answers went,
 * and how many running jobs a later sweep must remove once they have finished.
 */
export async function cleanRedisOf(
  deps: RedisCleanUpDeps,
  erasure: Pick<Erased, "requestId" | "needles">,
): Promise<{ jobs: number; answers: number; held: number }> {
  const { removed, held } = await removeJobsCarrying(deps.queues, erasure.needles);
  const answers = await deps.storedAnswers.forgetQuoting(erasure.needles);
  if (held === 0) await finishErasure(deps.db, erasure.requestId);
  return { jobs: removed, answers, held };
}

/** The erased identity, recognisable when asked again, kept without the number itself. */
export function identityHash(key: string, identity: Erased["identity"]): string {
  return createHmac("sha256", key)
    .update(JSON.stringify(["erased-customer", identity.waId, identity.userId]))
    .digest("hex");
}

/**
 * Removes every job whose data, result or failure names one of `needles`: how many went, and how
 * many a worker holds (active, locked: not removable now; fenced off, it sends nothing).
 */
async function removeJobsCarrying(queues: Queues, needles: readonly string[]): Promise<{ removed: number; held: number }> {
  const count = { removed: 0, held: 0 };
  if (needles.length === 0) return count;
  for (const queue of Object.values(queues)) {
    // Each state read whole: what BullMQ keeps of finished jobs is bounded (KEEP), and removing while paging would skip some.
    for (const job of await queue.getJobs([...STATES])) {
      const carried = `${job.id} ${JSON.stringify(job.data)} ${JSON.stringify(job.returnvalue ?? null)} ${job.failedReason ?? ""}`;
      if (!needles.some((needle) => carried.includes(needle))) continue;
      const gone = await job.remove().then(
        () => true,
        () => false,
      );
      count[gone ? "removed" : "held"]++;
    }
  }
  return count;
}
