import { spawn } from "node:child_process";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { fileURLToPath, pathToFileURL } from "node:url";
import { builtMain } from "../chaos/processes.ts";
import { startHarness } from "../test/support/harness.ts";
import { freePort } from "../test/support/ports.ts";
import { fmt, median, sleep, table } from "./stats.ts";
import { type TargetLine, Targets } from "./targets.ts";

/**
 * Benchmark 8 (issue 22.6): npm start's layout (`all --migrate`: migrate, the web, the worker
 * child) from process start to the first /readyz 200, as it ships now (plain node on dist/,
 * npm run build's output) and as it shipped before (the sources through tsx's loader, the
 * image's old `node --import tsx src/main.ts`), alternating round by round on one migrated
 * schema. tsx keeps its compiled files in a cache between runs, so "before" is its warm start,
 * the one a restart sees; a first start after a deploy compiled everything.
 */

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const TSX_LOADER = import.meta.resolve("tsx");

type Variant = "before" | "after";
const NAMES: Record<Variant, string> = {
  before: "before: node --import tsx src/main.ts",
  after: "now: node dist/main.js",
};

export interface StartupReport {
  rounds: number;
  ms: Record<Variant, number[]>;
}

export async function runStartupBench(quick: boolean): Promise<StartupReport> {
  const rounds = quick ? 1 : 5;
  const command: Record<Variant, string[]> = {
    before: ["--import", TSX_LOADER, join(ROOT, "src", "main.ts"), "all", "--migrate"],
    after: [builtMain(), "all", "--migrate"],
  };
  const h = await startHarness();
  const ms: Record<Variant, number[]> = { before: [], after: [] };
  try {
    for (let round = 0; round < rounds; round++) {
      // Each order in turn, so neither always starts on a machine the other just warmed.
      const order: Variant[] = round % 2 === 0 ? ["before", "after"] : ["after", "before"];
      for (const variant of order) ms[variant].push(await timeToReady(command[variant], { ...h.env, TSX_TSCONFIG_PATH: join(ROOT, "tsconfig.json") }));
    }
  } finally {
    await h.close();
  }
  return { rounds, ms };
}

/** Milliseconds from spawn to the first /readyz 200, then a SIGTERM and its exit. */
async function timeToReady(args: string[], env: Record<string, string>): Promise<number> {
  const port = await freePort();
  const started = performance.now();
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env, PORT: String(port), METRICS_PORT: String(await freePort()), LOG_LEVEL: "warn" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${args.join(" ")} exited with ${child.exitCode} before /readyz answered 200`);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ready) return performance.now() - started;
      if (performance.now() - started > 60_000) throw new Error(`${args.join(" ")}: no /readyz 200 within 60 s`);
      await sleep(10);
    }
  } finally {
    child.kill("SIGTERM");
    await exited;
  }
}

export function formatStartup(report: StartupReport): string {
  const variants: Variant[] = ["before", "after"];
  return [
    table(
      ["npm start's layout (all --migrate)", "start → first /readyz 200, median", "rounds (ms)"],
      variants.map((v) => [NAMES[v], `${fmt(median(report.ms[v]))} ms`, report.ms[v].map((x) => fmt(x)).join(", ")]),
    ),
    `  now ÷ before: ${fmt(median(report.ms.after) / median(report.ms.before), 2)}`,
  ].join("\n");
}

export function startupTarget(report: StartupReport): TargetLine {
  const before = median(report.ms.before);
  const after = median(report.ms.after);
  return {
    target: "22.6 npm start, image and worker child on compiled JS: start → first /readyz 200",
    goal: "no transpiler at run time; ≤ before",
    figure: `${fmt(after)} ms (${fmt(after / before, 2)}× before)`,
    met: after <= before,
    baseline: `${fmt(before)} ms (tsx, same run)`,
  };
}

/** `npx tsx bench/startup.ts`: benchmark 8 alone (BENCH_QUICK=1 shortens it, as in run.ts). */
if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const report = await runStartupBench(process.env.BENCH_QUICK === "1");
  console.log(formatStartup(report));
  console.log(`\n${Targets.inline(startupTarget(report))}`);
}
