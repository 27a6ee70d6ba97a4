import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type EndToEndResult, type EndToEndScenario, formatEndToEnd, medianOf, pairedRatio, perCpuSecond, runEndToEnd, theoreticalRate } from "./e2e.ts";
import { formatFrames, readProfile, topFrames } from "./profile.ts";
import { fmt } from "./stats.ts";
import { type TargetLine, Targets } from "./targets.ts";

/**
 * Benchmark 2's scenarios and the targets they measure: issue 10's (3a, 3b, 2b) and issue 22's
 * ratios against the floor worker (bench/floor-worker.ts), which runs in alternation with the
 * real worker, round by round, in the saturated scenario and in the one with Claude at 2 s, so
 * both see the same machine. A last run of the real worker under `--cpu-prof` gives the frames
 * its CPU goes to (target 22.5).
 */

/** The figures on main before the work (issue 10: bench/BASELINE-issue-10.md; issue 22: its text, measured on 6bdc40e). */
const BASELINE = {
  storedRatio: "0.86–0.92",
  repliesPerSec: "60–71/s, ~92 per CPU-s",
  claudeRatio: "0.39–0.51",
  floorRatio: "0.38× (6bdc40e)",
  concurrencyRatio: "0.83 (6bdc40e)",
  cpuPerReply: "worker ~6,100 µs (163.9 replies per CPU-s, 6bdc40e)",
};

/** Instant fakes: what one worker process does when nothing waits. */
function instant(quick: boolean): EndToEndScenario {
  return {
    name: "(a) fakes at 0 ms",
    messages: quick ? 100 : 500,
    rounds: quick ? 1 : 3,
    claudeLatencyMs: 0,
    replyConcurrency: 50,
    storedMessages: 0,
    deliveryConcurrency: 16,
    idleSamples: quick ? 3 : 200,
    timeoutMs: 120_000,
  };
}

/** The groups of scenarios whose rounds alternate, run one group after the other. */
export function endToEndGroups(quick: boolean): EndToEndScenario[][] {
  const a = instant(quick);
  const b: EndToEndScenario = {
    name: "(b) Claude at 2000 ms",
    messages: quick ? 100 : 800, // 4 waves of 200 Claude calls
    rounds: quick ? 1 : 3,
    claudeLatencyMs: 2000,
    replyConcurrency: 200,
    storedMessages: 0,
    deliveryConcurrency: 16,
    idleSamples: 0, // the idle latency is (a)'s plus the 2 s Claude is told to take
    timeoutMs: 180_000,
  };
  const h: EndToEndScenario = {
    ...b,
    name: "(h) Claude log-normal, median 2 s, p95 6 s",
    claudeLatency: { medianMs: 2000, p95Ms: 6000, seed: 36 },
    timeoutMs: 240_000,
  };
  return [
    // (a), (c) and (f) alternate round by round: (c) ÷ (a) is target 2b, (a) ÷ (f) target 22.1.
    [
      a,
      { ...a, name: `(c) (a) on ${quick ? "10,000" : "100,000"} stored messages`, storedMessages: quick ? 10_000 : 100_000 },
      { ...a, name: "(f) (a) by the floor worker", floor: true },
    ],
    // (b) and (g) alternate: (g) is what the same load gives a worker doing nothing but the I/O,
    // so 22.2 is read beside the figure its own floor reaches.
    [b, { ...b, name: "(g) (b) by the floor worker", floor: true }],
    // (h) and (i): Claude as it really answers, each call's time drawn (the same draws for both),
    // so replies do not arrive in synchronized waves; (h) ÷ (i) is target 36.3.
    [h, { ...h, name: "(i) (h) by the floor worker", floor: true }],
  ];
}

/** The real worker under --cpu-prof, one round of (a): its figures are not compared, only its profile read. */
const profiled = (quick: boolean, profileDir: string): EndToEndScenario => ({
  ...instant(quick),
  name: "(p) (a) under --cpu-prof",
  rounds: 1,
  idleSamples: 0,
  profileDir,
});

export interface WorkerBench {
  text: string;
  lines: TargetLine[];
}

