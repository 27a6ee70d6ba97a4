import { buildApp, buildMetricsApp } from "../src/app.ts";
import { createDb } from "../src/db/client.ts";
import { startConfiguredWorkers } from "../src/jobs/workers.ts";
import { createLogger } from "../src/logger.ts";
import { createMetrics } from "../src/metrics/metrics.ts";
import { closeQueues, createQueues } from "../src/queue/queues.ts";
import { createFailFastRedis, createWorkerRedis } from "../src/queue/redis.ts";
import { loadSettings } from "../src/settings.ts";

/**
 * The layout `npm start` had before issue 10, kept as the isolation bench's baseline
 * (bench/isolation.ts): the web and the workers in one process, on one event loop, the way
 * src/main.ts ran role `all` then. Configured by the environment like src/main.ts.
 */

const config = loadSettings(process.env);
const logger = createLogger({ level: config.logLevel });
const db = createDb(config.databaseUrl, { poolSize: config.databasePoolSize });
const redis = createFailFastRedis(config.redis);
redis.on("error", (error) => logger.warn({ event: "redis.error", err: error }, "redis connection error"));
const queues = createQueues(redis, { prefix: config.queuePrefix, attempts: config.jobs.attempts });
const metrics = createMetrics({ defaultMetrics: true });
const app = buildApp({ config, logger, redis, queues, db, metrics });
const connection = createWorkerRedis(config.redis);
connection.on("error", (error) => logger.warn({ event: "redis.error", role: "worker", err: error }, "worker's redis connection error"));
const workers = startConfiguredWorkers(config, { db, logger, metrics, connection });
const metricsApp = buildMetricsApp({ logger, queues, db, metrics });
await app.listen({ port: config.port, host: config.host });
// bench/isolation.ts gives every server its METRICS_PORT.
if (config.metrics.listen.kind === "fixed") await metricsApp.listen({ port: config.metrics.listen.port, host: config.metrics.host });

process.once("SIGTERM", () => {
  void (async () => {
    await app.close();
    await workers.close(config.shutdownTimeoutMs);
    await metricsApp.close();
    await closeQueues(queues);
    await Promise.allSettled([redis.quit(), connection.quit(), db.$disconnect()]);
    process.exit(0);
  })();
});
