import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { baseEnv } from "../chaos/processes.ts";

/**
 * A script run as a node process of its own, with node flags of our choosing: the floor worker
 * (bench/floor-worker.ts, through tsx's loader), and the real worker (MAIN_JS, compiled as it
 * ships) under `--cpu-prof`, which Node refuses in NODE_OPTIONS and chaos/processes.ts's
 * RoleProcess has no way to pass. Same environment rules as RoleProcess: ours, minus every
 * variable the system reads as configuration, plus `env`; output to a log file.
 */

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const TSX_LOADER = import.meta.resolve("tsx");

export class NodeProcess {
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  private constructor(
    readonly logPath: string,
    private readonly child: ChildProcess,
  ) {
    this.exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  }

  /** `node [nodeArgs] [--import tsx, for a .ts script] <script> [args]`, in `logDir`, writing to `<name>.log` there. */
  static spawn(name: string, script: string, args: string[], options: { env: Record<string, string>; logDir: string; nodeArgs?: string[] }): NodeProcess {
    const logPath = join(options.logDir, `${name}.log`);
    const log = openSync(logPath, "a");
    try {
      const loader = script.endsWith(".ts") ? ["--import", TSX_LOADER] : [];
      const child = spawn(process.execPath, [...(options.nodeArgs ?? []), ...loader, script, ...args], {
        cwd: options.logDir,
        env: { ...baseEnv(), TSX_TSCONFIG_PATH: join(ROOT, "tsconfig.json"), ...options.env },
        stdio: ["ignore", log, log],
      });
      return new NodeProcess(logPath, child);
    } finally {
      closeSync(log); // the child has its own copy
    }
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error(`the process did not start (see ${this.logPath})`);
    return this.child.pid;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  signal(signal: NodeJS.Signals): void {
    if (this.running) this.child.kill(signal);
  }

  async kill(): Promise<void> {
    if (!this.running) return;
    this.child.kill("SIGKILL");
    await this.exited;
  }
}
