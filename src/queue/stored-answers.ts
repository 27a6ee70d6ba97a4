import { Cluster } from "ioredis";
import type { RedisClient } from "./redis.ts";

/** Where the staff API keeps its answer for each Idempotency-Key (src/admin/idempotency.ts), under the queues' prefix: this, then the actor and the key. */
export const idempotencyKeys = (keyPrefix: string) => `${keyPrefix}:idem:`;

/**
 * The staff API's stored answers as an erase sees them: any may quote the customer. Here, below
 * the web role and the workers, because an erase forgets them from either: its route, or the
 * reconciler finishing an erase whose process stopped (src/customer-data/erase.ts).
 */
export class StoredAnswers {
  constructor(
    private readonly redis: RedisClient,
    private readonly keyPrefix: string,
  ) {}

  /** Deletes the answers that quote one of `needles`; how many went. */
  async forgetQuoting(needles: readonly string[]): Promise<number> {
    // Every key shares the prefix's hash tag: in a Cluster they sit on one master, which each scan below may be.
    const nodes = this.redis instanceof Cluster ? this.redis.nodes("master") : [this.redis];
    let forgotten = 0;
    for (const node of nodes) {
      let cursor = "0";
      do {
        const [next, keys] = await node.scan(cursor, "MATCH", `${idempotencyKeys(this.keyPrefix)}*`, "COUNT", "500");
        cursor = next;
        for (const key of keys) {
          const answer = await node.get(key);
          if (answer && needles.some((needle) => answer.includes(needle))) forgotten += await node.del(key);
        }
      } while (cursor !== "0");
    }
    return forgotten;
  }
}
