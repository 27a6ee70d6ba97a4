import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";
import { buildApp, buildMetricsApp } from "./app.ts";
import { ConfigError, DEFAULT_METRICS_PORTS } from "./config/config.ts";
import { createDb, type Db } from "./db/client.ts";
import { migrate } from "./db/migrate.ts";
import { startConfiguredWorkers } from "./jobs/workers.ts";
import { createLogger, type Logger } from "./logger.ts";
import { createMetrics, type Metrics } from "./metrics/metrics.ts";
import { forkWorkerChild, WORKER_CHILD_FLAG, WORKER_CHILD_NICENESS, yieldTheCpu } from "./process/scheduling.ts";
import { answerParent, SHUTDOWN_GRACE_MS, superviseWorkerChild } from "./process/worker-child.ts";
import { closeQueues, createQueues } from "./queue/queues.ts";
import { createFailFastRedis, createWorkerRedis, redisPersistenceWarnings, untilReady } from "./queue/redis.ts";
import { loadSettings, type Settings } from "./settings.ts";
import { type StartedTracing, startTracing } from "./tracing/sdk.ts";
import type { Tracing } from "./tracing/tracing.ts";

/**
 * The entry point, and the only module that reads process.env, opens ports and traps signals.
 * Compiled to dist/main.js by npm run build, and run by plain node:
 *   node dist/main.js all --migrate   (npm start)   web here, workers in a child process
 *   node dist/main.js web | worker                  one role each, for scaling out
 *   node dist/main.js migrate                       apply migrations and exit
 */

type Role = "all" | "web" | "worker" | "migrate";

async function main(): Promise<void> {
  const role = (process.argv[2] ?? "all") as Role;
  if (role === "worker" && process.argv.includes(WORKER_CHILD_FLAG)) return runWorkerChild();

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
  const app = role === "web" ? buildApp({ config, logger, redis: web.redis, queues: web.queues, db: web.db, metrics, tracing }) : undefined;
  const metricsApp = metricsListener(config, { logger, queues: web.queues, db: web.db, metrics });
  // First: a METRICS_PORT that is taken stops the start before a job is taken.
  if (metricsApp) await listenForScrapes(metricsApp, config, logger);
  const worker = role === "worker" ? startWorkerRole(config, logger, web.db, metrics, tracing) : undefined;

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
 * series carry `role`), and a worker child that dies is started again (src/process/worker-child.ts).
 */
