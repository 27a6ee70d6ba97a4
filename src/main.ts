import { existsSync } from "node:fs";
import { buildApp, buildMetricsApp } from "./app.ts";
import { ConfigError, loadConfig, type Config } from "./config.ts";
import { createDb } from "./db/client.ts";
import { migrate } from "./db/migrate.ts";
import { createMetrics } from "./http/metrics.ts";
import { startConfiguredWorkers, type Workers } from "./jobs/workers.ts";
import { createLogger, type Logger } from "./logger.ts";
import { closeQueues, createQueues } from "./queue/queues.ts";
import { createFailFastRedis, createWorkerRedis, redisPersistenceWarnings } from "./queue/redis.ts";

/**
 * The entry point, and the only module that reads process.env, opens ports and traps signals.
 *   tsx src/main.ts all --migrate   (npm start)   web + worker in one process
 *   tsx src/main.ts web | worker                  one role each, for scaling out
 *   tsx src/main.ts migrate                       apply migrations and exit
 */

type Role = "all" | "web" | "worker" | "migrate";

async function main(): Promise<void> {
  // A local .env is a convenience for one-machine setups; real deployments set the environment.
  if (existsSync(".env")) process.loadEnvFile(".env");
  const role = (process.argv[2] ?? "all") as Role;
  if (!["all", "web", "worker", "migrate"].includes(role)) {
    console.error(`unknown role "${role}": use all, web, worker or migrate`);
    process.exit(2);
  }

  let config: Config;
  try {
    config = loadConfig(process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(error.message);
      process.exit(1);
    }
    throw error;
  }
  const logger = createLogger({ level: config.logLevel });

  if (role === "migrate" || process.argv.includes("--migrate")) {
    const result = await migrate(config.databaseUrl);
    logger.info({ event: "db.migrated", applied: result.applied, alreadyApplied: result.alreadyApplied.length }, "migrations applied");
    if (role === "migrate") return;
  }

  await run(role, config, logger);
}

async function run(role: Exclude<Role, "migrate">, config: Config, logger: Logger): Promise<void> {
  const db = createDb(config.databaseUrl, { poolSize: config.databasePoolSize });
  const redis = createFailFastRedis(config.redisUrl);
  redis.on("error", (error) => logger.warn({ event: "redis.error", err: error }, "redis connection error"));
  const queues = createQueues(redis, { prefix: config.queuePrefix, attempts: config.jobs.attempts }, (error) =>
    logger.warn({ event: "queue.error", err: error }, "queue connection error"),
  );

  const metrics = createMetrics({ defaultMetrics: true });
  const app = role !== "worker" ? buildApp({ config, logger, redis, queues, db, metrics }) : undefined;
  const metricsApp = config.metrics.port !== 0 ? buildMetricsApp({ logger, queues, db, metrics }) : undefined;
  let workers: Workers | undefined;
  let workerRedis: ReturnType<typeof createWorkerRedis> | undefined;

  if (role !== "web") {
    workerRedis = createWorkerRedis(config.redisUrl);
    // It reconnects by itself and the jobs wait for it; say so once per error, not on stderr.
    workerRedis.on("error", (error) => logger.warn({ event: "redis.error", role: "worker", err: error }, "worker's redis connection error"));
    workers = startConfiguredWorkers(config, { db, logger, metrics, connection: workerRedis });
    redisPersistenceWarnings(workerRedis).then(
      (warnings) => warnings.forEach((w) => logger.warn({ event: "redis.config_warning" }, w)),
      (error) => logger.warn({ event: "redis.config_unreadable", err: error }, "could not read Redis settings (CONFIG GET refused?)"),
    );
    logger.info({ event: "worker.started", concurrency: config.jobs.replyConcurrency }, "worker started");
  }
  if (app) await app.listen({ port: config.port, host: config.host });
  if (metricsApp) await metricsApp.listen({ port: config.metrics.port, host: config.metrics.host });

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ event: "shutdown.start", signal }, "shutting down");
    const hardStop = setTimeout(() => {
      logger.error({ event: "shutdown.forced" }, "shutdown took too long; exiting");
      process.exit(1);
    }, config.shutdownTimeoutMs + 5000);
    hardStop.unref();
    try {
      await app?.close(); // stop taking webhooks first; in-flight requests finish
      await workers?.close(config.shutdownTimeoutMs);
      await metricsApp?.close(); // scraped until the workers are done: the drain shows
      await closeQueues(queues);
      await Promise.allSettled([redis.quit(), workerRedis?.quit(), db.$disconnect()]);
      logger.info({ event: "shutdown.done" }, "stopped");
      process.exit(0);
    } catch (error) {
      logger.error({ event: "shutdown.error", err: error }, "error during shutdown");
      process.exit(1);
    }
  };
  process.on("SIGTERM", () => void shutdown("SIGTERM"));
  process.on("SIGINT", () => void shutdown("SIGINT"));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
