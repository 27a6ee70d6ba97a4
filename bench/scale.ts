import { mkdtemp, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { COMMON_ENV } from "../chaos/scenarios.ts";
import { ChaosSystem } from "../chaos/system.ts";
import { fmt, median, sleep, table } from "./stats.ts";

/**
 * Benchmark 6: does a second worker process add what the first one does, on one Redis and on
 * a Redis Cluster (3 masters, 3 replicas)? The whole system as it is deployed past one
 * machine: real web and worker processes (chaos/system.ts), the simulated Meta delivering
 * over HTTP, Claude taking a fixed time, so the work is the I/O-bound kind more processes
 * are for (on this 2-core VM, CPU-bound work cannot scale). Rounds alternate the four
 * layouts; the figure is the median ratio of 2 to 1 worker processes per topology.
 * `npx tsx bench/scale.ts` runs it alone.
 */

export interface ScaleSettings {
  messages: number;
  rounds: number;
  claudeLatencyMs: number;
  replyConcurrency: number;
  timeoutMs: number;
}

export const scaleSettings = (quick: boolean): ScaleSettings => ({
  messages: quick ? 40 : 400,
  rounds: quick ? 1 : 3,
  claudeLatencyMs: 500,
  replyConcurrency: 20,
  timeoutMs: 120_000,
});

type Topology = "single" | "cluster";
const LAYOUTS: { redis: Topology; workers: number }[] = [
  { redis: "single", workers: 1 },
  { redis: "single", workers: 2 },
  { redis: "cluster", workers: 1 },
  { redis: "cluster", workers: 2 },
];

export interface ScaleRun {
  redis: Topology;
  workers: number;
  repliesPerSec: number[];
}

export async function runScaleBench(settings: ScaleSettings): Promise<ScaleRun[]> {
  const logRoot = await mkdtemp(join(tmpdir(), "bench-scale-"));
  const systems: { layout: (typeof LAYOUTS)[number]; system: ChaosSystem; rates: number[] }[] = [];
  try {
    for (const [i, layout] of LAYOUTS.entries()) {
      const system = await ChaosSystem.start({
        slug: `${layout.redis}-${layout.workers}`,
        logRoot,
        workers: layout.workers,
        redis: layout.redis,
        env: { ...COMMON_ENV, REPLY_CONCURRENCY: String(settings.replyConcurrency), REPLY_DEBOUNCE_MS: "0" },
        claudeLatencyMs: settings.claudeLatencyMs,
        duplicateRate: 0,
        seed: 60 + i,
      });
      systems.push({ layout, system, rates: [] });
    }
    for (let round = 0; round < settings.rounds; round++) {
      for (const entry of systems) entry.rates.push(await measureRound(entry.system, settings, round));
    }
    return systems.map(({ layout, rates }) => ({ ...layout, repliesPerSec: rates }));
  } finally {
    await Promise.allSettled(systems.map(({ system }) => system.close()));
    await rm(logRoot, { recursive: true, force: true });
  }
}

/** `messages` customers write at once; replies/s from the first write to the last reply Meta took. */
async function measureRound(system: ChaosSystem, settings: ScaleSettings, round: number): Promise<number> {
  const first = round * settings.messages;
  const expected = new Set(Array.from({ length: settings.messages }, (_, i) => system.customers.waId(first + i)));
  const started = Date.now();
  for (let i = 0; i < settings.messages; i++) system.customers.write(first + i);
  const deadline = started + settings.timeoutMs;
  for (;;) {
    const replied = new Set(system.graph.taken.map((send) => send.to).filter((to) => expected.has(to)));
    if (replied.size === expected.size) break;
    if (Date.now() > deadline) throw new Error(`only ${replied.size} of ${expected.size} replies within ${settings.timeoutMs} ms`);
    await sleep(20);
  }
  return settings.messages / ((Date.now() - started) / 1000);
}

export function formatScale(runs: ScaleRun[], settings: ScaleSettings): string {
  const rows = runs.map((run) => [
    run.redis === "single" ? "one Redis" : "Redis Cluster (3+3)",
    String(run.workers),
    fmt(median(run.repliesPerSec), 1),
    run.repliesPerSec.map((r) => fmt(r, 1)).join(" / "),
    fmt((run.workers * settings.replyConcurrency) / (settings.claudeLatencyMs / 1000)),
  ]);
  const lines = [
    `${settings.messages} messages at once per round, ${settings.rounds} rounds alternating layouts; Claude at ${settings.claudeLatencyMs} ms, REPLY_CONCURRENCY ${settings.replyConcurrency} per worker process; one web process.`,
    table(["Redis", "worker processes", "replies/s", "by round", "ceiling (processes × concurrency ÷ latency)"], rows),
  ];
  for (const redis of ["single", "cluster"] as const) {
    const one = runs.find((r) => r.redis === redis && r.workers === 1);
    const two = runs.find((r) => r.redis === redis && r.workers === 2);
    if (!one || !two) continue;
    const ratios = two.repliesPerSec.map((rate, i) => rate / one.repliesPerSec[i]!);
    lines.push(
      `2 ÷ 1 worker processes on ${redis === "single" ? "one Redis" : "the Redis Cluster"}: ${fmt(median(ratios), 2)}x (by round ${ratios.map((r) => fmt(r, 2)).join(" / ")})`,
    );
  }
  lines.push(
    `load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(" ")}`,
  );
  return lines.join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const settings = scaleSettings(process.env.BENCH_QUICK === "1");
  runScaleBench(settings).then(
    (runs) => {
      console.log(formatScale(runs, settings));
      process.exit(0);
    },
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
