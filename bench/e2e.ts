import { type EndToEndScenario, type RoundResult, System, type WorkerSettings } from "./e2e-system.ts";

export type { EndToEndScenario, RoundResult } from "./e2e-system.ts";

import { fmt, median, percentile, table } from "./stats.ts";

/**
 * Benchmark 2: the whole pipeline, webhook → inbound job → reply job → Claude (fake) → Graph
 * send (fake), with real Redis and Postgres, and the worker as a process of its own, started
 * as operators start it (`src/main.ts worker`, configured by environment variables only).
 * The webhook (in-process inject), the fakes and the counting stay in this process, so the
 * worker's CPU and throughput are its own: what one worker process does.
 *
 * Every message comes from a different user, so every message is its own conversation and
 * nothing is merged by the debounce. Each scenario runs `rounds` batches on one system; when
 * several scenarios run together, their rounds alternate (a1 c1 a2 c2 …), so a change in the
 * machine's load (others share it) falls on both; figures are medians over rounds.
 */

export interface EndToEndResult {
  scenario: EndToEndScenario;
  /** The worker process's settings as it parsed them (src/config.ts). */
  worker: WorkerSettings;
  rounds: RoundResult[];
  idleP50: number;
  idleP99: number;
  /** Every round answered every message once, with no dead letter, failed job or non-200. */
  problems: string[];
}

/**
 * Runs the scenarios, each on its own system (harness + worker process), all started first;
 * their rounds alternate. Idle samples are taken once per scenario, after warm-up.
 */
export async function runEndToEnd(scenarios: EndToEndScenario[]): Promise<EndToEndResult[]> {
  const systems: System[] = [];
  try {
    for (const [i, scenario] of scenarios.entries()) systems.push(await System.start(scenario, i, scenario.workerEnv));
    const idle = new Map<System, number[]>();
    for (const system of systems) {
      await system.warmUp();
      idle.set(system, await system.idleLatencies());
    }
    const rounds = new Map<System, RoundResult[]>(systems.map((s) => [s, []]));
    const most = Math.max(...scenarios.map((s) => s.rounds));
    for (let r = 0; r < most; r++) {
      for (const system of systems) if (r < system.scenario.rounds) rounds.get(system)!.push(await system.measureRound());
    }
    return systems.map((system) => {
      const samples = idle.get(system)!;
      return {
        scenario: system.scenario,
        worker: system.settings,
        rounds: rounds.get(system)!,
        idleP50: percentile(samples, 50),
        idleP99: percentile(samples, 99),
        problems: problemsOf(system.scenario, rounds.get(system)!),
      };
    });
  } finally {
    for (const system of systems) await system.close().catch((error: unknown) => console.error(error));
  }
}

function problemsOf(scenario: EndToEndScenario, rounds: RoundResult[]): string[] {
  const { messages } = scenario;
  return rounds.flatMap((r, i) =>
    [
      r.recipients < messages ? `${messages - r.recipients} users got no reply` : "",
      r.sends > r.recipients ? `${r.sends - r.recipients} duplicate sends (law 5)` : "",
      r.claudeCalls > messages ? `${r.claudeCalls - messages} extra Claude calls (law 4)` : "",
      r.deadLetters > 0 ? `${r.deadLetters} dead letters` : "",
      r.failedJobs > 0 ? `${r.failedJobs} failed jobs` : "",
      r.non200 > 0 ? `${r.non200} webhooks not answered 200` : "",
    ]
      .filter(Boolean)
      .map((p) => `round ${i + 1}: ${p}`),
  );
}

/** The median of one figure over a result's rounds. */
export const medianOf = (r: EndToEndResult, pick: (round: RoundResult) => number) => median(r.rounds.map(pick));

/** Replies per second of the worker process's CPU time: what it does with a core to itself, whatever else the machine runs. */
export const perCpuSecond = (round: RoundResult) => round.repliesPerSec / (round.workerCpuPercent / 100);

/**
 * `of` ÷ `to`, round by round (their rounds alternate, so each pair ran under the same load
 * on the machine), median over the pairs.
 */
export function pairedRatio(of: EndToEndResult, to: EndToEndResult, pick: (round: RoundResult) => number): number {
  const pairs = Math.min(of.rounds.length, to.rounds.length);
  return median(Array.from({ length: pairs }, (_, i) => pick(of.rounds[i]!) / pick(to.rounds[i]!)));
}