async function runAll(config: Settings, logger: Logger): Promise<void> {
  // This process is the web; the worker child starts tracing of its own (runWorkerChild).
  const traces = startConfiguredTracing(config, "web", logger);
  const tracing = traces?.tracing;
  const web = connectWeb(config, logger, tracing);
  const metrics = createMetrics({ defaultMetrics: true });
  metrics.registry.setDefaultLabels({ role: "web" });
  const worker = superviseWorkerChild({ fork: () => forkWorkerChild(fileURLToPath(import.meta.url)), config, logger, metrics });
  const otherProcesses = () => worker.collectMetrics();
  const app = buildApp({ config, logger, redis: web.redis, queues: web.queues, db: web.db, metrics, otherProcesses, tracing });
  const metricsApp = metricsListener(config, { logger, queues: web.queues, db: web.db, metrics, otherProcesses });
  if (metricsApp) await listenForScrapes(metricsApp, config, logger);
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

/** A start-up that cannot go on, said in one line naming the variable to change. */
class StartupError extends Error {
  override readonly name = "StartupError";
}

/**
 * The metrics listener on METRICS_PORT, or, when it is unset, on the first free port of
 * DEFAULT_METRICS_PORTS: each process on a host takes its own, and says which in its
 * `metrics.listening` line (how a scraper's operator finds it). Tried in turn rather than
 * probed first: two processes starting together must not both find the same port free.
 */
async function listenForScrapes(app: FastifyInstance, config: Settings, logger: Logger): Promise<void> {
  const { listen, host } = config.metrics;
  if (listen.kind === "off") return;
  if (listen.kind === "fixed") {
    await app.listen({ port: listen.port, host }).catch((error: unknown) => {
      if (errorCode(error) !== "EADDRINUSE") throw cannotListen(host, listen.port, error);
      const range = `${DEFAULT_METRICS_PORTS.first}–${DEFAULT_METRICS_PORTS.last}`;
      throw new StartupError(
        `METRICS_PORT=${listen.port}: cannot listen on ${host}:${listen.port} (the port is taken); choose another METRICS_PORT, or unset it to take the first free port of ${range}`,
      );
    });
    logger.info({ event: "metrics.listening", host, port: listen.port }, `metrics on ${host}:${listen.port} (METRICS_PORT)`);
    return;
  }
  const first = DEFAULT_METRICS_PORTS.first;
  for (const port of listen.ports) {
    try {
      await app.listen({ port, host });
    } catch (error) {
      if (errorCode(error) === "EADDRINUSE") continue; // another process's, likely another role of ours
      throw cannotListen(host, port, error);
    }
    const moved = port !== first;
    logger.info(
      { event: "metrics.listening", host, port, ...(moved ? { movedFrom: first } : {}) },
      moved ? `metrics on ${host}:${port}: the default ${first} was taken` : `metrics on ${host}:${port}`,
    );
    return;
  }
  throw new StartupError(
    `no free port for metrics on ${host} from ${first} to ${DEFAULT_METRICS_PORTS.last}: set METRICS_PORT to a free one (0 turns the listener off)`,
  );
}

const errorCode = (error: unknown): unknown => (error instanceof Error ? (error as NodeJS.ErrnoException).code : undefined);

/** Not a port taken: an address this host does not have, most likely. */
const cannotListen = (host: string, port: number, error: unknown) =>
  new StartupError(
    `the metrics listener cannot listen on ${host}:${port} (METRICS_HOST, METRICS_PORT): ${error instanceof Error ? error.message : String(error)}`,
  );

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
    const since = Date.now();
    logger.info({ event: "web.waiting_for_redis", status: web.redis.status }, "waiting for Redis before taking webhooks");
    await untilReady(web.redis);
    logger.info({ event: "web.redis_ready", waitedMs: Date.now() - since }, "Redis is ready; taking webhooks");
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
 * The worker child of `all`: the worker role with the configuration the parent validated (it
 * reads no environment of its own and opens no port; the parent serves its metrics). It drains
 * when the parent says so, after the web has stopped taking webhooks, or when the parent dies.
 */
function runWorkerChild(): void {
  yieldTheCpu(WORKER_CHILD_NICENESS);
  let logger: Logger | undefined;
  let drain: ((bindings: Record<string, string>) => void) | undefined;
  answerParent(process, {
    start(config) {
      const log = createLogger({ level: config.logLevel, traceIds: config.tracing !== undefined });
      logger = log;
      const traces = startConfiguredTracing(config, "worker", log);
      const metrics = createMetrics({ defaultMetrics: true });
      metrics.registry.setDefaultLabels({ role: "worker" });
      const db = createDb(config.databaseUrl, { poolSize: config.databasePoolSize });
      const worker = startWorkerRole(config, log, db, metrics, traces?.tracing);
      drain = drainOnce(log, config.shutdownTimeoutMs + SHUTDOWN_GRACE_MS, async () => {
        await worker.close();
        await db.$disconnect();
        await flushTraces(traces, log);
        return true;
      });
      return { metrics, logger: log };
    },
    drain(reason) {
      if (drain) drain({ reason });
      else process.exit(0); // told to stop before it started: nothing to drain
    },
  });
  // systemd's default KillMode signals the parent and the child at once (a terminal's Ctrl-C
  // does not: the child leads a session of its own); the parent decides the order, web first,
  // so the child waits for its word.
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => logger?.info({ event: "shutdown.deferred", signal }, "the parent stops the worker after the web"));
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

/**
 * The OpenTelemetry SDK, when an OTLP endpoint is configured; otherwise none starts and the
 * rest of the code gets no tracing at all (Config.tracing).
 */
function startConfiguredTracing(config: Settings, role: "web" | "worker", logger: Logger): StartedTracing | undefined {
  if (!config.tracing) return undefined;
  const started = startTracing(config.tracing, role);
  logger.info({ event: "tracing.started", endpoint: redactedOrigin(config.tracing.tracesUrl) }, "exporting traces over OTLP/HTTP");
  return started;
}

/** Where traces go, as a log line may say it: the origin, without credentials or path. */
function redactedOrigin(url: string): string {
  return new URL(url).origin;
}

/** The spans still buffered go out before the process exits; a collector that is away costs them, not the shutdown. */
async function flushTraces(traces: StartedTracing | undefined, logger: Logger): Promise<void> {
  await traces?.shutdown().catch((error: unknown) => logger.warn({ event: "tracing.flush_failed", err: error }, "could not export the last traces"));
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

/** The worker role on a connection of its own (one that waits out a Redis outage); close() drains it. */
function startWorkerRole(config: Settings, logger: Logger, db: Db, metrics: Metrics, tracing: Tracing | undefined) {
  const connection = createWorkerRedis(config.redis);
  // It reconnects by itself and the jobs wait for it; say so once per error, not on stderr.
  connection.on("error", (error) => logger.warn({ event: "redis.error", role: "worker", err: error }, "worker's redis connection error"));
  const workers = startConfiguredWorkers(config, { db, logger, metrics, connection, tracing });
  redisPersistenceWarnings(connection).then(
    (warnings) => {
      for (const warning of warnings) logger.warn({ event: "redis.config_warning" }, warning);
    },
    (error) => logger.warn({ event: "redis.config_unreadable", err: error }, "could not read Redis settings (CONFIG GET refused?)"),
  );
  logger.info({ event: "worker.started", concurrency: config.jobs.replyConcurrency }, "worker started");
  return {
    async close() {
      await workers.close(config.shutdownTimeoutMs);
      await Promise.allSettled([connection.quit()]);
    },
  };
}

/** SIGTERM and SIGINT run `stop` once; see drainOnce. */
function stopOnSignals(logger: Logger, hardStopMs: number, stop: () => Promise<boolean>): void {
  const shutdown = drainOnce(logger, hardStopMs, stop);
  process.on("SIGTERM", () => shutdown({ signal: "SIGTERM" }));
  process.on("SIGINT", () => shutdown({ signal: "SIGINT" }));
}

/**
 * The shutdown, run once whatever asks for it again: `stop` resolves whether everything
 * stopped cleanly (exit 0) or not (exit 1); past `hardStopMs` the process exits anyway.
 */
function drainOnce(logger: Logger, hardStopMs: number, stop: () => Promise<boolean>): (bindings: Record<string, string>) => void {
  let stopping = false;
  return (bindings) => {
    if (stopping) return;
    stopping = true;
    logger.info({ event: "shutdown.start", ...bindings }, "shutting down");
    const hardStop = setTimeout(() => {
      logger.error({ event: "shutdown.forced" }, "shutdown took too long; exiting");
      process.exit(1);
    }, hardStopMs);
    hardStop.unref();
    stop().then(
      (clean) => {
        logger.info({ event: "shutdown.done", clean }, "stopped");
        process.exit(clean ? 0 : 1);
      },
      (error: unknown) => {
        logger.error({ event: "shutdown.error", err: error }, "error during shutdown");
        process.exit(1);
      },
    );
  };
}

main().catch((error: unknown) => {
  console.error(error instanceof StartupError ? error.message : error);
  process.exit(1);
});
