import type { Clock } from "../clock.ts";
import { createDb } from "../db/client.ts";
import { createLogger, type Logger } from "../logger.ts";
import { createMetrics, type Metrics, type MetricsSnapshot } from "../metrics/metrics.ts";
import type { Settings } from "../settings.ts";
import { drainOnce, flushTraces, startConfiguredTracing, startWorkerRole } from "./lifecycle.ts";
import { type PortableSettings, settingsFromPortable } from "./portable.ts";
import { WORKER_CHILD_NICENESS, yieldTheCpu } from "./scheduling.ts";

/**
 * The worker child of `npm start` (role `all`): the web keeps its event loop to itself and
 * the workers run in a process of their own, so a webhook's ack never waits behind job code
 * (issue 10, target 5). The child's end of their IPC channel lives here, the parent's in
 * supervisor.ts; main.ts forks the child (itself, as `worker --worker-child`) and owns the
 * signals.
 *
 * A process rather than a worker thread: the child is the `worker` role exactly as
 * `npm run worker` runs it (its connections, its shutdown, its pid in every log line), a
 * crash or an out-of-memory in job code takes the child and never the web, the two share no
 * libuv thread pool, and the kernel schedules them apart. The price is a second Node heap
 * and a config that crosses IPC.
 */

/** Parent to child. */
export type ToWorkerChild = { type: "start"; config: PortableSettings } | { type: "metrics"; id: number } | { type: "drain" };

/** Child to parent. */
export type FromWorkerChild = { type: "started" } | { type: "metrics"; id: number; metrics: MetricsSnapshot };

/** Past SHUTDOWN_TIMEOUT_MS, how long a draining process has to close its connections before it is ended. */
export const SHUTDOWN_GRACE_MS = 5000;

/** The child's end of the channel: `process` in the child. */
export interface ParentChannel {
  send?: NodeJS.Process["send"];
  on(event: "message", listener: (message: unknown) => void): unknown;
  on(event: "disconnect", listener: () => void): unknown;
}

export interface ChildRole {
  /** Starts the worker role with the configuration the parent validated. */
  start(config: Settings): { metrics: Metrics; logger: Logger };
  /** Finishes the active jobs and exits. */
  drain(reason: string): void;
}

/**
 * Runs the child: starts it with the parent's configuration, answers metric requests, and
 * drains it when the parent says so or when the parent is gone (the IPC channel closes when
 * the parent dies, even by SIGKILL, so a child never outlives its web).
 */
export function answerParent(channel: ParentChannel, role: ChildRole): void {
  let started: { metrics: Metrics; logger: Logger } | undefined;
  const reply = (message: FromWorkerChild) =>
    channel.send?.(message, undefined, undefined, (error) => {
      // The parent is gone: its disconnect has started the drain; there is no one to answer.
      if (error) started?.logger.debug({ event: "worker.parent_unreachable", type: message.type }, "could not answer the parent");
    });
  channel.on("message", (raw) => {
    const message = raw as ToWorkerChild;
    if (message.type === "start") {
      if (started) return;
      // The same validated configuration, its business tools made again (structured cloning keeps no class).
      started = role.start(settingsFromPortable(message.config));
      reply({ type: "started" });
    } else if (message.type === "metrics") {
      const running = started;
      if (!running) return reply({ type: "metrics", id: message.id, metrics: [] });
      running.metrics.registry.getMetricsAsJSON().then(
        (metrics) => reply({ type: "metrics", id: message.id, metrics }),
        (error: unknown) => {
          running.logger.warn({ event: "metrics.unavailable", err: error }, "could not collect the worker's metrics");
          reply({ type: "metrics", id: message.id, metrics: [] });
        },
      );
    } else if (message.type === "drain") {
      role.drain("asked by the parent");
    }
  });
  channel.on("disconnect", () => role.drain("the parent is gone"));
}

/**
 * The worker child of `all`: the worker role with the configuration the parent validated (it
 * reads no environment of its own and opens no port; the parent serves its metrics). It drains
 * when the parent says so, after the web has stopped taking webhooks, or when the parent dies.
 * Returns who may log the signals the parent will act on.
 */
export function runWorkerChild(clock: Clock): { logger(): Logger | undefined } {
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
      const worker = startWorkerRole(config, { logger: log, db, metrics, clock, tracing: traces?.tracing });
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
  return { logger: () => logger };
}