/** Claude's latency over the reply concurrency: the rate a worker could reach if nothing but Claude took time. */
export const theoreticalRate = (s: EndToEndScenario) => s.replyConcurrency / (s.claudeLatencyMs / 1000);

export function formatEndToEnd(results: EndToEndResult[]): string {
  const settings = [
    ...new Set(
      results.map(
        (r) =>
          `REPLY_CONCURRENCY ${r.worker.replyConcurrency}, INBOUND_CONCURRENCY ${r.worker.inboundConcurrency}, DATABASE_POOL_SIZE ${r.worker.databasePoolSize}, REPLY_DEBOUNCE_MS ${r.worker.replyDebounceMs}, LOG_LEVEL ${r.worker.logLevel}`,
      ),
    ),
  ];
  return [`Worker process (src/main.ts worker): ${settings.join(" / ")}.`, figuresTable(results), ...figuresNotes(results), "", ...results.map(checkLine)].join(
    "\n",
  );
}

/** Each scenario's figures, medians over its rounds. */
function figuresTable(results: EndToEndResult[]): string {
  return table(
    [
      "scenario",
      "messages",
      "stored",
      "replies/s",
      "by round",
      "worker CPU",
      "replies/CPU-s",
      "p50 ms",
      "p99 ms",
      "max ms",
      "idle p50 ms",
      "idle p99 ms",
      "Claude max in flight",
      "bench CPU",
      "load",
    ],
    results.map((r) => {
      const perSec = medianOf(r, (x) => x.repliesPerSec);
      const cpu = medianOf(r, (x) => x.workerCpuPercent);
      return [
        r.scenario.name,
        `${fmt(r.scenario.messages)} x ${r.rounds.length}`,
        fmt(r.scenario.storedMessages),
        fmt(perSec, 1),
        r.rounds.map((x) => fmt(x.repliesPerSec, 1)).join(" / "),
        `${fmt(cpu)}%`,
        fmt(medianOf(r, perCpuSecond), 1),
        fmt(medianOf(r, (x) => x.p50)),
        fmt(medianOf(r, (x) => x.p99)),
        fmt(medianOf(r, (x) => x.max)),
        fmt(r.idleP50),
        fmt(r.idleP99),
        fmt(Math.max(...r.rounds.map((x) => x.claudeMaxInFlight))),
        `${fmt(medianOf(r, (x) => x.benchCpuPercent))}%`,
        fmt(
          medianOf(r, (x) => x.load),
          1,
        ),
      ];
    }),
  );
}

/** What each column means, and what a floor or a profiled run is. */
function figuresNotes(results: EndToEndResult[]): string[] {
  return [
    "  replies/s: messages / (first POST -> last reply sent), median over rounds; worker CPU: the worker process's user+system",
    "  time over that span, % of one core (of 200%); replies/CPU-s: replies per second of worker CPU (what it would do with a",
    "  core to itself); latency: webhook POST start -> the fake Graph receiving that user's reply, all messages delivered at",
    "  once (so it includes waiting behind the others); idle: one message at a time on an idle system; bench CPU: this",
    "  process (webhook, fakes, counting), not the worker's; load: the machine's 1-minute load average after each round",
    "  (2 cores: above 2, the worker waits for a core and replies/s understates it; replies/CPU-s does not).",
    ...(results.some((r) => r.scenario.floor)
      ? [
          "  floor: bench/floor-worker.ts in the worker's place, a bare BullMQ worker doing 6 SQL statements and 2 HTTP calls a reply (the real worker: 9 and 3).",
        ]
      : []),
    ...(results.some((r) => r.scenario.profileDir)
      ? ["  --cpu-prof: the worker sampled every 100 µs, which slows it: read for its profile, not its figures."]
      : []),
  ];
}

/** A scenario's check: everything answered once, nothing dead-lettered or failed. */
function checkLine(r: EndToEndResult): string {
  const problems = r.problems;
  const total = (pick: (x: RoundResult) => number) => r.rounds.reduce((n, x) => n + pick(x), 0);
  return (
    `Check ${r.scenario.name}: ${total((x) => x.sends)} sends to ${total((x) => x.recipients)} users, ${total((x) => x.claudeCalls)} Claude calls for ` +
    `${r.scenario.messages * r.rounds.length} messages, ${total((x) => x.deadLetters)} dead letters, ${total((x) => x.failedJobs)} failed jobs, ` +
    `${total((x) => x.non200)} non-200 -> ${problems.length ? `FAIL: ${problems.join("; ")}` : "OK"}`
  );
}
