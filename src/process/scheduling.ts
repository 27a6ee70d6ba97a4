import { type ChildProcess, fork } from "node:child_process";
import { existsSync, readdirSync, writeFileSync } from "node:fs";
import { setPriority } from "node:os";

/**
 * Where `npm start`'s worker child runs, as the kernel sees it: a process of its own, in a
 * session of its own, at the lowest CPU priority, so the web's acks come first when the CPU is
 * short (bench/RESULTS.md). src/main.ts forks it and owns the signals; worker-child.ts speaks
 * with it.
 */

/** How `all` starts its worker child (the entry point again); not for operators. */
export const WORKER_CHILD_FLAG = "--worker-child";

/**
 * The worker child's CPU priority: the lowest. When the CPU is short, the web's acks (and
 * Redis and Postgres, which they wait on) come first; the jobs still get every cycle the web
 * does not use, and a job is seconds of work where an ack is milliseconds.
 */
export const WORKER_CHILD_NICENESS = 19;

export function forkWorkerChild(entry: string): ChildProcess {
  // The child runs the same entry point with the same node flags (dist/main.js as shipped; the
  // sources under a loader's flags in development); stdout and stderr are inherited, so its log
  // lines never pass through the web's event loop; "advanced" serialisation keeps the Config's Map.
  const child = fork(entry, ["worker", WORKER_CHILD_FLAG], {
    execArgv: process.execArgv,
    serialization: "advanced",
    stdio: "inherit",
    // A session of its own, so a scheduling group of its own (lowerAutogroup). The parent still
    // owns the signals: the child drains on its word, or when the IPC channel closes.
    detached: true,
  });
  // Lowered from the start, so its start-up (loading and compiling the sources) yields too and
  // the threads it makes inherit it; the child lowers the threads that came before this itself.
  if (child.pid !== undefined) {
    lowerPriority(child.pid, WORKER_CHILD_NICENESS);
    lowerAutogroup(child.pid, WORKER_CHILD_NICENESS);
  }
  return child;
}

/**
 * Lowers this process's CPU priority. Linux keeps a niceness per thread: every thread that
 * exists now (V8's helpers) is lowered, and threads made later (libuv's pool) inherit it.
 */
export function yieldTheCpu(niceness: number): void {
  const threads = existsSync("/proc/self/task") ? readdirSync("/proc/self/task").map(Number) : [0];
  for (const thread of threads) lowerPriority(thread, niceness);
}

function lowerPriority(pidOrThread: number, niceness: number): void {
  try {
    setPriority(pidOrThread, niceness);
  } catch (error) {
    // One that ended meanwhile has nothing left to lower; anything else is worth a line.
    if ((error as { info?: { code?: string } }).info?.code !== "ESRCH") console.error("could not lower the worker's CPU priority:", error);
  }
}

/**
 * Where Linux's autogroup is on (the default on many distributions, outside containers), the
 * CPU is shared between sessions first and a thread's niceness counts only within its session:
 * a worker child in the web's session at niceness 19 still spends the web's share, and a
 * webhook woken behind it waits for the session's next turn. In a session of its own (the fork
 * is detached), its group gets the same niceness. No autogroup (no such file): the threads'
 * niceness is all there is.
 */
function lowerAutogroup(pid: number, niceness: number): void {
  try {
    writeFileSync(`/proc/${pid}/autogroup`, String(niceness));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") console.error("could not lower the worker's scheduling group:", error);
  }
}
