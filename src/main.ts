import { existsSync, openSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";
import { buildApp, buildMetricsApp } from "./app.ts";
import { type Clock, systemClock } from "./clock.ts";
import { ConfigError } from "./config/config.ts";
import { createDb } from "./db/client.ts";
import { migrate } from "./db/migrate.ts";
import { createLogger, type Logger } from "./logger.ts";
import { createMetrics } from "./metrics/metrics.ts";
import { drainOnce, flushTraces, startConfiguredTracing, startWorkerRole } from "./process/lifecycle.ts";
import { listenForScrapes, StartupError } from "./process/metrics-port.ts";
import { forkWorkerChild, WORKER_CHILD_FLAG } from "./process/scheduling.ts";
import { superviseWorkerChild } from "./process/supervisor.ts";
import { runWorkerChild, SHUTDOWN_GRACE_MS } from "./process/worker-child.ts";
import { closeQueues, createQueues } from "./queue/queues.ts";
import { createFailFastRedis, untilReady } from "./queue/redis.ts";
import { loadSettings, type Settings } from "./settings.ts";
import type { Tracing } from "./tracing/tracing.ts";

/**
 * The entry point, and the only module that reads process.env, opens ports and traps signals.
 * Compiled to dist/main.js by npm run build, and run by plain node:
 *   node dist/main.js all --migrate   (npm start)   web here, workers in a child process
 *   node dist/main.js web | worker                  one role each, for scaling out
 *   node dist/main.js migrate                       apply migrations and exit
 */

type Role = "all" | "web" | "worker" | "migrate";

/** The one clock, handed down to everything that reads the time (src/clock.ts). */
const clock: Clock = systemClock;

async function main(): Promise<void> {
  // A build beside us (scripts/build.mjs) swaps dist to a new folder and removes an old one
  // only once no process holds a file of it open: this holds our own, so the folder we run
  // from (the worker child forked again after a crash) stays for as long as we run.
  openSync(fileURLToPath(import.meta.url), "r");
  const role = (process.argv[2] ?? "all") as Role;
  if (role === "worker" && process.argv.includes(WORKER_CHILD_FLAG)) return workerChild();

  // A local .env is a convenience for one-machine setups; real deployments set the environment.
  if (existsSync(".env")) process.loadEnvFile(".env");
  if (!["all", "web", "worker", "migrate"].includes(role)) {
    console.error(`unknown role "${role}": use all, web, worker or migrate`);
    process.exit(2);
  }

  let config: Settings;
  try {
    config = loadSettings(process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      console.error(error.message);
      process.exit(1);
    }
    throw error;
  }
  const logger = createLogger({ level: config.logLevel, traceIds: config.tracing !== undefined && role !== "migrate" });
  if (role !== "migrate") warnOfToolsOnPrivateNetworks(config, logger);

  if (role === "migrate" || process.argv.includes("--migrate")) {
    const result = await migrate(config.databaseUrl);
    logger.info({ event: "db.migrated", applied: result.applied, alreadyApplied: result.alreadyApplied.length }, "migrations applied");
    if (role === "migrate") return;
  }

  if (role === "all") await runAll(config, logger);
  else await runRole(role, config, logger);
}

/** One role in this process, with the metrics listener. */
async function runRole(role: "web" | "worker", config: Settings, logger: Logger): Promise<void> {
  const traces = startConfiguredTracing(config, role, logger);
  const tracing = traces?.tracing;
  const web = connectWeb(config, logger, tracing);
  const metrics = createMetrics({ defaultMetrics: true });
  const app = role === "web" ? buildApp({ config, logger, redis: web.redis, queues: web.queues, db: web.db, metrics, tracing, clock }) : undefined;
  const metricsApp = metricsListener(config, { logger, queues: web.queues, db: web.db, metrics, clock });
  // First: a METRICS_PORT that is taken stops the start before a job is taken.
  if (metricsApp) await listenForScrapes(metricsApp, config.metrics, logger);
  const worker = role === "worker" ? startWorkerRole(config, { logger, db: web.db, metrics, clock, tracing }) : undefined;

  let stopping = false;
  stopOnSignals(logger, config.shutdownTimeoutMs + SHUTDOWN_GRACE_MS, async () => {
    stopping = true;
    await app?.close(); // stop taking webhooks first; in-flight requests finish
    await worker?.close();
    await metricsApp?.close(); // scraped until the workers are done: the drain shows
    await web.close();
    await flushTraces(traces, logger);
    return true;
  });
  if (app) {
    sayWhichNumbersAreServed(config, logger);
    await listenOnceRedisIsReady(app, web, config, logger, () => stopping);
  }
}

/**
 * npm start: the web on this process's event loop and the workers in a child process, so a
 * webhook's ack never waits behind job code. One metrics listener serves both (each process's
 * series carry `role`), and a worker child that dies is started again (src/process/supervisor.ts).
 */
async function runAll(config: Settings, logger: Logger): Promise<void> {
  // This process is the web; the worker child starts tracing of its own (runWorkerChild).
  const traces = startConfiguredTracing(config, "web", logger);
  const tracing = traces?.tracing;
  const web = connectWeb(config, logger, tracing);
  const metrics = createMetrics({ defaultMetrics: true });
  metrics.registry.setDefaultLabels({ role: "web" });
  const worker = superviseWorkerChild({ fork: () => forkWorkerChild(fileURLToPath(import.meta.url)), config, logger, metrics, clock });
  const otherProcesses = () => worker.collectMetrics();
  const app = buildApp({ config, logger, redis: web.redis, queues: web.queues, db: web.db, metrics, otherProcesses, tracing, clock });
  const metricsApp = metricsListener(config, { logger, queues: web.queues, db: web.db, metrics, otherProcesses, clock });
  if (metricsApp) await listenForScrapes(metricsApp, config.metrics, logger);
  worker.start();

  let stopping = false;
  // The child's own exit deadline is SHUTDOWN_TIMEOUT_MS + grace; ours comes after it.
  stopOnSignals(logger, config.shutdownTimeoutMs + 2 * SHUTDOWN_GRACE_MS, async () => {
    stopping = true;
    await app.close(); // first: no webhook is taken after this, in-flight requests finish
    const drained = await worker.stop(); // then the child finishes its active jobs and exits
    await metricsApp?.close(); // scraped until the child is done: the drain shows
    await web.close();
    await flushTraces(traces, logger);
    return drained;
  });
  sayWhichNumbersAreServed(config, logger);
  await listenOnceRedisIsReady(app, web, config, logger, () => stopping);
}

/** The metrics listener, unless METRICS_PORT=0 turned it off; with METRICS_TOKEN it asks for its bearer. */
function metricsListener(config: Settings, deps: Omit<Parameters<typeof buildMetricsApp>[0], "bearerToken">): FastifyInstance | undefined {
  return config.metrics.listen.kind === "off" ? undefined : buildMetricsApp({ ...deps, bearerToken: config.metrics.token });
}

/**
 * The web port opens once its Redis connection is ready (law 2): a webhook taken before then
 * could not be enqueued, and a verify GET answered meanwhile would tell Meta all is well.
 * Waits as long as it takes; a shutdown meanwhile means it never listens.
 */
async function listenOnceRedisIsReady(
  app: FastifyInstance,
  web: ReturnType<typeof connectWeb>,
  config: Settings,
  logger: Logger,
  stopping: () => boolean,
): Promise<void> {
  if (web.redis.status !== "ready") {
    const since = clock.monotonicMs();
    logger.info({ event: "web.waiting_for_redis", status: web.redis.status }, "waiting for Redis before taking webhooks");
    await untilReady(web.redis);
    logger.info({ event: "web.redis_ready", waitedMs: Math.round(clock.monotonicMs() - since) }, "Redis is ready; taking webhooks");
  }
  // The queues' start waits out Redis being slow or away (patientInfo); one that failed
  // otherwise (a Redis too old for BullMQ) never enqueues, so the supervisor hears it now.
  try {
    await web.queuesReady();
  } catch (error) {
    if (stopping()) return; // closed under them
    throw new StartupError(`the queues could not start (${String(error)}); start the web again`);
  }
  if (stopping()) return;
  await app.listen({ port: config.port, host: config.host });
}

/**
 * `all`'s worker child (src/process/worker-child.ts). systemd's default KillMode signals the
 * parent and the child at once (a terminal's Ctrl-C does not: the child leads a session of its
 * own); the parent decides the order, web first, so the child waits for its word.
 */
function workerChild(): void {
  const child = runWorkerChild(clock);
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => child.logger()?.info({ event: "shutdown.deferred", signal }, "the parent stops the worker after the web"));
  }
}

