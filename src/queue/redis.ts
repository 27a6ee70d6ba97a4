import { setTimeout as sleep } from "node:timers/promises";
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from "ioredis";
import type { Clock } from "../clock.ts";
import type { RedisTarget, RedisTls } from "../config/redis.ts";

/** A connection to Redis in any of its topologies; BullMQ and our commands take either. */
export type RedisClient = Redis | Cluster;

/**
 * The web role's connection fails fast (law 2): no offline queue, one try per command, so a
 * Redis outage becomes a 503 in milliseconds and Meta delivers again later. Its writes are
 * coalesced: the webhook's hot path is a command or two per request from many requests.
 */
export function createFailFastRedis(url: string): Redis;
export function createFailFastRedis(target: RedisTarget): RedisClient;
export function createFailFastRedis(target: RedisTarget | string): RedisClient {
  const options: RedisOptions = {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: 2000,
    connectTimeout: 2000,
    retryStrategy: (times) => Math.min(times * 200, 2000),
    // Reconnect (finding the master again), and let this command fail: the webhook answers 503.
    reconnectOnError: (error) => (onReplica(error) ? 1 : false),
  };
  const client = connect(target, options, { enableOfflineQueue: false, clusterRetryStrategy: (times) => Math.min(times * 200, 2000) });
  patientInfo(client);
  // A cluster spreads commands over one socket per node: there is no one stream to cork.
  return client instanceof Redis ? coalesceWrites(client) : client;
}

/**
 * BullMQ asks INFO once, when a queue is made, and keeps the outcome for the queue's life: a
 * failed INFO fails every later add with the same error. On the fail-fast connection one slow
 * answer at start-up (Redis frozen or loading, the event loop stalled past commandTimeout)
 * would so refuse every webhook until a restart, while /readyz saw a healthy connection.
 * INFO alone is asked again until it is answered or the client is closed: nothing on the
 * webhook's path waits on it once the queues are made.
 */
function patientInfo(client: RedisClient): void {
  const info = client.info.bind(client) as (...args: unknown[]) => Promise<string>;
  const patient = async (...args: unknown[]): Promise<string> => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await info(...args);
      } catch (error) {
        if (client.status === "end" || !isRedisUnavailable(error)) throw error;
        await sleep(Math.min(attempt * 200, 2000));
      }
    }
  };
  client.info = patient as RedisClient["info"];
}

/**
 * How long a webhook may wait for the web's connection to come back (law 2): a Redis restart,
 * a dropped socket or the moment after start-up costs a delivery this wait, not a 503.
 */
export const REDIS_READY_GRACE_MS = 2000;

/** Resolves once the connection is ready, however long that takes: the web listens only then. */
export function untilReady(redis: RedisClient): Promise<void> {
  if (redis.status === "ready") return Promise.resolve();
  return new Promise((resolve) => redis.once("ready", () => resolve()));
}

/** Whether the web's connection can take a command now, or soon enough to wait for (watchReadiness). */
export interface RedisReadiness {
  /** True once the connection is ready (at once when it is); false once it has been away `graceMs`. */
  ready(): Promise<boolean>;
  /** Stops watching: the app closes, the connection may outlive it. */
  stop(): void;
}

/**
 * A connection that is (re)connecting is waited for until `graceMs` after it was lost, then
 * not at all: a delivery during a blip is accepted once Redis is back, and one during an
 * outage that has lasted longer is refused at once, so Meta delivers it again later. Not
 * BullMQ's wait: a queue whose connection is away waits for it without a bound.
 */
export function watchReadiness(redis: RedisClient, graceMs: number, clock: Clock): RedisReadiness {
  const now = () => clock.now().getTime();
  let lostAt = redis.status === "ready" ? undefined : now();
  // One promise for every delivery waiting on the same reconnection: one listener, not one each.
  let back: { promise: Promise<void>; resolve: () => void } | undefined;
  const onReady = () => {
    lostAt = undefined;
    back?.resolve();
    back = undefined;
  };
  const onLost = () => {
    lostAt ??= now();
  };
  redis.on("ready", onReady);
  redis.on("close", onLost);
  return {
    async ready() {
      if (redis.status === "ready") return true;
      lostAt ??= now(); // its "close" event is still on its way (ioredis emits on the next tick)
      const leftMs = lostAt + graceMs - now();
      if (leftMs <= 0) return false;
      if (!back) {
        let resolve = () => {};
        const promise = new Promise<void>((r) => {
          resolve = r;
        });
        back = { promise, resolve };
      }
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), leftMs);
      });
      try {
        return await Promise.race([back.promise.then(() => true), late]);
      } finally {
        clearTimeout(timer);
      }
    },
    stop() {
      redis.off("ready", onReady);
      redis.off("close", onLost);
    },
  };
}

/** Workers block on Redis and must ride out outages: BullMQ requires maxRetriesPerRequest null. */
export function createWorkerRedis(url: string): Redis;
export function createWorkerRedis(target: RedisTarget): RedisClient;
export function createWorkerRedis(target: RedisTarget | string): RedisClient {
  return connect(
    target,
    {
      maxRetriesPerRequest: null,
      retryStrategy: (times) => Math.min(times * 200, 5000),
      // Reconnect, finding the master again, and send the refused command there.
      reconnectOnError: (error) => (onReplica(error) ? 2 : false),
    },
    { clusterRetryStrategy: (times) => Math.min(times * 200, 5000) },
  );
}

/**
 * A server that refuses writes as a replica was our master until a failover demoted it (a
 * master back from a partition or a restart, or a managed Redis's planned switch). Staying
 * connected would refuse every write for good: nothing but a reconnect asks who is master now.
 */
