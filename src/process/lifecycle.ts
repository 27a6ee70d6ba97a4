import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import { startConfiguredWorkers } from "../jobs/workers.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { createWorkerRedis, redisPersistenceWarnings } from "../queue/redis.ts";
import type { Settings } from "../settings.ts";
import { type StartedTracing, startTracing } from "../tracing/sdk.ts";
import type { Tracing } from "../tracing/tracing.ts";

/**
 * What every role's process shares, whichever way it was started (src/main.ts, or the worker
 * child of `npm start`): its traces, its worker role, and its one shutdown.
 */

/**
 * The OpenTelemetry SDK, when an OTLP endpoint is configured; otherwise none starts and the
 * rest of the code gets no tracing at all (Config.tracing).
 */
export function startConfiguredTracing(config: Settings, role: "web" | "worker", logger: Logger): StartedTracing | undefined {
  if (!config.tracing) return undefined;
  const started = startTracing(config.tracing, role);
  // Where traces go, as a log line may say it: the origin, without credentials or path.
  logger.info({ event: "tracing.started", endpoint: new URL(config.tracing.tracesUrl).origin }, "exporting traces over OTLP/HTTP");
  return started;
}

/** The spans still buffered go out before the process exits; a collector that is away costs them, not the shutdown. */
export async function flushTraces(traces: StartedTracing | undefined, logger: Logger): Promise<void> {
  await traces?.shutdown().catch((error: unknown) => logger.warn({ event: "tracing.flush_failed", err: error }, "could not export the last traces"));
}

/** The worker role on a connection of its own (one that waits out a Redis outage); close() drains it. */
export function startWorkerRole(
  config: Settings,
  shared: { logger: Logger; db: Db; metrics: Metrics; clock: Clock; tracing: Tracing | undefined },
): { close(): Promise<void> } {
  const { logger } = shared;
  const connection = createWorkerRedis(config.redis);
  // It reconnects by itself and the jobs wait for it; say so once per error, not on stderr.
  connection.on("error", (error) => logger.warn({ event: "redis.error", role: "worker", err: error }, "worker's redis connection error"));
  const workers = startConfiguredWorkers(config, { ...shared, connection });
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

/**
 * The shutdown, run once whatever asks for it again: `stop` resolves whether everything
 * stopped cleanly (exit 0) or not (exit 1); past `hardStopMs` the process exits anyway.
 */
export function drainOnce(logger: Logger, hardStopMs: number, stop: () => Promise<boolean>): (bindings: Record<string, string>) => void {
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