/**
 * The web's one word on which business numbers it answers. Without PHONE_NUMBERS_FILE it is
 * every number Meta delivers for, with our token and our Claude key: an operator should know.
 */
function sayWhichNumbersAreServed(config: Settings, logger: Logger): void {
  if (config.servedNumbers === "every") {
    logger.warn({ event: "webhook.serving_every_number" }, "PHONE_NUMBERS_FILE is not set: every business number Meta delivers for is answered");
  } else {
    const numbers = [...config.servedNumbers];
    logger.info(
      { event: "webhook.serving_numbers", numbers },
      `answering ${numbers.length} business number(s) from PHONE_NUMBERS_FILE; others are acknowledged and dropped`,
    );
  }
}

/**
 * A business tool with allowPrivateNetwork may reach this host and its network (Redis, Postgres,
 * a cloud's metadata service), which the SSRF guard otherwise refuses: that is the operator's
 * choice, said at every start so it is never forgotten.
 */
function warnOfToolsOnPrivateNetworks(config: Settings, logger: Logger): void {
  for (const [number, tools] of config.businessTools) {
    for (const tool of tools) {
      if (!tool.allowPrivateNetwork) continue;
      const host = new URL(tool.request.url).host;
      logger.warn(
        { event: "tools.private_network_allowed", number, tool: tool.name, host },
        `tool ${tool.name} of number ${number} may call private and loopback addresses (allowPrivateNetwork): ${host}`,
      );
    }
  }
}