export async function runWorkerBench(quick: boolean): Promise<WorkerBench> {
  const results: EndToEndResult[] = [];
  for (const group of endToEndGroups(quick)) results.push(...(await runEndToEnd(group)));
  const profileDir = await mkdtemp(join(tmpdir(), "bench-cpu-prof-"));
  let profileText: string;
  try {
    const [p] = await runEndToEnd([profiled(quick, profileDir)]);
    if (p) results.push(p);
    // The worker wrote its profile as it exited (runEndToEnd stops it with SIGTERM, it exits 0).
    const summary = topFrames(await readProfile(profileDir), p?.rounds.map((r) => r.window) ?? []);
    profileText = [
      `Worker CPU profile, (p)'s measured round only: the ten frames with the most self time, of ${fmt(summary.samples)} busy samples (100 µs apart; idle excluded).`,
      formatFrames(summary),
    ].join("\n");
  } catch (error) {
    profileText = `Worker CPU profile: not read (${error instanceof Error ? error.message : String(error)})`;
  } finally {
    await rm(profileDir, { recursive: true, force: true });
  }
  const lines = targetLines(results);
  const text = [formatEndToEnd(results), "", profileText, "", ...lines.map(Targets.inline)].join("\n");
  return { text, lines };
}

function targetLines(results: EndToEndResult[]): TargetLine[] {
  const [a, c, f, b, g, h, i] = results;
  if (!a || !c || !f || !b || !g || !h || !i) return [];
  const perSec = medianOf(a, (r) => r.repliesPerSec);
  const claudeRate = medianOf(b, (r) => r.repliesPerSec);
  const claude = claudeRate / theoreticalRate(b.scenario);
  const stored = pairedRatio(c, a, (r) => r.repliesPerSec);
  const floor = pairedRatio(a, f, (r) => r.repliesPerSec);
  const floorRate = medianOf(f, (r) => r.repliesPerSec);
  // What is lost to scheduling at 200 in flight, not to the machine's speed: a worker cannot beat its own saturated rate.
  const reachableBy = (r: EndToEndResult, saturated: number) => Math.min(theoreticalRate(r.scenario), saturated);
  const reachable = reachableBy(b, perSec);
  const concurrency = claudeRate / reachable;
  // The floor worker's own figure under the same load: it waits for the same waves of 200 Claude calls.
  const floorConcurrency = medianOf(g, (r) => r.repliesPerSec) / reachableBy(g, floorRate);
  // µs of worker CPU per answered message: the inverse of replies per CPU-second.
  const cpuPerReply = (r: EndToEndResult) => medianOf(r, (x) => 1e6 / perCpuSecond(x));
  const [workerUs, floorUs] = [cpuPerReply(a), cpuPerReply(f)];
  return [
    {
      target: "3a. replies/s per worker process, instant fakes",
      goal: "≥ 150/s",
      figure: `${fmt(perSec, 1)}/s (${fmt(medianOf(a, perCpuSecond), 1)} per worker CPU-second)`,
      met: perSec >= 150,
      baseline: BASELINE.repliesPerSec,
    },
    {
      target: `3b. replies/s ÷ (${b.scenario.replyConcurrency} / ${b.scenario.claudeLatencyMs / 1000} s), Claude at ${b.scenario.claudeLatencyMs} ms`,
      goal: "≥ 0.90",
      figure: `${fmt(claude, 2)} (${fmt(claudeRate, 1)}/s of ${fmt(theoreticalRate(b.scenario))}/s, Claude max in flight ${Math.max(...b.rounds.map((r) => r.claudeMaxInFlight))})`,
      met: claude >= 0.9,
      baseline: BASELINE.claudeRatio,
    },
    {
      target: `2b. throughput with ${fmt(c.scenario.storedMessages)} stored messages ÷ empty`,
      goal: "≥ 0.90",
      figure: `${fmt(stored, 2)} (per worker CPU-second: ${fmt(pairedRatio(c, a, perCpuSecond), 2)})`,
      met: stored >= 0.9,
      baseline: BASELINE.storedRatio,
    },
    {
      target: "36.2 replies/s per worker process ÷ the floor worker (22.1)",
      goal: "≥ 0.65",
      figure: `${fmt(floor, 2)}× (${fmt(perSec, 1)}/s vs ${fmt(floorRate, 1)}/s; per worker CPU-second ${fmt(pairedRatio(a, f, perCpuSecond), 2)}×)`,
      met: floor >= 0.65,
      baseline: `0.50–0.56 (Dec 3); ${BASELINE.floorRatio}`,
    },
    {
      target: `22.2 replies/s at ${b.scenario.replyConcurrency} × ${b.scenario.claudeLatencyMs / 1000} s Claude ÷ min(${fmt(theoreticalRate(b.scenario))}, saturated replies/s)`,
      goal: "≥ 0.9",
      figure: `${fmt(concurrency, 2)} (${fmt(claudeRate, 1)}/s of ${fmt(reachable, 1)}/s; the floor worker under the same load: ${fmt(floorConcurrency, 2)})`,
      met: concurrency >= 0.9,
      baseline: BASELINE.concurrencyRatio,
    },
    {
      target: `36.3 replies/s at ${h.scenario.replyConcurrency} in flight, Claude log-normal (median 2 s, p95 6 s) ÷ the floor worker under the same draws`,
      goal: "≥ 0.95",
      figure: `${fmt(
        pairedRatio(h, i, (r) => r.repliesPerSec),
        2,
      )} (${fmt(
        medianOf(h, (r) => r.repliesPerSec),
        1,
      )}/s vs ${fmt(
        medianOf(i, (r) => r.repliesPerSec),
        1,
      )}/s)`,
      met: pairedRatio(h, i, (r) => r.repliesPerSec) >= 0.95,
      baseline: "new in issue 36",
    },
    {
      target: "36.2 CPU µs per answered message, worker ÷ floor (22.5)",
      goal: "≤ 1.8×",
      figure: `${fmt(workerUs)} / ${fmt(floorUs)} µs (${fmt(workerUs / floorUs, 2)}×)`,
      met: workerUs / floorUs <= 1.8,
      baseline: "2.33–2.52× (Dec 3)",
    },
  ];
}

