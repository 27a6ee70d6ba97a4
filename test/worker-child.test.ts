import type { ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import pino from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createMetrics } from "../src/metrics/metrics.ts";
import { superviseWorkerChild } from "../src/process/supervisor.ts";
import type { ToWorkerChild } from "../src/process/worker-child.ts";
import { loadSettings } from "../src/settings.ts";
import { testEnv } from "./support/harness.ts";

/**
 * The supervisor of npm start's worker child, with stand-in children and a fake clock: the
 * backoff between restarts, and what stop() does. The real processes are all-in-one.test.ts's.
 */

class StandInChild extends EventEmitter {
  connected = true;
  readonly received: ToWorkerChild[] = [];
  readonly signals: string[] = [];
  constructor(readonly pid: number) {
    super();
  }
  send(message: ToWorkerChild, callback?: (error: Error | null) => void): boolean {
    this.received.push(message);
    callback?.(null);
    return true;
  }
  kill(signal: string): boolean {
    this.signals.push(signal);
    return true;
  }
  die(code: number | null, signal: NodeJS.Signals | null = null): void {
    this.connected = false;
    this.emit("exit", code, signal);
  }
}

const config = loadSettings(testEnv({ SHUTDOWN_TIMEOUT_MS: "1000" }));

function supervised() {
  const children: StandInChild[] = [];
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  const metrics = createMetrics();
  const worker = superviseWorkerChild({
    fork: () => {
      const child = new StandInChild(1000 + children.length);
      children.push(child);
      return child as unknown as ChildProcess;
    },
    config,
    logger,
    metrics,
    // The fake timers move Date: the clock the supervisor measures a child's life on follows it.
    clock: { now: () => new Date(), monotonicMs: () => Date.now() },
  });
  const latest = () => children[children.length - 1]!;
  return { worker, children, latest, lines, metrics };
}

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("the worker child's supervisor", () => {
  it("hands the child the validated configuration and counts it up once it has started", async () => {
    const { worker, latest, metrics } = supervised();
    worker.start();
    expect(latest().received).toEqual([{ type: "start", config }]);
    latest().emit("message", { type: "started" });
    expect(worker.pid).toBe(1000);
    expect(await metrics.registry.getSingleMetricAsString("wa_worker_process_up")).toContain("wa_worker_process_up 1");
  });

  it("restarts a child that keeps dying after 1 s, 2 s, 4 s, ... up to 30 s, and after 1 s again once one stayed up a minute", () => {
    const { worker, children, latest, lines } = supervised();
    worker.start();
    const delays: number[] = [];
    for (let death = 0; death < 7; death++) {
      latest().die(1);
      const restartInMs = lines[lines.length - 1]!.restartInMs as number;
      delays.push(restartInMs);
      vi.advanceTimersByTime(restartInMs - 1);
      expect(children).toHaveLength(death + 1); // not yet
      vi.advanceTimersByTime(1);
      expect(children).toHaveLength(death + 2);
    }
    expect(delays).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    expect(lines.filter((l) => l.event === "worker.child_exited").every((l) => l.level === 50)).toBe(true);

    vi.advanceTimersByTime(60_000); // this one is healthy
    latest().die(null, "SIGKILL");
    expect(lines[lines.length - 1]).toMatchObject({ event: "worker.child_exited", signal: "SIGKILL", restartInMs: 1000, consecutiveDeaths: 1 });
  });

  it("stop() asks the child to drain, resolves when it exits 0, and restarts nothing afterwards", async () => {
    const { worker, children, latest } = supervised();
    worker.start();
    const stopped = worker.stop();
    expect(latest().received.map((m) => m.type)).toEqual(["start", "drain"]);
    latest().die(0);
    expect(await stopped).toBe(true);
    vi.advanceTimersByTime(120_000);
    expect(children).toHaveLength(1);
  });

  it("stop() kills a child still running past SHUTDOWN_TIMEOUT_MS and its grace, and says the drain failed", async () => {
    const { worker, latest, lines } = supervised();
    worker.start();
    const stopped = worker.stop();
    vi.advanceTimersByTime(config.shutdownTimeoutMs + 5000);
    expect(latest().signals).toEqual(["SIGKILL"]);
    latest().die(null, "SIGKILL");
    expect(await stopped).toBe(false);
    expect(lines.some((l) => l.event === "worker.child_killed")).toBe(true);
  });

  it("a stop during the backoff cancels the restart", async () => {
    const { worker, children, latest } = supervised();
    worker.start();
    latest().die(1);
    expect(await worker.stop()).toBe(true);
    vi.advanceTimersByTime(60_000);
    expect(children).toHaveLength(1);
  });

  it("a scrape is served without the child's metrics when it is down or silent", async () => {
    const { worker, latest, lines } = supervised();
    worker.start();
    const silent = worker.collectMetrics();
    vi.advanceTimersByTime(2000);
    expect(await silent).toEqual([]);
    expect(lines.some((l) => l.event === "metrics.worker_child_silent")).toBe(true);

    const answered = worker.collectMetrics();
    const request = latest().received.findLast((m) => m.type === "metrics")!;
    latest().emit("message", { type: "metrics", id: (request as { id: number }).id, metrics: [] });
    expect(await answered).toEqual([[]]);

    latest().die(1);
    expect(await worker.collectMetrics()).toEqual([]);
  });
});