const onReplica = (error: Error): boolean => error.message.startsWith("READONLY");

/** ioredis's TLS option for a target that asks for TLS, with its CA bundle when it names one. */
const tlsOf = (target: { tls?: RedisTls | undefined }): Pick<RedisOptions, "tls"> => (target.tls ? { tls: { ca: target.tls.ca } } : {});

/**
 * One client for the target. A cluster's nodes each get `options` (and the credentials);
 * a sentinel set is asked for the current master, and asked again when a connection to it
 * drops or the master refuses a write as a replica (`onReplica`), so the client follows a
 * promoted replica within the Sentinels' own failover time.
 *
 * Not ioredis's `failoverDetector`: its `+switch-master` handler stops the connector itself,
 * and when that lands while the client is still reconnecting (the lost master refusing, the
 * Sentinels not yet agreed), ioredis ends the client for good. Every connection of both
 * worker processes ended so in a storm test on a loaded machine: jobs waited, none was taken.
 */
function connect(target: RedisTarget | string, options: RedisOptions, cluster: Omit<ClusterOptions, "redisOptions">): RedisClient {
  if (typeof target === "string") return new Redis(target, options);
  switch (target.kind) {
    case "single":
      return new Redis(target.url, { ...options, ...tlsOf(target) });
    case "cluster":
      return new Cluster(
        target.nodes.map(({ host, port }) => ({ host, port })),
        {
          ...cluster,
          redisOptions: { ...options, username: target.username, password: target.password, ...tlsOf(target) },
        },
      );
    case "sentinel":
      return new Redis({
        ...options,
        sentinels: target.sentinels.map(({ host, port }) => ({ host, port })),
        name: target.name,
        username: target.username,
        password: target.password,
        sentinelPassword: target.sentinelPassword,
        ...tlsOf(target),
        // The Sentinels themselves speak TLS too (managed Redis offers no plain port).
        ...(target.tls ? { enableTLSForSentinelMode: true, sentinelTLS: { ca: target.tls.ca } } : {}),
      });
  }
}

/** Commands that leave together at most: a webhook message is two (its read and its add). */
const WRITE_BATCH_COMMANDS = 8;

/**
 * Commands issued in one turn of the event loop leave in a few writes instead of one write
 * each: the socket is corked at the turn's first command and uncorked by setImmediate, which
 * runs before the loop next waits for I/O, so no command waits longer than the rest of the
 * turn. A socket write costs more than the command (~5 µs of CPU each on our machines, and
 * as much again in Redis). Every WRITE_BATCH_COMMANDS commands the batch leaves at once,
 * though: with one write per turn, Redis sat idle while the app parsed a burst of requests
 * and the app sat idle while Redis ran them; sending every 4 messages lets the two overlap
 * (+30-40 % webhooks/s in the ingest bench, at the same CPU per request). ioredis's own
 * auto-pipelining batches too, but builds a Pipeline (copying every BullMQ script onto it)
 * per batch and keeps one batch in flight: it measured slower.
 */
function coalesceWrites(redis: Redis): Redis {
  const send = redis.sendCommand.bind(redis);
  let corked: Redis["stream"] | undefined;
  let waiting = 0;
  const flush = () => {
    const stream = corked;
    corked = undefined;
    stream?.uncork();
  };
  redis.sendCommand = ((...args: Parameters<Redis["sendCommand"]>) => {
    if (corked === undefined && redis.stream?.writable) {
      corked = redis.stream;
      corked.cork();
      waiting = 0;
      setImmediate(flush);
    }
    const sent = send(...args);
    if (corked !== undefined && ++waiting >= WRITE_BATCH_COMMANDS) {
      corked.uncork(); // writes what is waiting; the turn's later commands wait again
      corked.cork();
      waiting = 0;
    }
    return sent;
  }) as Redis["sendCommand"];
  return redis;
}

/** Redis's own settings that BullMQ depends on in production (DESIGN.md §5). */
export async function redisPersistenceWarnings(redis: RedisClient): Promise<string[]> {
  // In a cluster each master keeps its own slots' jobs: every one of them must be set so.
  const servers = redis instanceof Cluster ? redis.nodes("master") : [redis];
  const warnings: string[] = [];
  for (const server of servers) {
    const where = redis instanceof Cluster ? ` on ${server.options.host}:${server.options.port}` : "";
    const [, policy] = (await server.config("GET", "maxmemory-policy")) as [string, string];
    if (policy !== "noeviction") warnings.push(`maxmemory-policy is "${policy}"${where}; BullMQ needs "noeviction" or jobs can vanish`);
    const [, aof] = (await server.config("GET", "appendonly")) as [string, string];
    if (aof !== "yes") warnings.push(`appendonly is off${where}; a Redis restart loses queued jobs and claims`);
  }
  return warnings;
}

/** What ioredis and Redis say when Redis is away, restarting or failing over. */
const UNAVAILABLE =
  /Connection is closed|Failed to refresh slots cache|None of startup nodes is available|All sentinels are unreachable|Too many Cluster redirections|enableOfflineQueue|Command timed out|Reached the max retries per request|ECONNREFUSED|ECONNRESET|ETIMEDOUT|^LOADING|^READONLY|^CLUSTERDOWN|^TRYAGAIN|^MASTERDOWN|^BUSY/;

/**
 * True when an error says Redis is unreachable (a blip, a restart, a failover), not that a
 * command was wrong: not the message's fault, so its job waits rather than spending attempts.
 */
export function isRedisUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error.name === "MaxRetriesPerRequestError") return true;
  const code = (error as { code?: unknown }).code;
  return (typeof code === "string" && UNAVAILABLE.test(code)) || UNAVAILABLE.test(error.message);
}
