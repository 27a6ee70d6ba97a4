import { readFileSync } from "node:fs";
import type { Env } from "./env.ts";
import type { HostPort } from "./values.ts";

/**
 * Where Redis is, as operators run it: one server (REDIS_URL; `rediss://` for TLS), a Cluster
 * (seed nodes) or a master watched by Sentinels. Credentials and TLS of a cluster or sentinel
 * set come from their own variables, since there is no single URL to carry them.
 */
export type RedisTarget =
  | { readonly kind: "single"; readonly url: string; readonly tls?: RedisTls | undefined }
  | ({ readonly kind: "cluster"; readonly nodes: readonly HostPort[] } & RedisAuth)
  | ({ readonly kind: "sentinel"; readonly sentinels: readonly HostPort[]; readonly name: string; readonly sentinelPassword?: string | undefined } & RedisAuth);

export interface RedisAuth {
  readonly username?: string | undefined;
  readonly password?: string | undefined;
  readonly tls?: RedisTls | undefined;
}

/** TLS to Redis: on, with the CA bundle that signed the servers' certificates when it is not a public one. */
export interface RedisTls {
  readonly ca?: string | undefined;
}

type RedisVariables = Pick<
  Env,
  | "REDIS_URL"
  | "REDIS_CLUSTER_NODES"
  | "REDIS_SENTINELS"
  | "REDIS_SENTINEL_NAME"
  | "REDIS_USERNAME"
  | "REDIS_PASSWORD"
  | "REDIS_SENTINEL_PASSWORD"
  | "REDIS_TLS"
  | "REDIS_TLS_CA"
>;

/** The one Redis topology the variables name, or problems saying why they name none or two. */
export function redisTarget(e: RedisVariables, problems: string[]): RedisTarget | undefined {
  let ca: string | undefined;
  if (e.REDIS_TLS_CA) {
    try {
      ca = readFileSync(e.REDIS_TLS_CA, "utf8");
    } catch (error) {
      problems.push(`REDIS_TLS_CA cannot be read: ${(error as Error).message}`);
    }
  }
  const tls = e.REDIS_TLS || e.REDIS_TLS_CA ? { ca } : undefined;
  const auth = { username: e.REDIS_USERNAME || undefined, password: e.REDIS_PASSWORD || undefined, tls };
  if (e.REDIS_CLUSTER_NODES && e.REDIS_SENTINELS) {
    problems.push("REDIS_CLUSTER_NODES and REDIS_SENTINELS are both set: Redis is either a Cluster or a Sentinel-watched master, set one");
    return undefined;
  }
  if (e.REDIS_CLUSTER_NODES) return { kind: "cluster", nodes: e.REDIS_CLUSTER_NODES, ...auth };
  if (e.REDIS_SENTINELS) {
    if (!e.REDIS_SENTINEL_NAME) {
      problems.push("REDIS_SENTINEL_NAME is required with REDIS_SENTINELS: the name of the master the Sentinels watch (sentinel monitor <name> …)");
      return undefined;
    }
    return { kind: "sentinel", sentinels: e.REDIS_SENTINELS, name: e.REDIS_SENTINEL_NAME, sentinelPassword: e.REDIS_SENTINEL_PASSWORD || undefined, ...auth };
  }
  if (e.REDIS_SENTINEL_NAME) problems.push("REDIS_SENTINEL_NAME is set but REDIS_SENTINELS is not: name the Sentinels (host:port,…)");
  if (e.REDIS_USERNAME || e.REDIS_PASSWORD) {
    problems.push(
      "REDIS_USERNAME and REDIS_PASSWORD are for a cluster or sentinel set; a single Redis takes them in REDIS_URL (redis://user:password@host:6379)",
    );
  }
  if (e.REDIS_TLS && !e.REDIS_URL.startsWith("rediss:"))
    problems.push("REDIS_TLS is for a cluster or sentinel set; a single Redis says TLS with rediss:// in REDIS_URL");
  return { kind: "single", url: e.REDIS_URL, tls: e.REDIS_URL.startsWith("rediss:") || ca ? { ca } : undefined };
}
