import { Redis } from "ioredis";

/**
 * The web role's connection fails fast (law 2): no offline queue, one try per command, so a
 * Redis outage becomes a 503 in milliseconds and Meta delivers again later. Its writes are
 * coalesced: the webhook's hot path is a command or two per request from many requests.
 */
export function createFailFastRedis(url: string): Redis {
  return coalesceWrites(
    new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: 2000,
      connectTimeout: 2000,
      retryStrategy: (times) => Math.min(times * 200, 2000),
    }),
  );
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

/** Workers block on Redis and must ride out outages: BullMQ requires maxRetriesPerRequest null. */
export function createWorkerRedis(url: string): Redis {
  return new Redis(url, { maxRetriesPerRequest: null, retryStrategy: (times) => Math.min(times * 200, 5000) });
}

/** Redis's own settings that BullMQ depends on in production (DESIGN.md §5). */
export async function redisPersistenceWarnings(redis: Redis): Promise<string[]> {
  const warnings: string[] = [];
  const [, policy] = (await redis.config("GET", "maxmemory-policy")) as [string, string];
  if (policy !== "noeviction") warnings.push(`maxmemory-policy is "${policy}"; BullMQ needs "noeviction" or jobs can vanish`);
  const [, aof] = (await redis.config("GET", "appendonly")) as [string, string];
  if (aof !== "yes") warnings.push("appendonly is off; a Redis restart loses queued jobs and claims");
  return warnings;
}

/** What ioredis and Redis say when Redis is away, restarting or failing over. */
const UNAVAILABLE =
  /Connection is closed|enableOfflineQueue|Command timed out|Reached the max retries per request|ECONNREFUSED|ECONNRESET|ETIMEDOUT|^LOADING|^READONLY|^CLUSTERDOWN|^TRYAGAIN|^MASTERDOWN|^BUSY/;

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
