import { createHmac } from "node:crypto";
import { Cluster } from "ioredis";
import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import type { Queues } from "../queue/queues.ts";
import type { RedisClient } from "../queue/redis.ts";
import { type Erased, eraseContact } from "../state/erasure.ts";

/**
 * Erasing a customer on request (issue 35.2): Postgres emptied in one transaction, audited
 * (src/state/erasure.ts), then every BullMQ job that carried them removed, whatever its state:
 * an inbound job holds the webhook (their number, name and words), a status job their number,
 * a reply job a kept step of Claude's. A job running as the erase lands cannot be removed; it
 * finds its conversation fenced off and sends nothing, and whatever it leaves is found by the
 * next erase or the retention sweep.
 */

export interface EraseDeps {
  db: Db;
  queues: Queues;
  /** Where the staff API keeps its answers for each Idempotency-Key (src/admin/idempotency.ts): one may quote the customer. */
  storedAnswers: { redis: RedisClient; prefix: string };
  clock: Clock;
  logger: { info(fields: object, message: string): void };
  /** The key of the identity's hash in the audit (WHATSAPP_APP_SECRET): the same number hashes alike for as long as it stays. */
  identityKey: string;
}

const STATES = ["wait", "prioritized", "delayed", "waiting-children", "active", "completed", "failed"] as const;

export async function eraseCustomer(deps: EraseDeps, contactId: string, actor: string) {
  const erased = await eraseContact(deps.db, contactId, { actor, hashOf: (identity) => identityHash(deps.identityKey, identity) }, deps.clock.now());
  if (!erased) return null;
  const jobs = await removeJobsCarrying(deps.queues, erased.needles);
  const answers = await forgetAnswersQuoting(deps.storedAnswers, erased.needles);
  deps.logger.info({ event: "customer.erased", contact: contactId, counts: erased.counts, jobs, answers }, "a customer's data was erased on request");
  return { erased: erased.counts, jobs };
}

/** The erased identity, recognisable when asked again, kept without the number itself. */
export function identityHash(key: string, identity: Erased["identity"]): string {
  return createHmac("sha256", key)
    .update(JSON.stringify(["erased-customer", identity.waId, identity.userId]))
    .digest("hex");
}

/** Removes every job whose data, result or failure names one of `needles`; how many went. */
async function removeJobsCarrying(queues: Queues, needles: readonly string[]): Promise<number> {
  if (needles.length === 0) return 0;
  let removed = 0;
  for (const queue of Object.values(queues)) {
    // Each state read whole: what BullMQ keeps of finished jobs is bounded (KEEP), and removing while paging would skip some.
    for (const job of await queue.getJobs([...STATES])) {
      const carried = `${job.id} ${JSON.stringify(job.data)} ${JSON.stringify(job.returnvalue ?? null)} ${job.failedReason ?? ""}`;
      if (!needles.some((needle) => carried.includes(needle))) continue;
      // A job a worker holds (active, locked) cannot be removed: it is fenced off and sends nothing.
      if (
        await job.remove().then(
          () => true,
          () => false,
        )
      )
        removed++;
    }
  }
  return removed;
}

/** Deletes the stored answers (of requests with an Idempotency-Key) that quote one of `needles`; how many went. */
async function forgetAnswersQuoting(stored: EraseDeps["storedAnswers"], needles: readonly string[]): Promise<number> {
  // Every key shares the prefix's hash tag: in a Cluster they sit on one master, which each scan below may be.
  const nodes = stored.redis instanceof Cluster ? stored.redis.nodes("master") : [stored.redis];
  let forgotten = 0;
  for (const node of nodes) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", `${stored.prefix}*`, "COUNT", "500");
      cursor = next;
      for (const key of keys) {
        const answer = await node.get(key);
        if (answer && needles.some((needle) => answer.includes(needle))) forgotten += await node.del(key);
      }
    } while (cursor !== "0");
  }
  return forgotten;
}
