import { type ChildProcess, fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";

/**
 * The HTTP load generator runs in a child process (bench/load-child.ts), not in the process
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
  windowMs: number;
  /** Event-loop utilisation of the generator itself: near 1 means the generator, not the server, was the limit. */
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

export class LoadGenerator {
  private constructor(private readonly child: ChildProcess) {}

  static start(): LoadGenerator {
    // process.execArgv carries tsx's loader flags, so the child can run TypeScript too;
    // "advanced" serialisation sends the latency arrays as typed arrays, not JSON.
    const child = fork(CHILD, [], { execArgv: process.execArgv, serialization: "advanced", stdio: "inherit" });
    return new LoadGenerator(child);
  }

  run(spec: LoadSpec, hooks: WindowHooks = {}): Promise<LoadResult> {
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
        this.child.off("message", onMessage);
        this.child.off("exit", onExit);
      };
      this.child.on("message", onMessage);
      this.child.on("exit", onExit);
      const message: ParentMessage = { type: "run", spec };
      this.child.send(message);
    });
  }

  /** Disconnecting the IPC channel is the child's cue to finish; it exits by itself. */
  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, "exit");
    if (this.child.connected) this.child.disconnect();
    await exited;
  }
}