/**
 * What an A/B of one worker lever compares (bench/ab.ts): (a) against the floor worker (f), the
 * rounds alternating as in the full bench, as one JSON line.
 */
export async function workerLeverFigures(quick: boolean, logLevel = "silent"): Promise<Record<string, number>> {
  const [a, , f] = endToEndGroups(quick)[0] ?? [];
  if (!a || !f) throw new Error("the saturated group has no (a) and (f)");
  const [worker, floor] = await runEndToEnd([{ ...a, workerEnv: { LOG_LEVEL: logLevel } }, f]);
  if (!worker || !floor) throw new Error("the saturated group gave no results");
  const cpuPerReply = (r: EndToEndResult) => medianOf(r, (x) => 1e6 / perCpuSecond(x));
  return {
    repliesPerSec: medianOf(worker, (r) => r.repliesPerSec),
    floorRepliesPerSec: medianOf(floor, (r) => r.repliesPerSec),
    ratioToFloor: pairedRatio(worker, floor, (r) => r.repliesPerSec),
    cpuUsPerReply: cpuPerReply(worker),
    floorCpuUsPerReply: cpuPerReply(floor),
    cpuRatioToFloor: cpuPerReply(worker) / cpuPerReply(floor),
  };
}

/**
 * `tsx bench/worker-bench.ts`: benchmark 2 alone, with npm run bench's settings (BENCH_QUICK=1
 * shortens it, as there). `--figures`: (a) and (f) alone, one JSON line, for bench/ab.ts;
 * `--log-level info` has the worker log as production does (the harness's level is silent).
 */
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const quick = process.env.BENCH_QUICK === "1";
  const logLevel = process.argv[process.argv.indexOf("--log-level") + 1];
  (process.argv.includes("--figures")
    ? workerLeverFigures(quick, process.argv.includes("--log-level") ? logLevel : undefined).then((figures) => JSON.stringify(figures))
    : runWorkerBench(quick).then(({ text }) => text)
  )
    .then((text) => console.log(text))
    .catch((error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    });
}
