import { performance } from "node:perf_hooks";
import { signMetaBody } from "../src/webhook/signature.ts";
import { textWebhook } from "../test/support/webhook-bodies.ts";
import { Connection, Pool, postHead } from "./http-client.ts";
import type { ChildMessage, LoadResult, LoadSpec, ParentMessage } from "./load.ts";

/**
 * The load generator process. Every request is a Meta-shaped webhook with its own wamid,
 * signed like Meta signs it, so the app does its full work (no duplicate short-cuts).
 */

const REQUEST_TIMEOUT_MS = 10_000;

interface SignedRequest {
  head: Buffer;
  body: Buffer;
}

let seq = 0;
function nextRequest(url: URL, { label, appSecret }: LoadSpec): SignedRequest {
  const n = ++seq;
  const { body } = textWebhook({
    id: `wamid.BENCH${label}x${n}`,
    from: `1650555${String(n % 10_000).padStart(4, "0")}`,
    text: `Benchmark message ${n}: hello, is the shop open on Sunday?`,
  });
  const raw = Buffer.from(body, "utf8");
  const head = postHead(url, raw, { "content-type": "application/json", "x-hub-signature-256": signMetaBody(raw, appSecret) });
  return { head, body: raw };
}

class Recorder {
  readonly statuses: Record<string, number> = {};
  readonly latencies: number[] = [];
  readonly sentLate: number[] = [];
  totalOk = 0;
  sent = 0;
  ok = 0;

  record(status: number, latencyMs: number, measured: boolean, sentLateMs?: number): void {
    const key = status === -1 ? "error" : String(status);
    this.statuses[key] = (this.statuses[key] ?? 0) + 1;
    if (status === 200) this.totalOk++;
    if (!measured) return;
    this.sent++;
    if (status === 200) this.ok++;
    this.latencies.push(latencyMs);
    if (sentLateMs !== undefined) this.sentLate.push(sentLateMs);
  }

  result(windowMs: number, generatorBusy: number): LoadResult {
    return {
      sent: this.sent,
      ok: this.ok,
      non200: this.sent - this.ok,
      statuses: this.statuses,
      totalOk: this.totalOk,
      latenciesMs: Float64Array.from(this.latencies),
      sentLateMs: Float64Array.from(this.sentLate),
      windowMs,
      generatorBusy,
    };
  }
}

/** Tells the parent when the measured window opens and closes, and measures our own busyness over it. */
function windowTimers(spec: LoadSpec, startedAt: number) {
  const opensAt = startedAt + spec.warmupMs;
  const closesAt = opensAt + spec.durationMs;
  let elu = performance.eventLoopUtilization();
  let busy = Number.NaN;
  const opened = new Promise<void>((resolve) =>
    setTimeout(
      () => {
        elu = performance.eventLoopUtilization();
        send({ type: "measuring" });
        resolve();
      },
      Math.max(0, opensAt - performance.now()),
    ),
  );
  const closed = new Promise<void>((resolve) =>
    setTimeout(
      () => {
        busy = performance.eventLoopUtilization(elu).utilization;
        send({ type: "measured" });
        resolve();
      },
      Math.max(0, closesAt - performance.now()),
    ),
  );
  return { opensAt, closesAt, done: Promise.all([opened, closed]), busy: () => busy };
}

async function closedLoop(spec: LoadSpec): Promise<LoadResult> {
  const url = new URL(spec.url);
  const recorder = new Recorder();
  const window = windowTimers(spec, performance.now());
  const connections = Array.from({ length: spec.connections }, () => new Connection(url.hostname, Number(url.port), REQUEST_TIMEOUT_MS));
  const loop = async (connection: Connection) => {
    for (;;) {
      // Built before the clock starts: the body's cost is the generator's, not the server's.
      const { head, body } = nextRequest(url, spec);
      const start = performance.now();
      if (start >= window.closesAt) return;
      const status = await connection.request(head, body);
      recorder.record(status, performance.now() - start, start >= window.opensAt);
    }
  };
  await Promise.all(connections.map(loop));
  await window.done;
  for (const connection of connections) connection.close();
  return recorder.result(spec.durationMs, window.busy());
}

/**
 * Open loop: requests leave on a fixed schedule whether or not earlier ones were answered,
 * and latency counts from the scheduled time, so a stalled server cannot hide its queueing
 * (no coordinated omission). Timers fire at ~1 ms granularity; late ticks send the overdue
 * requests at once, and that lateness is charged to the measurement, never hidden.
 */
async function openLoop(spec: LoadSpec, rate: number): Promise<LoadResult> {
  const url = new URL(spec.url);
  const pool = new Pool(url, spec.connections, REQUEST_TIMEOUT_MS);
  const recorder = new Recorder();
  const window = windowTimers(spec, performance.now());
  const interval = 1000 / rate;
  const inFlight = new Set<Promise<void>>();
  let next = performance.now();
  await new Promise<void>((finished) => {
    const tick = () => {
      const now = performance.now();
      while (next <= now && next < window.closesAt) {
        const scheduled = next;
        const { head, body } = nextRequest(url, spec);
        const sentLate = performance.now() - scheduled;
        const done = pool.request(head, body).then((status) => {
          recorder.record(status, performance.now() - scheduled, scheduled >= window.opensAt, sentLate);
          inFlight.delete(done);
        });
        inFlight.add(done);
        next += interval;
      }
      if (next >= window.closesAt) return finished();
      setTimeout(tick, Math.max(0, next - performance.now()));
    };
    tick();
  });
  await Promise.all(inFlight);
  await window.done;
  pool.close();
  return recorder.result(spec.durationMs, window.busy());
}

function send(message: ChildMessage): void {
  process.send?.(message);
}

process.on("message", (message: ParentMessage) => {
  const { spec } = message;
  const run = spec.rate ? openLoop(spec, spec.rate) : closedLoop(spec);
  run.then(
    (result) => send({ type: "result", result }),
    (error: unknown) => {
      // A bug in the generator, not a server failure: make it loud and end the run.
      console.error("load generator failed:", error);
      process.exitCode = 1;
      process.disconnect?.();
    },
  );
});
