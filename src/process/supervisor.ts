import type { ChildProcess } from "node:child_process";
import { Counter, Gauge } from "prom-client";
import { type Clock, systemClock } from "../clock.ts";
import type { Logger } from "../logger.ts";
import type { Metrics, MetricsSnapshot } from "../metrics/metrics.ts";
import type { Settings } from "../settings.ts";
import { portableSettings } from "./portable.ts";
import { type FromWorkerChild, SHUTDOWN_GRACE_MS, type ToWorkerChild } from "./worker-child.ts";

/**
 * The parent's end of `npm start`'s worker child (worker-child.ts has the child's): it keeps
 * one running, asks it for its metrics, and drains it on shutdown.
 */

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

export interface WorkerChildDeps {
  /** Starts a process running the worker role that waits for its configuration over IPC. */
  fork: () => ChildProcess;
  config: Settings;
  logger: Logger;
  /** The parent's metrics: the child's health is counted there (wa_worker_process_up, wa_worker_process_restarts_total). */
  metrics: Metrics;
  restart?: RestartPolicy;
  /** How long a child ran is measured on it (the system's by default). */
  clock?: Clock | undefined;
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
  return new Supervisor(deps);
}

class Supervisor implements WorkerChild {
  private readonly policy: RestartPolicy;
  private readonly clock: Clock;
  private readonly up: Gauge;
  private readonly restarts: Counter;
  private child: ChildProcess | undefined;
  private startedAt = 0;
  private consecutiveDeaths = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private stopping = false;
  private nextRequest = 0;
  private readonly waitingForMetrics = new Map<number, (snapshots: MetricsSnapshot[]) => void>();

  constructor(private readonly deps: WorkerChildDeps) {
    this.policy = deps.restart ?? DEFAULT_RESTART;
    this.clock = deps.clock ?? systemClock;
    this.up = new Gauge({
      name: "wa_worker_process_up",
      help: "1 while the worker child of npm start (role all) runs, 0 while it is down: webhooks are queued but not answered",
      registers: [deps.metrics.registry],
    });
    this.restarts = new Counter({
      name: "wa_worker_process_restarts_total",
      help: "Times the worker child of npm start (role all) died unexpectedly and was started again",
      registers: [deps.metrics.registry],
    });
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(): void {
    this.restartTimer = undefined;
    if (this.stopping) return;
    const current = this.deps.fork();
    this.child = current;
    this.startedAt = this.monotonicMs();
    let ended = false;
    const end = (code: number | null, signal: NodeJS.Signals | null) => {
      if (ended) return;
      ended = true;
      this.onExit(current, code, signal);
    };
    current.on("message", (message: FromWorkerChild) => this.heard(current, message));
    current.on("error", (error) => {
      this.deps.logger.error({ event: "worker.child_error", child: current.pid, err: error }, "worker child error");
      if (current.pid === undefined) end(null, null); // it never started: no exit event is coming
    });
    current.once("exit", end);
    this.send(current, { type: "start", config: portableSettings(this.deps.config) });
  }

  collectMetrics(): Promise<MetricsSnapshot[]> {
    const current = this.child;
    if (!current?.connected) return Promise.resolve([]);
    const id = this.nextRequest++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.deps.logger.warn(
          { event: "metrics.worker_child_silent", child: current.pid },
          "the worker child's metrics did not come in time; served without them",
        );
        answer([]);
      }, METRICS_TIMEOUT_MS);
      const answer = (snapshots: MetricsSnapshot[]) => {
        clearTimeout(timer);
        this.waitingForMetrics.delete(id);
        resolve(snapshots);
      };
      this.waitingForMetrics.set(id, answer);
      this.send(current, { type: "metrics", id });
    });
  }

  async stop(): Promise<boolean> {
    this.stopping = true;
    clearTimeout(this.restartTimer);
    const current = this.child;
    if (!current) return true; // down between a death and its restart: nothing to drain
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      current.once("exit", (code, signal) => resolve({ code, signal })),
    );
    this.send(current, { type: "drain" });
    const deadline = setTimeout(() => {
      this.deps.logger.error({ event: "worker.child_killed", child: current.pid }, "the worker child did not exit after draining; killing it");
      current.kill("SIGKILL");
    }, this.deps.config.shutdownTimeoutMs + SHUTDOWN_GRACE_MS);
    const { code, signal } = await exited;
    clearTimeout(deadline);
    this.deps.logger.info({ event: "worker.child_stopped", child: current.pid, code, signal }, "worker child stopped");
    return code === 0;
  }

  private heard(from: ChildProcess, message: FromWorkerChild): void {
    if (message.type === "started") {
      this.up.set(1);
      this.deps.logger.info({ event: "worker.child_started", child: from.pid }, "worker child started");
    } else if (message.type === "metrics") {
      this.waitingForMetrics.get(message.id)?.([message.metrics]);
    }
  }

  private onExit(exited: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.child !== exited) return;
    this.child = undefined;
    this.up.set(0);
    for (const answer of this.waitingForMetrics.values()) answer([]);
    if (this.stopping) return; // stop() waits for this exit itself
    const ranMs = Math.round(this.monotonicMs() - this.startedAt);
    this.consecutiveDeaths = ranMs >= this.policy.healthyAfterMs ? 1 : this.consecutiveDeaths + 1;
    const restartInMs = Math.min(this.policy.maxDelayMs, this.policy.firstDelayMs * 2 ** (this.consecutiveDeaths - 1));
    this.restarts.inc();
    this.deps.logger.error(
      { event: "worker.child_exited", child: exited.pid, code, signal, ranMs, consecutiveDeaths: this.consecutiveDeaths, restartInMs },
      "the worker child died: webhooks are still queued, but nothing is answered until it is back",
    );
    this.restartTimer = setTimeout(() => {
      this.deps.logger.warn({ event: "worker.child_restarting", consecutiveDeaths: this.consecutiveDeaths }, "starting the worker child again");
      this.start();
    }, restartInMs);
  }

  private send(to: ChildProcess, message: ToWorkerChild): void {
    if (!to.connected) return;
    to.send(message, (error) => {
      if (error)
        this.deps.logger.warn({ event: "worker.child_unreachable", child: to.pid, type: message.type, err: error }, "could not reach the worker child");
    });
  }

  private monotonicMs(): number {
    return this.clock.monotonicMs();
  }
}