/** Postgres and the web's fail-fast Redis with its queue handles (the web, and the metrics gauges). */
function connectWeb(config: Settings, logger: Logger, tracing: Tracing | undefined) {
  const db = createDb(config.databaseUrl, { poolSize: config.databasePoolSize });
  const redis = createFailFastRedis(config.redis);
  redis.on("error", (error) => logger.warn({ event: "redis.error", err: error }, "redis connection error"));
  const queues = createQueues(redis, { prefix: config.queuePrefix, attempts: config.jobs.attempts, telemetry: tracing?.queues }, (error) =>
    logger.warn({ event: "queue.error", err: error }, "queue connection error"),
  );
  return {
    db,
    redis,
    queues,
    /** BullMQ's queues, which check Redis's version once connected: resolves once they did, rejects on a version BullMQ refuses. */
    async queuesReady() {
      await Promise.all(Object.values(queues).map((queue) => queue.waitUntilReady()));
    },
    async close() {
      await closeQueues(queues);
      await Promise.allSettled([redis.quit(), db.$disconnect()]);
    },
  };
}

/** SIGTERM and SIGINT run `stop` once; see drainOnce. */
function stopOnSignals(logger: Logger, hardStopMs: number, stop: () => Promise<boolean>): void {
  const shutdown = drainOnce(logger, hardStopMs, stop);
  process.on("SIGTERM", () => shutdown({ signal: "SIGTERM" }));
  process.on("SIGINT", () => shutdown({ signal: "SIGINT" }));
}

main().catch((error: unknown) => {
  console.error(error instanceof StartupError ? error.message : error);
  process.exit(1);
});
