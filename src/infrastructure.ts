import { isDatabaseUnavailable } from "./db/client.ts";
import { isRedisUnavailable } from "./queue/redis.ts";

/**
 * Our own infrastructure away (Postgres or Redis): nobody's fault, so what met it waits and is
 * done again once it is back (law 6), by the job's wait (src/jobs/policy.ts) or the reconciler.
 */
export function isInfrastructureFailure(error: unknown): boolean {
  return isDatabaseUnavailable(error) || isRedisUnavailable(error);
}
