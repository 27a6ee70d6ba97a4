import { randomBytes } from "node:crypto";
import type { Queue } from "bullmq";
import type { FastifyInstance, LightMyRequestResponse } from "fastify";
import type { Redis } from "ioredis";
import pg from "pg";
import pino from "pino";
import { type AppDeps, buildApp } from "../../src/app.ts";
import { createDb, type Db } from "../../src/db/client.ts";
import { migrate } from "../../src/db/migrate.ts";
import { startConfiguredWorkers, type Workers } from "../../src/jobs/workers.ts";
import type { Logger } from "../../src/logger.ts";
import { createMetrics, type Metrics } from "../../src/metrics/metrics.ts";
import { closeQueues, createQueues, type Queues } from "../../src/queue/queues.ts";
import { createFailFastRedis, createWorkerRedis } from "../../src/queue/redis.ts";
import { loadSettings, type Settings } from "../../src/settings.ts";
import { signMetaBody } from "../../src/webhook/signature.ts";
import { FakeAnthropic } from "./fake-anthropic.ts";
import { FakeGraph } from "./fake-graph.ts";
import { ledgerHolds, readLedger } from "./ledger-reading.ts";

/**
 * One isolated copy of the whole system for a test: its own Postgres schema, its own Redis
 * key prefix (hash-tagged, like production), real BullMQ workers, and local fakes for Meta
 * and Anthropic reached over HTTP. Nothing of ours is mocked.
 */

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL ?? "postgresql://postgres@127.0.0.1:5432/postgres";
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
export const TEST_APP_SECRET = "test-app-secret";
export const TEST_ADMIN_TOKEN = "test-admin-token-0123456789";
export const TEST_VERIFY_TOKEN = "test-verify-token";

export function testEnv(overrides: Record<string, string> = {}): Record<string, string> {
  return {
    WHATSAPP_VERIFY_TOKEN: TEST_VERIFY_TOKEN,
    WHATSAPP_APP_SECRET: TEST_APP_SECRET,
    WHATSAPP_ACCESS_TOKEN: "test-access-token",
    ANTHROPIC_API_KEY: "test-anthropic-key",
    DATABASE_URL: TEST_DATABASE_URL,
    REDIS_URL: TEST_REDIS_URL,
    ADMIN_TOKEN: TEST_ADMIN_TOKEN,
    LOG_LEVEL: "silent",
    REPLY_DEBOUNCE_MS: "50",
    RETRY_BASE_DELAY_MS: "20",
    RETRY_MAX_DELAY_MS: "200",
    JOB_ATTEMPTS: "4",
    GRAPH_TIMEOUT_MS: "2000",
    ANTHROPIC_TIMEOUT_MS: "5000",
    // Tests of the other laws count every send to Meta; the holding reply after a dead letter
    // (law 14, on by default) has its tests of its own (test/holding-reply.test.ts).
    HOLDING_REPLY: "",
    // Two test files run at once, some with a worker process beside them: stay well under
    // Postgres's 100 connections.
    DATABASE_POOL_SIZE: "10",
    // Processes a test starts would all want the default metrics port; a test that wants the
    // listener picks a free port.
    METRICS_PORT: "0",
    ...overrides,
  };
}

export interface HarnessOptions {
  env?: Record<string, string>;
  /** How many independent worker processes to run (each with its own connections). */
  workers?: number;
  /** Where the system's logs go (default: nowhere, or TEST_LOG_LEVEL to stdout). */
  logger?: Logger;
  /** A Postgres server of the test's own (test/support/private-postgres.ts), instead of the shared one. */
  databaseUrl?: string;
  /**
   * The URL the system uses, given the direct one its schema is migrated on: through PgBouncer,
   * say (the migration runner needs a session of its own; the roles do not).
   */
  databaseUrlForRoles?: (direct: string) => Promise<string>;
  /**
   * false: closing does not hold the ledger to what the fake Anthropic billed, because
   * something that keeps no ledger asks Claude (the bench's floor worker, bench/floor-worker.ts).
   */
  ledgerChecked?: boolean;
}

