import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { sleep } from "../bench/stats.ts";
import { ENV_VARIABLES } from "../src/config/env.ts";
import buildWhenStale, { MAIN_JS } from "../test/support/build.ts";

/**
 * The system's real processes, started the way operators start them (`node dist/main.js
 * <role>`, npm run build's output), configured by environment variables only, each writing
 * its log lines to a file of its own.
 */

export type Role = "web" | "worker" | "migrate";

/** dist/main.js, built first when src/ is newer, so a scenario or benchmark run alone runs what src/ says. */
export function builtMain(): string {
  buildWhenStale();
  return MAIN_JS;
}

/**
 * The environment every process starts from: ours, minus anything the system would read as
 * its configuration (a developer's exported DATABASE_URL must not leak into a scenario).
 * The processes run in the log directory, so no .env file of a checkout is loaded either.
 */
export function baseEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  const ours = new Set([...ENV_VARIABLES, "RECONCILE_INTERVAL_MS", "RECONCILE_AFTER_MS"]);
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined && !ours.has(name)) env[name] = value;
  return env;
}

export class RoleProcess {
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Set once we kill it: any other exit is the system's own doing, worth reporting. */
  killedOnPurpose = false;
  /** How it ended, once it has. */
  exit: string | undefined;

  private constructor(
    /** "web", "worker-1", … */
    readonly name: string,
    readonly logPath: string,
    private readonly child: ChildProcess,
  ) {
    this.exited = new Promise((resolve) =>
      child.once("exit", (code, signal) => {
        this.exit = signal ?? `exit code ${code}`;
        resolve({ code, signal });
      }),
    );
  }

  static spawn(name: string, role: Role, env: Record<string, string>, logDir: string): RoleProcess {
    const logPath = join(logDir, `${name}.log`);
    const log = openSync(logPath, "a");
    try {
      const child = spawn(process.execPath, [builtMain(), role], {
        cwd: logDir,
        env: { ...baseEnv(), ...env },
        stdio: ["ignore", log, log],
      });
      return new RoleProcess(name, logPath, child);
    } finally {
      closeSync(log); // the child has its own copy
    }
  }

  get pid(): number {
    if (this.child.pid === undefined) throw new Error(`${this.name} did not start (see ${this.logPath})`);
    return this.child.pid;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** SIGSTOP, SIGCONT, SIGKILL, …: delivered to the process itself (it is node, not a wrapper). */
  signal(signal: NodeJS.Signals): void {
    if (!this.running) return;
    if (signal === "SIGKILL" || signal === "SIGTERM" || signal === "SIGINT") this.killedOnPurpose = true;
    this.child.kill(signal);
  }

  /** SIGKILL and wait for the exit; harmless when it has already exited. */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.signal("SIGKILL");
    await this.exited;
  }

  /**
   * The end of its log, for an error message: CI keeps only what the test printed, and the log
   * folder is gone with the machine.
   */
  async logTail(lines = 15): Promise<string> {
    const log = await readFile(this.logPath, "utf8").catch(() => "");
    return log.trimEnd().split("\n").slice(-lines).join("\n");
  }

  /** Why it stopped, for an error message: how it exited and its log's last lines. */
  async stoppedBecause(what: string): Promise<Error> {
    return new Error(`${this.name} ${what} (${this.exit ?? "still running"}; ${this.logPath} ends:\n${await this.logTail()})`);
  }

  /** Resolves once the process has logged `event` (a pino line with "event":"…"). */
  async waitForEvent(event: string, timeoutMs: number): Promise<void> {
    const needle = `"event":"${event}"`;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const log = await readFile(this.logPath, "utf8").catch(() => "");
      if (log.includes(needle)) return;
      if (!this.running) throw await this.stoppedBecause(`exited before logging ${event}`);
      if (Date.now() > deadline) throw new Error(`${this.name} did not log ${event} within ${timeoutMs} ms (see ${this.logPath})`);
      await sleep(100);
    }
  }

  /** For a process that should finish by itself (migrate): its exit, or an error naming the log. */
  async finished(timeoutMs: number): Promise<void> {
    const outcome = await Promise.race([this.exited, sleep(timeoutMs).then(() => undefined)]);
    if (!outcome) {
      await this.kill();
      throw new Error(`${this.name} did not finish within ${timeoutMs} ms (see ${this.logPath})`);
    }
    if (outcome.code !== 0) throw await this.stoppedBecause("failed");
  }
}
