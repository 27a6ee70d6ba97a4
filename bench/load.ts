import { type ChildProcess, fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

/**
 * The HTTP load generator runs in child processes (bench/load-child.ts), not in the process
 * under test: on a 2-core machine a generator sharing the server's event loop would steal
 * exactly the time we are trying to measure, and process.cpuUsage() would mix both.
 */

export interface LoadSpec {
  /** Full URL of the POST target, e.g. http://127.0.0.1:41234/webhook. */
  url: string;
  /** Goes into every wamid, so messages are unique across runs and targets. */
  label: string;
  /** Key of X-Hub-Signature-256, the app's WHATSAPP_APP_SECRET. */
  appSecret: string;
  /** Closed loop: this many keep-alive connections, each sending its next request when the last is answered. Open loop: the socket pool size. */
  connections: number;
  warmupMs: number;
  durationMs: number;
  /** Open loop at this many requests/s when set (latency measured from the scheduled send time). */
  rate?: number;
}

export interface LoadResult {
  /** Requests started inside the measured window. */
  sent: number;
  /** 200s among them, and everything else (other statuses and transport errors). */
  ok: number;
  non200: number;
  /** Status code (or "error") → count, over the whole run, warm-up included. */
  statuses: Record<string, number>;
  /** 200s over the whole run, warm-up and tail included: what must have reached the queue. */
  totalOk: number;
  /** Latency of each measured request, ms. */
  latenciesMs: Float64Array;
  /**
   * Open loop: how late the generator itself sent each measured request after its scheduled
   * time, ms (empty in a closed loop). Part of that request's latency, but the generator's
   * delay, not the server's: on a shared machine it waits for a CPU too.
   */
  sentLateMs: Float64Array;
  windowMs: number;
  /** Event-loop utilisation of the generator itself (the busiest, with several): near 1 means the generator, not the server, was the limit. */
  generatorBusy: number;
}

export type ParentMessage = { type: "run"; spec: LoadSpec };
export type ChildMessage = { type: "measuring" } | { type: "measured" } | { type: "result"; result: LoadResult };

export interface WindowHooks {
  /** Called as the measured window opens and closes, to snapshot the server side at the same moments. */
  onMeasureStart?: () => void | Promise<void>;
  onMeasureEnd?: () => void | Promise<void>;
}

const CHILD = fileURLToPath(new URL("./load-child.ts", import.meta.url));

/**
 * How many generator processes share a run (BENCH_GENERATORS). One runs 76-89 % busy against
 * the bare Fastify route on a 2-core machine, yet more are slower there: alternating in one
 * run (load average 2-3), the bare route did 49-62 k req/s with one, 39-46 k with two and
 * 38-42 k with three, since each takes CPU the server needs. So the baseline is bound by the
 * machine, not by one generator, and one stays the default. (With other sessions loading the
 * machine, load average 8-11, three did better than one: more processes, a larger share of a
 * contended CPU; such runs measure the neighbours.) On a machine with more cores, try more.
 */
const DEFAULT_GENERATORS = 1;

/** A load generator made of `count` child processes; each run is split evenly across them. */
export class LoadGenerator {
  private constructor(private readonly children: ChildProcess[]) {}

  /**
   * `ownSession`: the children in a session of their own, so (where Linux's autogroup is on) in
   * a CPU group of their own, as clients on other machines would be, not in this process's
   * group with whatever it serves (the isolation bench's fakes of Claude and Meta).
   */
  static start(count = Number(process.env.BENCH_GENERATORS ?? DEFAULT_GENERATORS), { ownSession = false } = {}): LoadGenerator {
    if (!Number.isInteger(count) || count < 1) throw new Error(`BENCH_GENERATORS must be a positive integer, not ${count}`);
    // process.execArgv carries tsx's loader flags, so the children can run TypeScript too;
    // "advanced" serialisation sends the latency arrays as typed arrays, not JSON.
    const children = Array.from({ length: count }, () =>
      fork(CHILD, [], { execArgv: process.execArgv, serialization: "advanced", stdio: "inherit", detached: ownSession }),
    );
    return new LoadGenerator(children);
  }

  get processes(): number {
    return this.children.length;
  }

  /**
   * The connections (and an open loop's rate) are shared out among the children, each with a
   * label of its own so every wamid stays unique. The hooks run once: when the first child's
   * window opens and when the last one's closes (they start together, within a millisecond).
   */
  async run(spec: LoadSpec, hooks: WindowHooks = {}): Promise<LoadResult> {
    const n = Math.min(this.children.length, spec.connections);
    const parts = this.children.slice(0, n).map((child, i) => {
      const connections = Math.floor(spec.connections / n) + (i < spec.connections % n ? 1 : 0);
      const part: LoadSpec = { ...spec, label: `${spec.label}g${i}`, connections };
      if (spec.rate !== undefined) part.rate = spec.rate / n;
      return { child, part };
    });
    let opened = 0;
    let closed = 0;
    const results = await Promise.all(
      parts.map(({ child, part }) =>
        runOn(child, part, {
          onMeasureStart: () => (++opened === 1 ? hooks.onMeasureStart?.() : undefined),
          onMeasureEnd: () => (++closed === n ? hooks.onMeasureEnd?.() : undefined),
        }),
      ),
    );
    return mergeResults(results);
  }

  /** Disconnecting the IPC channel is each child's cue to finish; it exits by itself. */
  async close(): Promise<void> {
    await Promise.all(
      this.children.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = once(child, "exit");
        if (child.connected) child.disconnect();
        await exited;
      }),
    );
  }
}

