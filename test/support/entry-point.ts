import { type ChildProcess, spawn } from "node:child_process";
import { signMetaBody } from "../../src/webhook/signature.ts";
import { MAIN_JS } from "./build.ts";
import { eventually, TEST_APP_SECRET } from "./harness.ts";

/**
 * How long a process of dist/main.js is given to report that it is ready, or to finish what it
 * was handed, before a test gives up on it. npm start's worker child runs at niceness 19, in a
 * scheduling group of its own at niceness 19 too, so while other sessions keep both cores busy
 * it gets about 1.5 % of one: it needs about 2 s of CPU to start and 0.6 s to answer once, so
 * 2-3 minutes to start (CI at a load of 9-13 gave up after 27-39 s). A deadline, not an
 * expectation: an idle machine gets there in 3 s. A test that waits on processes this way
 * several times has a timeout of 900 s.
 */
export const PROCESS_DEADLINE_MS = 300_000;

/**
 * The system's own timeouts, as patient as the test's deadlines, for npm start in a test: the
 * niceness-19 worker child on a loaded machine can wait seconds for the CPU between sending a
 * request and reading its answer, and the harness's short ones (a 2 s Graph call, a 5 s Claude
 * call) would turn a slow machine into a timed-out send or a retried job the test is not about;
 * its drain, too, may need longer than the default 25 s.
 */
export const PATIENT_TIMEOUTS: Record<string, string> = {
  GRAPH_TIMEOUT_MS: "60000",
  ANTHROPIC_TIMEOUT_MS: "60000",
  JOB_LOCK_MS: String(PROCESS_DEADLINE_MS),
  SHUTDOWN_TIMEOUT_MS: String(PROCESS_DEADLINE_MS),
};

/** dist/main.js as operators run it, in a process of its own, its log collected. */
export interface EntryPoint {
  child: ChildProcess;
  /** Everything it wrote so far, stdout and stderr. */
  readonly output: string;
  /** Its exit code, once it has exited. */
  exited: Promise<number | null>;
  /** Its JSON log lines with this event so far. */
  events(event: string): LogLine[];
  /** The first log line with this event, once written; fails with the output if it exits first. */
  event(event: string, timeoutMs?: number): Promise<LogLine>;
}

export interface LogLine {
  pid: number;
  event?: string;
  [field: string]: unknown;
}

/** `node dist/main.js <args>` with the test's environment over this one's; a variable set to undefined is unset. */
export function runEntryPoint(args: string[], env: Record<string, string | undefined>): EntryPoint {
  let output = "";
  const child = spawn(process.execPath, [MAIN_JS, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const events = (event: string) =>
    output
      .split("\n")
      .slice(0, -1) // the last is still being written
      .filter((line) => line.startsWith("{") && line.includes(`"event":"${event}"`))
      .map((line) => JSON.parse(line) as LogLine);
  return {
    child,
    get output() {
      return output;
    },
    exited,
    events,
    event: (event, timeoutMs = PROCESS_DEADLINE_MS) =>
      eventually(
        () => {
          const found = events(event)[0];
          if (!found && child.exitCode !== null) throw new Error(`exited with ${child.exitCode} before logging ${event}:\n${output}`);
          return found;
        },
        `the log line ${event}`,
        timeoutMs,
      ),
  };
}

/** A signed delivery, as Meta makes it, to the web listening at `base`. */
export function deliverOverHttp(base: string, body: string): Promise<Response> {
  return fetch(`${base}/webhook`, {
    method: "POST",
    body,
    headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(body, TEST_APP_SECRET) },
  });
}

/** Until the process at `base` answers /readyz with 200 (Redis and Postgres reachable). */
export async function untilReady(base: string, timeoutMs = PROCESS_DEADLINE_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (
    !(await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${base} to be ready`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
