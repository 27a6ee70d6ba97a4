import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { getPriority } from "node:os";
import { afterEach, describe, expect, it } from "vitest";
import { signMetaBody } from "../src/webhook/signature.ts";
import { MAIN_JS } from "./support/build.ts";
import { PATIENT_TIMEOUTS, PROCESS_DEADLINE_MS } from "./support/entry-point.ts";
import { eventually, type Harness, startHarness, TEST_APP_SECRET, testEnv } from "./support/harness.ts";
import { freePort } from "./support/ports.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * `npm start` (src/main.ts all --migrate) as real processes: the web acknowledges webhooks on
 * its own event loop and the workers run in a child process of it, which it drains after the
 * web on SIGTERM and starts again when it dies (issue 10, target 5).
 */

interface LogLine {
  pid: number;
  event?: string;
  [field: string]: unknown;
}

interface AllInOne {
  process: ChildProcess;
  base: string;
  metricsUrl: string;
  lines: LogLine[];
  output(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The first log line with this event (and matching `where`), once it has been written. */
  event(event: string, where?: (line: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
}

let h: Harness | undefined;
let started: AllInOne | undefined;
const pidsToKill = new Set<number>();

afterEach(async () => {
  if (started && started.process.exitCode === null && started.process.signalCode === null) started.process.kill("SIGKILL");
  for (const pid of pidsToKill) if (isRunning(pid)) process.kill(pid, "SIGKILL");
  pidsToKill.clear();
  started = undefined;
  await h?.close();
  h = undefined;
});

async function startAll(harness: Harness, attempt = 1): Promise<AllInOne> {
  const [port, metricsPort] = [await freePort(), await freePort()];
  const child = spawn(process.execPath, [MAIN_JS, "all", "--migrate"], {
    env: {
      ...process.env,
      ...harness.env,
      PORT: String(port),
      HOST: "127.0.0.1",
      METRICS_PORT: String(metricsPort),
      LOG_LEVEL: "info",
      ...PATIENT_TIMEOUTS,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const lines: LogLine[] = [];
  let partial = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    output += chunk.toString();
    const text = partial + chunk.toString();
    const complete = text.split("\n");
    partial = complete.pop() ?? "";
    for (const line of complete) if (line.startsWith("{")) lines.push(JSON.parse(line) as LogLine);
  });
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const all: AllInOne = {
    process: child,
    base: `http://127.0.0.1:${port}`,
    metricsUrl: `http://127.0.0.1:${metricsPort}/metrics`,
    lines,
    output: () => output,
    exited,
    event: (event, where = () => true, timeoutMs = PROCESS_DEADLINE_MS) =>
      eventually(() => lines.find((line) => line.event === event && where(line)), `the log line ${event}`, timeoutMs),
  };
  started = all;
  let gone: string | undefined;
  void exited.then(({ code, signal }) => (gone = `exited (${signal ?? `code ${code}`}) before it was ready:\n${output}`));
  await eventually(
    () =>
      gone !== undefined ||
      fetch(`${all.base}/readyz`).then(
        (r) => r.ok,
        () => false,
      ),
    "the web to be ready",
    PROCESS_DEADLINE_MS,
  );
  // The worker child (niceness 19) says it has started its workers: what a test waits for next is their work.
  await eventually(() => gone !== undefined || lines.some((line) => line.event === "worker.child_started"), "the worker child to start", PROCESS_DEADLINE_MS);
  if (gone === undefined) return all;
  // Another test took a port between freePort() and our listen: try again on new ones.
  if (/EADDRINUSE/.test(gone) && attempt < 3) return startAll(harness, attempt + 1);
  throw new Error(`npm start ${gone}`);
}

async function post(base: string, text: string, from?: string): Promise<number> {
  const { body } = textWebhook({ text, ...(from ? { from } : {}) });
  const res = await fetch(`${base}/webhook`, {
    method: "POST",
    body,
    headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(body, TEST_APP_SECRET) },
  });
  return res.status;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false; // ESRCH: no such process
  }
}

/** Fields of /proc/<path>/stat from the fourth on (the third, the command, may hold spaces). */
function statFields(path: string): string[] {
  const stat = readFileSync(`/proc/${path}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

const parentOf = (pid: number) => Number(statFields(String(pid))[1]);

const sessionOf = (pid: number) => Number(statFields(String(pid))[3]);

/** "/autogroup-<n> nice <k>": the scheduling group of a process's session, where Linux has autogroups. */
const autogroupOf = (pid: number | "self") => readFileSync(`/proc/${pid}/autogroup`, "utf8").trim();

/** The niceness of each thread of a process. */
const nicenessOfThreads = (pid: number) => readdirSync(`/proc/${pid}/task`).map((tid) => Number(statFields(`${pid}/task/${tid}`)[16]));

const scrape = (url: string) =>
  fetch(url).then(
    (r) => (r.ok ? r.text() : ""),
    () => "",
  );

describe("npm start: the web and its worker child", () => {
  it("acknowledges on the web's process and answers from a child process, with both on the one metrics listener", async () => {
    h = await startHarness({ workers: 0 });
    const all = await startAll(h);
    const webPid = all.process.pid!;
    const childPid = Number((await all.event("worker.child_started")).child);
    pidsToKill.add(childPid);

    expect(childPid).not.toBe(webPid);
    expect(parentOf(childPid)).toBe(webPid);
    // The jobs yield the CPU to the acks: every thread of the child at the lowest priority.
    expect(new Set(nicenessOfThreads(childPid))).toEqual(new Set([19]));
    expect(nicenessOfThreads(webPid)[0]).toBe(getPriority()); // the web keeps the priority it was started with
    // In a session of its own, whose scheduling group is lowered too: where the kernel shares
    // the CPU between sessions first, the child must not spend the web's share.
    expect(sessionOf(childPid)).toBe(childPid);
    expect(sessionOf(webPid)).toBe(sessionOf(process.pid));
    if (existsSync("/proc/self/autogroup")) {
      expect(autogroupOf(childPid)).toMatch(/ nice 19$/);
      expect(autogroupOf(webPid)).toBe(autogroupOf("self"));
    }
    expect(await post(all.base, "who answers?")).toBe(200);
    await eventually(() => h!.graph.sentTexts.length === 1, "the reply to be sent", PROCESS_DEADLINE_MS);

    // The honest observable: each log line carries the pid of the process that wrote it.
    expect((await all.event("webhook.enqueued")).pid).toBe(webPid);
    expect((await all.event("reply.sent")).pid).toBe(childPid);
    expect(all.lines.filter((l) => l.event === "worker.started").map((l) => l.pid)).toEqual([childPid]);
    expect(all.lines.filter((l) => l.event === "db.migrated").map((l) => l.pid)).toEqual([webPid]); // once, before either starts

    // One listener for both processes: the child's job counters and each process's own series.
    const metrics = await eventually(async () => {
      const text = await scrape(all.metricsUrl);
      return text.includes('wa_jobs_total{queue="reply",outcome="sent",role="worker"} 1') ? text : "";
    }, "the child's reply counted on the parent's metrics listener");
    expect(metrics).toMatch(/^process_cpu_user_seconds_total\{role="web"\} /m);
    expect(metrics).toMatch(/^process_cpu_user_seconds_total\{role="worker"\} /m);
    expect(metrics).toContain('wa_worker_process_up{role="web"} 1');
    expect(metrics.match(/^# TYPE process_cpu_user_seconds_total /gm)).toHaveLength(1); // one family, two series
    expect(all.lines.filter((l) => l.event === "worker.child_exited")).toEqual([]); // no fight over a port
  }, 900_000);

  it("a killed worker child is noticed, logged and counted, and a new child answers", async () => {
    h = await startHarness({ workers: 0 });
    const all = await startAll(h);
    const first = Number((await all.event("worker.child_started")).child);
    pidsToKill.add(first);

    process.kill(first, "SIGKILL");
    const death = await all.event("worker.child_exited");
    expect(death).toMatchObject({ pid: all.process.pid, level: 50, child: first, signal: "SIGKILL", restartInMs: 1000 });
    const second = Number((await all.event("worker.child_started", (l) => l.child !== first)).child);
    pidsToKill.add(second);
    expect(second).not.toBe(first);
    expect(parentOf(second)).toBe(all.process.pid);

    expect(await post(all.base, "are you back?")).toBe(200);
    await eventually(() => h!.graph.sentTexts.length === 1, "the new child to reply", PROCESS_DEADLINE_MS);
    expect((await all.event("reply.sent")).pid).toBe(second);
    const metrics = await scrape(all.metricsUrl);
    expect(metrics).toContain('wa_worker_process_restarts_total{role="web"} 1');
    expect(metrics).toContain('wa_worker_process_up{role="web"} 1');
  }, 900_000);

  it("on SIGTERM the web stops taking webhooks first, the child finishes its reply in flight, and the parent exits 0 after it", async () => {
    h = await startHarness({ workers: 0 });
    const all = await startAll(h);
    const webPid = all.process.pid!;
    const childPid = Number((await all.event("worker.child_started")).child);
    pidsToKill.add(childPid);

    h.claude.latencyMs = 3000; // Claude is still writing when the signal arrives
    expect(await post(all.base, "still there?")).toBe(200);
    await eventually(() => h!.claude.inFlight === 1, "the reply to be in Claude's hands", PROCESS_DEADLINE_MS);

    all.process.kill("SIGTERM");
    // The web's port is closed while the child is still draining its reply.
    await eventually(
      () =>
        fetch(`${all.base}/healthz`).then(
          () => false,
          () => true,
        ),
      "the web to stop listening",
      5000,
    );
    expect(isRunning(childPid)).toBe(true);
    expect(h.claude.inFlight).toBe(1);

    expect(await all.exited).toEqual({ code: 0, signal: null });
    expect(isRunning(childPid)).toBe(false);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]); // the active job finished before the exit
    expect(await h.db.reply.count({ where: { state: "sent" } })).toBe(1);
    // Each process's own lines are in order; across the two, the pipe may interleave them
    // late, so their clocks say which came first.
    const steps = (pid: number) =>
      all.lines.filter((l) => l.pid === pid && ["shutdown.start", "shutdown.done", "reply.sent", "worker.child_stopped"].includes(l.event ?? ""));
    expect(steps(webPid).map((l) => l.event)).toEqual(["shutdown.start", "worker.child_stopped", "shutdown.done"]);
    expect(steps(childPid).map((l) => l.event)).toEqual(["shutdown.start", "reply.sent", "shutdown.done"]);
    const [webStart, childStopped] = [steps(webPid)[0]!, steps(webPid)[1]!];
    const [childStart, childDone] = [steps(childPid)[0]!, steps(childPid)[2]!];
    expect(childStart.time as number).toBeGreaterThanOrEqual(webStart.time as number);
    expect(childStopped.time as number).toBeGreaterThanOrEqual(childDone.time as number);
    expect(await all.event("worker.child_stopped")).toMatchObject({ code: 0 });
    expect(all.lines.filter((l) => l.event === "shutdown.deferred")).toEqual([]); // the signal went to the parent only
    await expect(fetch(all.metricsUrl)).rejects.toThrow();
  }, 900_000);

  it("a signal to both processes at once (systemd's way) leaves the child waiting for the parent's word, and the drain keeps its order", async () => {
    h = await startHarness({ workers: 0 });
    const all = await startAll(h);
    const webPid = all.process.pid!;
    const childPid = Number((await all.event("worker.child_started")).child);
    pidsToKill.add(childPid);
    h.claude.latencyMs = 1500;
    expect(await post(all.base, "are you closing?")).toBe(200);
    await eventually(() => h!.claude.inFlight === 1, "the reply to be in Claude's hands", PROCESS_DEADLINE_MS);

    // systemd signals every process of the service's cgroup. (A terminal's Ctrl-C signals its
    // foreground process group, which the child, leading a session of its own, is not in.)
    process.kill(webPid, "SIGINT");
    process.kill(childPid, "SIGINT");
    expect(await all.exited).toEqual({ code: 0, signal: null });
    expect(await all.event("shutdown.deferred")).toMatchObject({ pid: childPid, signal: "SIGINT" });
    expect(await all.event("shutdown.start", (l) => l.pid === childPid)).toMatchObject({ reason: "asked by the parent" });
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect(isRunning(childPid)).toBe(false);
  }, 900_000);

  it("a worker child never outlives its parent: when the parent is killed, the child drains and exits", async () => {
    h = await startHarness({ workers: 0 });
    const all = await startAll(h);
    const childPid = Number((await all.event("worker.child_started")).child);
    pidsToKill.add(childPid);

    all.process.kill("SIGKILL");
    await all.exited;
    await eventually(() => !isRunning(childPid), "the orphaned child to exit", PROCESS_DEADLINE_MS);
    expect(await all.event("shutdown.start", (l) => l.pid === childPid)).toMatchObject({ reason: "the parent is gone" });
  }, 900_000);

  it("a bad environment stops npm start before anything starts, naming each bad variable once", () => {
    const env = { ...testEnv({ WHATSAPP_ACCESS_TOKEN: "", REPLY_CONCURRENCY: "0" }), PATH: process.env.PATH ?? "", LOG_LEVEL: "info" };
    const result = spawnSync(process.execPath, [MAIN_JS, "all", "--migrate"], { env, encoding: "utf8", timeout: PROCESS_DEADLINE_MS });
    expect(result.status).toBe(1);
    expect(result.stderr.split("WHATSAPP_ACCESS_TOKEN is required")).toHaveLength(2);
    expect(result.stderr.split("REPLY_CONCURRENCY must be an integer")).toHaveLength(2);
    expect(result.stdout).toBe(""); // no migration, no web, no worker child
  });
});
