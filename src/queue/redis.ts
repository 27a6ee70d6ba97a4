import { Redis } from "ioredis";

/**
 * The web role's connection fails fast (law 2): no offline queue, one try per command, so a
 * Redis outage becomes a 503 in milliseconds and Meta delivers again later.
 */
export function createFailFastRedis(url: string): Redis {
  return new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: 2000,
    connectTimeout: 2000,
    retryStrategy: (times) => Math.min(times * 200, 2000),
  });
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
