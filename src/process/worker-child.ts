import type { ChildProcess } from "node:child_process";
import { Counter, Gauge } from "prom-client";
import type { Logger } from "../logger.ts";
import type { Metrics, MetricsSnapshot } from "../metrics/metrics.ts";
import type { Settings } from "../settings.ts";
import { type PortableSettings, portableSettings, settingsFromPortable } from "./portable.ts";

/**
 * The worker child of `npm start` (role `all`): the web keeps its event loop to itself and
 * the workers run in a process of their own, so a webhook's ack never waits behind job code
 * (issue 10, target 5). Both ends of their IPC channel live here; main.ts forks the child
 * (itself, as `worker --worker-child`) and owns the signals.
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

export interface RestartPolicy {
  /** The delay before the first restart; it doubles with each death of a child that did not stay up. */
  firstDelayMs: number;
  maxDelayMs: number;
  /** A child that ran this long was healthy: its death restarts after firstDelayMs again. */
  healthyAfterMs: number;
}

export const DEFAULT_RESTART: RestartPolicy = { firstDelayMs: 1000, maxDelayMs: 30_000, healthyAfterMs: 60_000 };

/** How long a scrape waits for the child's metrics before it is served without them. */
const METRICS_TIMEOUT_MS = 2000;
/** Past SHUTDOWN_TIMEOUT_MS, how long a draining process has to close its connections before it is ended. */
export const SHUTDOWN_GRACE_MS = 5000;

export interface WorkerChildDeps {
  /** Starts a process running the worker role that waits for its configuration over IPC. */
  fork: () => ChildProcess;
  config: Settings;
  logger: Logger;
  /** The parent's metrics: the child's health is counted there (wa_worker_process_up, wa_worker_process_restarts_total). */
  metrics: Metrics;
  restart?: RestartPolicy;
}

export interface WorkerChild {
  start(): void;
  /** The running child's pid; undefined while it is down. */
  readonly pid: number | undefined;
  /** The child's metrics, to serve beside the parent's; none while it is down or silent. */
  collectMetrics(): Promise<MetricsSnapshot[]>;
  /**
   * No more restarts; asks the child to drain (its active jobs get SHUTDOWN_TIMEOUT_MS),
   * kills it if it outlasts that, and resolves once it has exited: true when it drained.
   */
  stop(): Promise<boolean>;
}

/**
 * Keeps one worker child running. A child that dies unexpectedly is logged at error level and
 * started again after a backoff (1 s doubling to 30 s while it keeps dying), rather than the
 * parent exiting for an outer supervisor to restart everything: the web stays up and keeps
 * acknowledging, which is honest (law 2: a 200 means the message is queued in Redis, and the
 * queue waits for the worker), and a restart of the child alone takes a second where a
 * restart of everything would refuse Meta's deliveries meanwhile. While it is down nothing is
 * answered, so that is never silent: an error line per death, a warning per restart, and
 * `wa_worker_process_up 0` on the metrics listener.
 */
export function superviseWorkerChild(deps: WorkerChildDeps): WorkerChild {
  const policy = deps.restart ?? DEFAULT_RESTART;
  const { logger } = deps;
  const up = new Gauge({
    name: "wa_worker_process_up",
    help: "1 while the worker child of npm start (role all) runs, 0 while it is down: webhooks are queued but not answered",
    registers: [deps.metrics.registry],
  });
  const restarts = new Counter({
    name: "wa_worker_process_restarts_total",
    help: "Times the worker child of npm start (role all) died unexpectedly and was started again",
    registers: [deps.metrics.registry],
  });

  let child: ChildProcess | undefined;
  let startedAt = 0;
  let consecutiveDeaths = 0;
  let restartTimer: NodeJS.Timeout | undefined;
  let stopping = false;
  let nextRequest = 0;
  const waitingForMetrics = new Map<number, (snapshots: MetricsSnapshot[]) => void>();

  const send = (to: ChildProcess, message: ToWorkerChild) => {
    if (!to.connected) return;
    to.send(message, (error) => {
      if (error) logger.warn({ event: "worker.child_unreachable", child: to.pid, type: message.type, err: error }, "could not reach the worker child");
    });
  };

  const start = () => {
    restartTimer = undefined;
    if (stopping) return;
    const current = deps.fork();
    child = current;
    startedAt = Date.now();
    let ended = false;
    const end = (code: number | null, signal: NodeJS.Signals | null) => {
      if (ended) return;
      ended = true;
      onExit(current, code, signal);
    };
    current.on("message", (message: FromWorkerChild) => {
      if (message.type === "started") {
        up.set(1);
        logger.info({ event: "worker.child_started", child: current.pid }, "worker child started");
      } else if (message.type === "metrics") {
        waitingForMetrics.get(message.id)?.([message.metrics]);
      }
    });
    current.on("error", (error) => {
      logger.error({ event: "worker.child_error", child: current.pid, err: error }, "worker child error");
      if (current.pid === undefined) end(null, null); // it never started: no exit event is coming
    });
    current.once("exit", end);
    send(current, { type: "start", config: portableSettings(deps.config) });
  };

  const onExit = (exited: ChildProcess, code: number | null, signal: NodeJS.Signals | null) => {
    if (child !== exited) return;
    child = undefined;
    up.set(0);
    for (const answer of waitingForMetrics.values()) answer([]);
    if (stopping) return; // stop() waits for this exit itself
    const ranMs = Date.now() - startedAt;
    consecutiveDeaths = ranMs >= policy.healthyAfterMs ? 1 : consecutiveDeaths + 1;
    const restartInMs = Math.min(policy.maxDelayMs, policy.firstDelayMs * 2 ** (consecutiveDeaths - 1));
    restarts.inc();
    logger.error(
      { event: "worker.child_exited", child: exited.pid, code, signal, ranMs, consecutiveDeaths, restartInMs },
      "the worker child died: webhooks are still queued, but nothing is answered until it is back",
    );
    restartTimer = setTimeout(() => {
      logger.warn({ event: "worker.child_restarting", consecutiveDeaths }, "starting the worker child again");
      start();
    }, restartInMs);
  };

  return {
    start,
    get pid() {
      return child?.pid;
    },
    collectMetrics() {
      const current = child;
      if (!current?.connected) return Promise.resolve([]);
      const id = nextRequest++;
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          logger.warn({ event: "metrics.worker_child_silent", child: current.pid }, "the worker child's metrics did not come in time; served without them");
          answer([]);
        }, METRICS_TIMEOUT_MS);
        const answer = (snapshots: MetricsSnapshot[]) => {
          clearTimeout(timer);
          waitingForMetrics.delete(id);
          resolve(snapshots);
        };
        waitingForMetrics.set(id, answer);
        send(current, { type: "metrics", id });
      });
    },
    async stop() {
      stopping = true;
      clearTimeout(restartTimer);
      const current = child;
      if (!current) return true; // down between a death and its restart: nothing to drain
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        current.once("exit", (code, signal) => resolve({ code, signal })),
      );
      send(current, { type: "drain" });
      const deadline = setTimeout(() => {
        logger.error({ event: "worker.child_killed", child: current.pid }, "the worker child did not exit after draining; killing it");
        current.kill("SIGKILL");
      }, deps.config.shutdownTimeoutMs + SHUTDOWN_GRACE_MS);
      const { code, signal } = await exited;
      clearTimeout(deadline);
      logger.info({ event: "worker.child_stopped", child: current.pid, code, signal }, "worker child stopped");
      return code === 0;
    },
  };
}

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
