import { readdirSync, readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import type { EndToEndScenario } from "./e2e.ts";
import { System } from "./e2e-system.ts";
import { type ProcessStat, processStat } from "./proc.ts";
import { fmt, percentile, sleep, table } from "./stats.ts";

/**
 * Where a reply's time goes in benchmark 2's scenario (b), Claude at 2 s with 200 replies in
 * flight (issue 10, target 3b). Not a target itself: a diagnosis for whoever works on it.
 * Per round it prints the waves of Claude calls and sends, each reply's phases from the
 * worker's own log lines, what Postgres's backends were doing, and every process's CPU.
 * The worker logs at info here (its phases are its log lines), which costs it a little CPU.
 *
 *   npx tsx bench/timeline.ts [rounds]
 */

const SCENARIO: EndToEndScenario = {
  name: "(b) Claude at 2000 ms",
  messages: 800,
  rounds: 1,
  claudeLatencyMs: 2000,
  replyConcurrency: 200,
  storedMessages: 0,
  deliveryConcurrency: 16,
  idleSamples: 0,
  timeoutMs: 180_000,
};

/** The phases, between the worker's log events (and the fakes' own clocks) for one reply. */
const PHASES = [
  ["message stored → Claude called (waits for a free slot)", "inbound.stored", "claude"],
  ["Claude called → answer in the worker", "claude", "reply.generated"],
  ["answer → the Graph API takes the send", "reply.generated", "graph"],
  ["send taken → reply recorded sent", "graph", "reply.sent"],
] as const;

type Moment = (typeof PHASES)[number][1 | 2];

async function measure(system: System, round: number): Promise<string> {
  const { h } = system;
  // Claude calls by the index of the user in the round ("Hello, this is user 17. …").
  const claudeAt = new Map<number, number>();
  h.claude.onRequest = ({ request }) => {
    const index = /this is user (\d+)\./.exec(JSON.stringify(request.messages))?.[1];
    if (index !== undefined && !claudeAt.has(Number(index))) claudeAt.set(Number(index), performance.now());
  };
  const backends = new BackendSampler(h.db);
  const cpuBefore = cpuByProcess(system.worker.pid);
  const result = await system.measureRound();
  const cpuAfter = cpuByProcess(system.worker.pid);
  const backendShares = await backends.stop();
  h.claude.onRequest = undefined;
  const { users, startedAt } = system.lastRound!;

  // The worker's log lines are stamped with Date.now(); this process's timeline is performance.now().
  const epochOffset = Date.now() - performance.now();
  const moments = new Map<string, Partial<Record<Moment, number>>>(users.map((user) => [user, {}]));
  const userOf = new Map(
    (await h.db.$queryRaw<{ id: string; wa_id: string }[]>`SELECT c.id::text, ct.wa_id FROM conversations c JOIN contacts ct ON ct.id = c.contact_id`).map(
      (r) => [r.id, r.wa_id],
    ),
  );
  for (const line of readFileSync(system.worker.logPath, "utf8").split("\n")) {
    if (!line.startsWith("{")) continue;
    const entry = JSON.parse(line) as { event?: string; conversation?: string; time: number };
    const at = moments.get(userOf.get(entry.conversation ?? "") ?? "");
    if (at && (entry.event === "inbound.stored" || entry.event === "reply.generated" || entry.event === "reply.sent"))
      at[entry.event] ??= entry.time - epochOffset;
  }
  for (const [i, user] of users.entries()) {
    const at = moments.get(user)!;
    at.claude = claudeAt.get(i);
    at.graph = system.sentAt.get(user);
  }

  const since = (t: number) => fmt((t - startedAt) / 1000, 2);
  const claudeCalls = [...claudeAt.values()].sort((a, b) => a - b);
  const sends = users
    .map((u) => system.sentAt.get(u))
    .filter((t): t is number => t !== undefined)
    .sort((a, b) => a - b);
  const stored = users
    .map((u) => moments.get(u)!["inbound.stored"])
    .filter((t): t is number => t !== undefined)
    .sort((a, b) => a - b);
  const waves = Array.from({ length: Math.ceil(users.length / SCENARIO.replyConcurrency) }, (_, w) => {
    const [from, to] = [w * SCENARIO.replyConcurrency, Math.min(users.length, (w + 1) * SCENARIO.replyConcurrency) - 1];
    return [String(w + 1), `${since(claudeCalls[from]!)}–${since(claudeCalls[to]!)}`, `${since(sends[from]!)}–${since(sends[to]!)}`];
  });
  const phases = PHASES.map(([name, from, to]) => {
    const spans = users.flatMap((u) => {
      const at = moments.get(u)!;
      return at[from] !== undefined && at[to] !== undefined ? [at[to]! - at[from]!] : [];
    });
    return [name, ...[10, 50, 90, 99].map((p) => fmt(percentile(spans, p))), fmt(spans.length)];
  });
  const seconds = result.elapsedMs / 1000;
  const cpu = Object.entries(cpuAfter)
    .map(([name, ms]) => [name, ((ms - (cpuBefore[name] ?? 0)) / 10 / seconds).toFixed(0)] as const)
    .filter(([, percent]) => Number(percent) >= 1)
    .map(([name, percent]) => `${name} ${percent}%`);

  return [
    `\n## Round ${round}: ${fmt(result.replied)} replies in ${fmt(seconds, 2)} s = ${fmt(result.repliesPerSec / (SCENARIO.replyConcurrency / (SCENARIO.claudeLatencyMs / 1000)), 3)} of ` +
      `${SCENARIO.replyConcurrency} ÷ ${SCENARIO.claudeLatencyMs / 1000} s (load ${fmt(result.load, 1)})`,
    `webhooks delivered by ${fmt(result.deliveryMs / 1000, 2)} s; messages stored from ${since(stored[0]!)} s, half by ${since(percentile(stored, 50))} s, all by ${since(stored.at(-1)!)} s`,
    "",
    table(["wave", "Claude calls (s)", "sends (s)"], waves),
    "",
    table(["phase of one reply (ms)", "p10", "p50", "p90", "p99", "replies"], phases),
    "",
    `Postgres backends, share of samples: ${backendShares}`,
    `CPU over the round, % of one core: ${cpu.join(", ")}`,
  ].join("\n");
}

/** Every 20 ms, what each client backend of Postgres is doing (state and wait event). */
class BackendSampler {
  private readonly counts = new Map<string, number>();
  private running = true;
  private readonly done: Promise<void>;

  constructor(private readonly db: System["h"]["db"]) {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      const rows = await this.db.$queryRaw<{ what: string; n: bigint }[]>`
        SELECT concat_ws(' ', state, wait_event_type, wait_event) AS what, count(*) AS n FROM pg_stat_activity
        WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() GROUP BY 1`;
      for (const { what, n } of rows) this.counts.set(what, (this.counts.get(what) ?? 0) + Number(n));
      await sleep(20);
    }
  }

  async stop(): Promise<string> {
    this.running = false;
    await this.done;
    const total = [...this.counts.values()].reduce((a, b) => a + b, 0);
    return [...this.counts.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, 6)
      .map(([what, n]) => `${what} ${fmt((n / total) * 100, 1)}%`)
      .join(", ");
  }
}

/** CPU time so far (ms) of the worker, this process (the web, the fakes), and every Postgres and Redis process. */
function cpuByProcess(workerPid: number): Record<string, number> {
  const cpu: Record<string, number> = {};
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    let stat: ProcessStat;
    try {
      stat = processStat(pid);
    } catch {
      continue; // it exited meanwhile
    }
    const name =
      Number(pid) === workerPid
        ? "worker"
        : Number(pid) === process.pid
          ? "bench (web, fakes)"
          : stat.command.startsWith("postgres")
            ? "postgres"
            : stat.command.startsWith("redis")
              ? "redis"
              : undefined;
    if (name) cpu[name] = (cpu[name] ?? 0) + stat.cpuMs;
  }
  return cpu;
}

const rounds = Number(process.argv[2] ?? 2);
const system = await System.start(SCENARIO, 0, { LOG_LEVEL: "info" });
try {
  await system.warmUp();
  for (let round = 1; round <= rounds; round++) console.log(await measure(system, round));
} finally {
  await system.close();
}