function runOn(child: ChildProcess, spec: LoadSpec, hooks: WindowHooks): Promise<LoadResult> {
  return new Promise<LoadResult>((resolve, reject) => {
    const pending: Promise<void>[] = [];
    const onMessage = (message: ChildMessage) => {
      if (message.type === "measuring") pending.push(Promise.resolve(hooks.onMeasureStart?.()));
      else if (message.type === "measured") pending.push(Promise.resolve(hooks.onMeasureEnd?.()));
      else {
        cleanup();
        Promise.all(pending).then(() => resolve(message.result), reject);
      }
    };
    const onExit = (code: number | null) => {
      cleanup();
      reject(new Error(`load generator exited with code ${code} during "${spec.label}"`));
    };
    const cleanup = () => {
      child.off("message", onMessage);
      child.off("exit", onExit);
    };
    child.on("message", onMessage);
    child.on("exit", onExit);
    const message: ParentMessage = { type: "run", spec };
    child.send(message);
  });
}

/** One result for the run: counts summed, latencies and lateness pooled, and the busiest generator's busyness. */
function mergeResults(results: LoadResult[]): LoadResult {
  const statuses: Record<string, number> = {};
  for (const result of results) for (const [status, n] of Object.entries(result.statuses)) statuses[status] = (statuses[status] ?? 0) + n;
  const pooled = (pick: (r: LoadResult) => Float64Array) => {
    const all = new Float64Array(results.reduce((sum, r) => sum + pick(r).length, 0));
    let at = 0;
    for (const result of results) {
      all.set(pick(result), at);
      at += pick(result).length;
    }
    return all;
  };
  const total = (pick: (r: LoadResult) => number) => results.reduce((sum, r) => sum + pick(r), 0);
  return {
    sent: total((r) => r.sent),
    ok: total((r) => r.ok),
    non200: total((r) => r.non200),
    statuses,
    totalOk: total((r) => r.totalOk),
    latenciesMs: pooled((r) => r.latenciesMs),
    sentLateMs: pooled((r) => r.sentLateMs),
    windowMs: Math.max(...results.map((r) => r.windowMs)),
    generatorBusy: Math.max(...results.map((r) => r.generatorBusy)),
  };
}
