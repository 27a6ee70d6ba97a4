import calculateSlot from "cluster-key-slot";
import { Cluster, type Redis } from "ioredis";
import type { Clock } from "../clock.ts";
import { isRedisUnavailable, type RedisClient } from "./redis.ts";

/**
 * How many replicas the master holding a key has right now, known without a round trip per
 * webhook: a webhook waits for the replicas that exist (law 2), so that a failover which
 * leaves the promoted master without a replica costs seconds of 503s, not an outage until an
 * operator restores one (src/queue/queues.ts, replicasToAwait).
 *
 * A reading can be wrong both ways, for a while:
 * - it names a replica that is gone (down, not yet noticed): the webhook's WAIT comes back
 *   short and the delivery is answered 503, as before; `doubt()` reads again, so the next
 *   deliveries see the truth once Redis itself does;
 * - it misses a replica that has joined since: webhooks are accepted without waiting and
 *   counted as unreplicated writes until the next reading, which comes within a second then.
 */
export interface ReplicaCount {
  /**
   * The replicas of the master serving `key`, as last read; undefined when unknown. `wanted`:
   * how many the caller asks for; fewer in the reading may be a stale reading, read again.
   */
  of(key: string, wanted: number): number | undefined;
  /** A WAIT came back short: the reading may name a replica that is gone; read again soon. */
  doubt(): void;
  close(): void;
}

/** The soonest a reading is taken again when it is doubted or shows fewer replicas than wanted. */
export const REREAD_MS = 1000;
/** How often a master's own account of its replicas is read (Sentinel, one server): a new replica is seen this late at worst. */
export const ROLE_EVERY_MS = 2000;

/** `onReadFailed` hears a reading Redis refused (not an outage: then the last reading stands until the connection is back). */
export function watchReplicas(client: RedisClient, clock: Clock, onReadFailed: (error: Error) => void = () => undefined): ReplicaCount {
  return client instanceof Cluster ? new SlotTableCount(client, clock) : new RoleCount(client, clock, onReadFailed);
}

/**
 * A Cluster's replicas from ioredis's slot table: `slots[slot]` lists the slot's master, then
 * the replicas CLUSTER SLOTS listed. Redis leaves out a replica once the cluster flags it as
 * failed (about `cluster-node-timeout` after it stops answering), and one that has never
 * copied a byte (a new cluster before its first write). ioredis reads the table again on a
 * MOVED or a lost node; nothing else refreshes it (ioredis 6 has no periodic refresh by
 * default), so a table showing fewer replicas than wanted is read again here, at most once a
 * REREAD_MS per process: a replica that joins is seen within that.
 */
class SlotTableCount implements ReplicaCount {
  private lastAsked = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly cluster: Cluster,
    private readonly clock: Clock,
  ) {}

  of(key: string, wanted: number): number | undefined {
    const nodes = this.cluster.slots[calculateSlot(key)];
    if (!nodes || nodes.length === 0) return undefined;
    const [master, ...others] = nodes;
    // A MOVED rewrites only the first entry: after a promotion the new master may still be
    // listed among "its" replicas until the next refresh.
    const replicas = new Set(others.filter((node) => node !== master)).size;
    if (replicas < wanted || others.length !== replicas) this.refresh();
    return replicas;
  }

  doubt(): void {
    this.refresh();
  }

  close(): void {}

  private refresh(): void {
    const now = this.clock.monotonicMs();
    if (now - this.lastAsked < REREAD_MS) return;
    this.lastAsked = now;
    // ioredis runs one refresh at a time and reports a failed one to no one without a callback:
    // the table stays as it was, and the next doubt asks again.
    this.cluster.refreshSlotsCache();
  }
}

/**
 * A master's own account of its replicas (ROLE lists those connected and streaming), on the
 * connection the webhook writes on: every ROLE_EVERY_MS, after every (re)connection (a
 * Sentinel failover moves the connection to another server), and when doubted. A replica
 * that dies is dropped from ROLE as soon as its socket closes; one that hangs stays until the
 * master's `repl-timeout` (60 s by default), and its WAITs come back short meanwhile.
 */
class RoleCount implements ReplicaCount {
  private replicas: number | undefined;
  private reading = false;
  private lastRead = Number.NEGATIVE_INFINITY;
  private readonly timer: NodeJS.Timeout;
  private readonly onReady = () => void this.read();
  // Another server may answer after the reconnection: nothing is known of it until read.
  private readonly onClose = () => {
    this.replicas = undefined;
  };

  constructor(
    private readonly redis: Redis,
    private readonly clock: Clock,
    private readonly onReadFailed: (error: Error) => void,
  ) {
    this.timer = setInterval(() => void this.read(), ROLE_EVERY_MS);
    this.timer.unref();
    redis.on("ready", this.onReady);
    redis.on("close", this.onClose);
    if (redis.status === "ready") void this.read();
  }

  of(): number | undefined {
    return this.replicas;
  }

  doubt(): void {
    if (this.clock.monotonicMs() - this.lastRead >= REREAD_MS) void this.read();
  }

  close(): void {
    clearInterval(this.timer);
    this.redis.off("ready", this.onReady);
    this.redis.off("close", this.onClose);
  }

  private async read(): Promise<void> {
    if (this.reading || this.redis.status !== "ready") return;
    this.reading = true;
    this.lastRead = this.clock.monotonicMs();
    try {
      this.replicas = onlineReplicas(await this.redis.role());
    } catch (error) {
      if (!isRedisUnavailable(error)) this.onReadFailed(error as Error);
    } finally {
      this.reading = false;
    }
  }
}

/** ROLE's answer: a master's is ["master", offset, [[host, port, offset], ...]]; a replica's says nothing of a master's replicas. */
function onlineReplicas(role: unknown[]): number | undefined {
  const [kind, , replicas] = role;
  return kind === "master" && Array.isArray(replicas) ? replicas.length : undefined;
}
