import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ENV_VARIABLES } from "../src/config/env.ts";

/**
 * A TypeScript entry run as a node process of its own through tsx's loader, with node flags of
 * our choosing: the floor worker (bench/floor-worker.ts), and the real worker under
 * `--cpu-prof`, which Node refuses in NODE_OPTIONS and chaos/processes.ts's RoleProcess has no
 * way to pass. Same environment rules as RoleProcess: ours, minus every variable the system
 * reads as configuration, plus `env`; output to a log file.
 */

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const TSX_LOADER = import.meta.resolve("tsx");

export const MAIN = join(ROOT, "src", "main.ts");

export class NodeProcess {
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  private constructor(
    readonly logPath: string,
    private readonly child: ChildProcess,
  ) {
    this.exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  }

  /** `node [nodeArgs] --import tsx <script> [args]`, in `logDir`, writing to `<name>.log` there. */
  static spawn(name: string, script: string, args: string[], options: { env: Record<string, string>; logDir: string; nodeArgs?: string[] }): NodeProcess {
    const logPath = join(options.logDir, `${name}.log`);
    const log = openSync(logPath, "a");
    try {
      const child = spawn(process.execPath, [...(options.nodeArgs ?? []), "--import", TSX_LOADER, script, ...args], {
        cwd: options.logDir,
        env: { ...baseEnv(), ...options.env },
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

function baseEnv(): Record<string, string> {
  const ours = new Set([...ENV_VARIABLES, "RECONCILE_INTERVAL_MS", "RECONCILE_AFTER_MS"]);
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined && !ours.has(name)) env[name] = value;
  env.TSX_TSCONFIG_PATH = join(ROOT, "tsconfig.json");
  return env;
}