export interface Harness {
  /** The environment this system runs with, for starting a real worker process beside it. */
  env: Record<string, string>;
  config: Settings;
  app: FastifyInstance;
  db: Db;
  redis: Redis;
  queues: Queues;
  /** The registry the app and the workers count in; serve it with buildMetricsApp. */
  metrics: Metrics;
  graph: FakeGraph;
  claude: FakeAnthropic;
  schema: string;
  prefix: string;
  /** Starts `count` independent worker sets (default: as many as the harness was built with, at least one). */
  startWorkers(count?: number): void;
  stopWorkers(): Promise<void>;
  deliver(body: string | Buffer, headers?: Record<string, string>): Promise<LightMyRequestResponse>;
  close(): Promise<void>;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const id = randomBytes(5).toString("hex");
  const schema = `t_${id}`;
  const prefix = `{t-${id}}`;
  const [graph, claude] = await Promise.all([new FakeGraph().start(), new FakeAnthropic().start()]);
  const direct = withSchema(options.databaseUrl ?? TEST_DATABASE_URL, schema);
  const env = testEnv({
    GRAPH_API_BASE_URL: graph.url,
    ANTHROPIC_BASE_URL: claude.url,
    QUEUE_PREFIX: prefix,
    DATABASE_URL: options.databaseUrlForRoles ? await options.databaseUrlForRoles(direct) : direct,
    ...options.env,
  });
  const config = loadSettings(env);
  await migrate(direct);
  const db = createDb(config.databaseUrl, { poolSize: config.databasePoolSize });
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" });
  if (config.redis.kind !== "single") throw new Error("the harness runs on one Redis (REDIS_URL)");
  const redisUrl = config.redis.url;
  const redis = createFailFastRedis(redisUrl);
  redis.on("error", () => undefined);
  await waitForReady(redis);
  const queues = createQueues(redis, { prefix, attempts: config.jobs.attempts });
  const metrics = createMetrics();
  const app = buildApp({ config, logger, redis, queues, db, metrics });
  await app.ready();

  let running: { workers: Workers; connection: Redis }[] = [];
  const harness: Harness = {
    env,
    config,
    app,
    db,
    redis,
    queues,
    metrics,
    graph,
    claude,
    schema,
    prefix,
    startWorkers(count = Math.max(1, options.workers ?? 1)) {
      for (let i = 0; i < count; i++) {
        const connection = createWorkerRedis(redisUrl);
        connection.on("error", () => undefined); // it reconnects by itself; tests that kill Redis expect these
        const workers = startConfiguredWorkers(config, { db, logger, metrics, connection });
        running.push({ workers, connection });
      }
    },
    async stopWorkers() {
      await Promise.all(
        running.map(async (r) => {
          await r.workers.close(5000);
          await r.connection.quit().catch(() => undefined);
        }),
      );
      running = [];
    },
    deliver(body, headers = {}) {
      const payload = typeof body === "string" ? Buffer.from(body, "utf8") : body;
      return app.inject({
        method: "POST",
        url: "/webhook",
        payload,
        headers: {
          "content-type": "application/json",
          "x-hub-signature-256": signMetaBody(payload, TEST_APP_SECRET),
          ...headers,
        },
      });
    },
    async close() {
      await harness.stopWorkers();
      // Every test that made Claude calls checks the ledger against what was billed (issue 32.6);
      // a database a test took away (a private Postgres stopped) has nothing to say.
      const ledger = options.ledgerChecked === false ? undefined : await readLedger(db, claude).catch(() => undefined);
      await app.close();
      await closeQueues(queues);
      await deleteKeys(redis, prefix).catch(() => undefined);
      await redis.quit().catch(() => undefined);
      await db.$disconnect();
      await dropSchema(schema, options.databaseUrl);
      await Promise.all([graph.stop(), claude.stop()]);
      if (ledger && !ledgerHolds(ledger)) throw new Error(`the ledger of Claude calls does not hold what Anthropic billed: ${JSON.stringify(ledger)}`);
    },
  };
  harness.startWorkers(options.workers ?? 1);
  return harness;
}

/**
 * Another web process beside the harness's: the same settings, Redis, queues and database, a
 * silent log and metrics of its own, and whatever `options` adds (a shorter check, a grace).
 */
export function anotherWeb(h: Harness, options: Partial<AppDeps> = {}): FastifyInstance {
  return buildApp({ config: h.config, logger: pino({ level: "silent" }), redis: h.redis, queues: h.queues, db: h.db, metrics: createMetrics(), ...options });
}

export function withSchema(databaseUrl: string, schema: string): string {
  const url = new URL(databaseUrl);
  url.searchParams.set("schema", schema);
  return url.toString();
}

export async function waitForReady(redis: Redis): Promise<void> {
  if (redis.status === "ready") return;
  await new Promise<void>((resolve, reject) => {
    redis.once("ready", resolve);
    setTimeout(() => reject(new Error("redis not ready")), 5000);
  });
}

export async function deleteKeys(redis: Redis, prefix: string): Promise<void> {
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 500);
    if (keys.length) await redis.del(...keys);
    cursor = next;
  } while (cursor !== "0");
}

export async function dropSchema(schema: string, databaseUrl = TEST_DATABASE_URL): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  await client.end();
}

/** Polls until `check` returns a truthy value; fails the test with `what` after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T> | T, what: string, timeoutMs = 10_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * When BullMQ will run a delayed job, as it recorded it: the job's score in the queue's delayed
 * set is that time (epoch ms) × 0x1000 plus a tie-breaker (BullMQ's getDelayedScore). Undefined
 * when the job is not delayed. A test relates what happened to this, not to its own stopwatch.
 */
export async function delayedUntil(redis: Redis, queue: Queue, jobId: string): Promise<number | undefined> {
  const score = await redis.zscore(queue.toKey("delayed"), jobId);
  return score === null ? undefined : Math.floor(Number(score) / 0x1000);
}
