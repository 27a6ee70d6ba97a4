import { mkdtemp, readFile, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { builtMain, RoleProcess } from "../chaos/processes.ts";
import { loadSettings } from "../src/settings.ts";
import type { RecordedRequest } from "../test/support/fake-graph.ts";
import { type Harness, startHarness } from "../test/support/harness.ts";
import { seedHistory } from "../test/support/seed-history.ts";
import { textWebhook } from "../test/support/webhook-bodies.ts";
import { NodeProcess } from "./node-process.ts";
import { processStat } from "./proc.ts";
import { logNormalDraw, percentile, sleep } from "./stats.ts";

export interface EndToEndScenario {
  name: string;
  messages: number;
  rounds: number;
  claudeLatencyMs: number;
  /** Set: each Claude call's latency is drawn from this log-normal instead, the same sequence every round (issue 36.3). */
  claudeLatency?: { medianMs: number; p95Ms: number; seed: number } | undefined;
  replyConcurrency: number;
  /** Messages already stored (seeded) before the worker starts: 0 for an empty database. */
  storedMessages: number;
  /** Webhook POSTs in flight at once while delivering (the inject path; HTTP is benchmark 1's). */
  deliveryConcurrency: number;
  /** Single messages sent one at a time, each after the last was answered: the latency of an idle system. */
  idleSamples: number;
  timeoutMs: number;
  /** Issue 22's floor worker (bench/floor-worker.ts) in place of the real one. */
  floor?: boolean;
  /** The real worker under `--cpu-prof`, writing its profile here when it exits. */
  profileDir?: string;
  /** Added to the worker's variables (LOG_LEVEL: the harness's is silent). */
  workerEnv?: Record<string, string>;
}

export interface RoundResult {
  deliveryMs: number;
  elapsedMs: number;
  repliesPerSec: number;
  /** CPU the worker process used over the round, as % of one core (the machine has two). */
  workerCpuPercent: number;
  /** CPU of this process (webhook, fakes, counting) over the round, % of one core. */
  benchCpuPercent: number;
  p50: number;
  p99: number;
  max: number;
  claudeMaxInFlight: number;
  /** The machine's 1-minute load average when the round ended (others share the machine). */
  load: number;
  replied: number;
  sends: number;
  recipients: number;
  claudeCalls: number;
  deadLetters: number;
  failedJobs: number;
  non200: number;
  /** When the round ran, on the monotonic clock in µs (a CPU profile's clock). */
  window: { fromUs: number; toUs: number };
}

/** The worker process's settings as it parsed them (src/config.ts). */
export interface WorkerSettings {
  replyConcurrency: number;
  inboundConcurrency: number;
  databasePoolSize: number;
  replyDebounceMs: number;
  logLevel: string;
}

/**
 * Benchmark 2's system under test: the harness (web role by inject, the fakes, a Postgres
 * schema, a Redis prefix) in this process, and the worker as a process of its own
 * (`src/main.ts worker`, configured by environment variables only), timed by the sends the
 * fake Graph API receives.
 */

/**
 * Conversations run end to end before the clock starts, at the scenario's Claude latency: at
 * least this many, and at least one per reply slot, so the worker's connection pool has grown
 * to what the load needs, and Prisma's first queries and the JIT are behind it.
 */
const WARMUP_MESSAGES = 20;

/** After the last expected send, how long to keep watching for sends that must not happen (a duplicate). */
const SETTLE_MS = 500;

/** Issue 22's floor worker (a bare BullMQ worker doing the same I/O), run in place of the real one by scenarios that ask. */
const FLOOR_WORKER = fileURLToPath(new URL("floor-worker.ts", import.meta.url));

/** What the system needs of a worker process, whichever started it. */
type WorkerProcess = Pick<RoleProcess, "pid" | "exited" | "logPath" | "signal" | "kill">;

/**
 * The worker of `scenario`: the real one as operators start it (RoleProcess), or, when the
 * scenario asks for a profile or the floor, through NodeProcess, which can pass node flags.
 */
function spawnWorker(scenario: EndToEndScenario, index: number, env: Record<string, string>, logDir: string): WorkerProcess {
  const name = `worker-${index}`;
  if (scenario.floor) return NodeProcess.spawn(name, FLOOR_WORKER, [], { env, logDir });
  if (scenario.profileDir) {
    // Sampling every 100 µs (the default 1 ms gives too few samples of a 2–4 s round to rank ten frames).
    const nodeArgs = ["--cpu-prof", `--cpu-prof-dir=${scenario.profileDir}`, "--cpu-prof-interval=100"];
    return NodeProcess.spawn(name, builtMain(), ["worker"], { env, logDir, nodeArgs });
  }
  return RoleProcess.spawn(name, "worker", env, logDir);
}

/** A process's CPU time so far in ms, or `otherwise` once it has exited. */
function cpuMsOr(pid: number, otherwise: number): number {
  try {
    return processStat(pid).cpuMs;
  } catch {
    return otherwise;
  }
}

/** One system under test: the harness (web, fakes, Postgres schema, Redis prefix) here, the worker in its own process. */
export class System {
  /** When the fake Graph API received each user's first text reply (performance.now()). */
  readonly sentAt = new Map<string, number>();
  /** The users of the round measured last, and when its first POST began (performance.now()). */
  lastRound: { users: string[]; startedAt: number } | undefined;
  private readonly waiters = new Set<{ remaining: Set<string>; resolve: () => void }>();
  private round = 0;

  private constructor(
    readonly scenario: EndToEndScenario,
    readonly h: Harness,
    readonly worker: WorkerProcess,
    readonly settings: WorkerSettings,
    private readonly logDir: string,
  ) {
    // FakeGraph records each request but not when it came. Stamping them as they are
    // recorded (before the fake answers) times each send exactly, with no polling error.
    const record = h.graph.requests.push.bind(h.graph.requests);
    h.graph.requests.push = (...items: RecordedRequest[]) => {
      const now = performance.now();
      for (const item of items) {
        const to = String(item.body.to);
        if (item.body.type !== "text" || this.sentAt.has(to)) continue;
        this.sentAt.set(to, now);
        for (const waiter of this.waiters) {
          waiter.remaining.delete(to);
          if (waiter.remaining.size === 0) {
            this.waiters.delete(waiter);
            waiter.resolve();
          }
        }
      }
      return record(...items);
    };
  }

  /** `workerEnv` is added to the worker's variables (bench/timeline.ts has it log at info). */
  static async start(scenario: EndToEndScenario, index: number, workerEnv: Record<string, string> = {}): Promise<System> {
    const h = await startHarness({
      workers: 0,
      env: { REPLY_CONCURRENCY: String(scenario.replyConcurrency), REPLY_DEBOUNCE_MS: "0" },
      // The floor worker asks Claude and keeps no ledger: only the real worker's is held to the bill.
      ledgerChecked: !scenario.floor,
    });
    try {
      if (scenario.storedMessages > 0) await seedHistory(h.config.databaseUrl, { messages: scenario.storedMessages });
      // The worker runs with production's default pool size and Claude timeout (both unset), not
      // the tests' small pool and 5 s, which a drawn latency's tail (36.3) would outrun.
      const { DATABASE_POOL_SIZE: _testPool, ANTHROPIC_TIMEOUT_MS: _testTimeout, ...harnessEnv } = h.env;
      const env = { ...harnessEnv, ...workerEnv };
      const config = loadSettings(env);
      const settings = {
        replyConcurrency: config.jobs.replyConcurrency,
        inboundConcurrency: config.jobs.inboundConcurrency,
        databasePoolSize: config.databasePoolSize,
        replyDebounceMs: config.jobs.replyDebounceMs,
        logLevel: config.logLevel,
      };
      const logDir = await mkdtemp(join(tmpdir(), "bench-worker-"));
      const worker = spawnWorker(scenario, index, env, logDir);
      return new System(scenario, h, worker, settings, logDir);
    } catch (error) {
      await h.close();
      throw error;
    }
  }

  /** Resolves once every one of `users` has had a reply sent; fails if the worker process dies. */
  private repliesTo(users: string[]): Promise<void> {
    const replied = new Promise<void>((resolve) => {
      const remaining = new Set(users.filter((u) => !this.sentAt.has(u)));
      if (remaining.size === 0) resolve();
      else this.waiters.add({ remaining, resolve });
    });
    const died = this.worker.exited.then(async ({ code, signal }) => {
      const log = await readFile(this.worker.logPath, "utf8").catch(() => "");
      throw new Error(`the worker process exited (${signal ?? `code ${code}`}); its output ended with:\n${log.slice(-2000)}`);
    });
    return Promise.race([replied, died]);
  }

  private users(kind: string, n: number): string[] {
    return Array.from({ length: n }, (_, i) => `1${kind}${String(i).padStart(8, "0")}`);
  }

  private drawLatencies(): void {
    const { claudeLatency } = this.scenario;
    this.h.claude.latencyDraw = claudeLatency && logNormalDraw(claudeLatency);
  }

  async warmUp(): Promise<void> {
    this.h.claude.latencyMs = this.scenario.claudeLatencyMs;
    this.drawLatencies();
    const users = this.users("44", Math.max(WARMUP_MESSAGES, this.scenario.replyConcurrency));
    const replied = this.repliesTo(users);
    await this.deliverAll(users, this.scenario.deliveryConcurrency, new Map());
    await withTimeout(replied, this.scenario.timeoutMs, `warm-up replies (${this.scenario.name})`);
  }

  async idleLatencies(): Promise<number[]> {
    const idle: number[] = [];
    for (const user of this.users("33", this.scenario.idleSamples)) {
      const replied = this.repliesTo([user]);
      const deliveredAt = new Map<string, number>();
      await this.deliverAll([user], 1, deliveredAt);
      await withTimeout(replied, this.scenario.timeoutMs, "an idle-sample reply");
      idle.push(this.sentAt.get(user)! - deliveredAt.get(user)!);
    }
    return idle;
  }

  async measureRound(): Promise<RoundResult> {
    const { h, scenario } = this;
    const users = this.users(`5${++this.round}`, scenario.messages);
    this.drawLatencies(); // from the start of the sequence: every round, real worker or floor, draws the same
    const claudeBefore = h.claude.requests.length;
    const deadBefore = await h.db.deadLetter.count();
    const failedBefore = await this.failedJobs();
    h.claude.maxInFlight = h.claude.inFlight;

    const allSent = this.repliesTo(users);
    const deliveredAt = new Map<string, number>();
    const workerCpuStart = processStat(this.worker.pid).cpuMs;
    const benchCpuStart = process.cpuUsage();
    const start = performance.now();
    const fromUs = monotonicUs();
    this.lastRound = { users, startedAt: start };
    const non200 = await this.deliverAll(users, scenario.deliveryConcurrency, deliveredAt);
    const deliveryMs = performance.now() - start;
    const finished = await withTimeout(allSent, scenario.timeoutMs, "replies").then(
      () => true,
      (error: unknown) => {
        console.error(`  ${scenario.name}: ${error instanceof Error ? error.message : String(error)}`);
        return false;
      },
    );
    const workerCpuMs = cpuMsOr(this.worker.pid, workerCpuStart) - workerCpuStart;
    const window = { fromUs, toUs: monotonicUs() };
    const benchCpu = process.cpuUsage(benchCpuStart);
    const replied = users.filter((u) => this.sentAt.has(u));
    const elapsedMs = (finished ? Math.max(...replied.map((u) => this.sentAt.get(u)!)) : performance.now()) - start;
    if (!finished) console.error(`  ${scenario.name}: only ${replied.length} of ${users.length} replies`);

    await sleep(SETTLE_MS);
    const measured = new Set(users);
    const sends = h.graph.sends.filter((s) => measured.has(String(s.body.to)));
    const latencies = replied.map((u) => this.sentAt.get(u)! - deliveredAt.get(u)!);
    return {
      deliveryMs,
      elapsedMs,
      repliesPerSec: replied.length / (elapsedMs / 1000),
      workerCpuPercent: (workerCpuMs / elapsedMs) * 100,
      benchCpuPercent: ((benchCpu.user + benchCpu.system) / 1000 / elapsedMs) * 100,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: percentile(latencies, 100),
      claudeMaxInFlight: h.claude.maxInFlight,
      load: loadavg()[0]!,
      replied: replied.length,
      sends: sends.length,
      recipients: new Set(sends.map((s) => String(s.body.to))).size,
      claudeCalls: h.claude.requests.length - claudeBefore,
      deadLetters: (await h.db.deadLetter.count()) - deadBefore,
      failedJobs: (await this.failedJobs()) - failedBefore,
      non200,
      window,
    };
  }

  private async failedJobs(): Promise<number> {
    const counts = await Promise.all(Object.values(this.h.queues).map((q) => q.getFailedCount()));
    return counts.reduce((a, b) => a + b, 0);
  }

  /** One webhook per user, `concurrency` POSTs in flight; records when each POST began. Returns the non-200 count. */
  private async deliverAll(users: string[], concurrency: number, deliveredAt: Map<string, number>): Promise<number> {
    // Bodies are built up front, so the clock measures the system, not the test data.
    const bodies = users.map((from, i) => ({ from, body: textWebhook({ from, text: `Hello, this is user ${i}. Are you open today?` }).body }));
    let next = 0;
    let non200 = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        for (let i = next++; i < bodies.length; i = next++) {
          const { from, body } = bodies[i]!;
          deliveredAt.set(from, performance.now());
          const response = await this.h.deliver(body);
          if (response.statusCode !== 200) non200++;
        }
      }),
    );
    return non200;
  }

  async close(): Promise<void> {
    this.worker.signal("SIGTERM");
    const stopped = await Promise.race([this.worker.exited.then(() => true), sleep(10_000).then(() => false)]);
    if (!stopped) await this.worker.kill();
    await this.h.close();
    await rm(this.logDir, { recursive: true, force: true });
  }
}

/** The monotonic clock in µs: the clock of V8's CPU profiles (a profile's startTime and sample times), so a round's window can be cut from one. */
const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

export async function withTimeout(promise: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
