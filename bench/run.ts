import { execFileSync } from "node:child_process";
import { availableParallelism, cpus, loadavg } from "node:os";
import { formatEndToEnd, runEndToEnd, type EndToEndResult, type EndToEndScenario } from "./e2e.ts";
import { runCacheBench } from "./cache.ts";
import { formatIngest, runIngestBench, type IngestSettings } from "./ingest.ts";
import { LoadGenerator } from "./load.ts";

/**
 * `npm run bench`: benchmark 1 (webhook ingest over HTTP) and benchmark 2 (worker end to
 * end), printed as tables. Needs Redis and Postgres as for the tests (TEST_REDIS_URL,
 * TEST_DATABASE_URL); each benchmark builds its own isolated harness and removes it after.
 * BENCH_QUICK=1 shortens every phase, for checking the bench itself, not for figures.
 */

const quick = process.env.BENCH_QUICK === "1";

const ingest: IngestSettings = {
  rounds: quick ? 1 : 3,
  connections: 16,
  warmupMs: quick ? 300 : 1000,
  durationMs: quick ? 1000 : 5000,
  openRate: 500,
  openConnections: 64,
};

const endToEnd: EndToEndScenario[] = [
  {
    name: "(a) fakes at 0 ms",
    messages: quick ? 100 : 500,
    claudeLatencyMs: 0,
    replyConcurrency: 50,
    deliveryConcurrency: 16,
    idleSamples: quick ? 3 : 200,
    timeoutMs: 120_000,
  },
  {
    name: "(b) Claude at 2000 ms",
    messages: quick ? 100 : 200,
    claudeLatencyMs: 2000,
    replyConcurrency: 50,
    deliveryConcurrency: 16,
    idleSamples: 0, // the idle latency is (a)'s plus the 2 s Claude is told to take
    timeoutMs: 120_000,
  },
];

/** Other work on the machine moves every figure here; print it so a reader can tell. */
const machineLoad = () => `load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`;

/** Which code was measured: the commit, and whether src/ differed from it (read-only git calls). */
function measuredCode(): string {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    let dirty = false;
    try {
      execFileSync("git", ["diff", "--quiet", "HEAD", "--", "src"], { stdio: "ignore" });
    } catch {
      dirty = true; // exit status 1: src/ has changes not in the commit
    }
    return `commit ${commit}${dirty ? " + uncommitted changes in src/" : ""}`;
  } catch {
    return "commit unknown (no git)";
  }
}

async function main(): Promise<void> {
  const started = Date.now();
  console.log(`# whatsapp-ai-reply benchmarks${quick ? " (BENCH_QUICK: figures not meaningful)" : ""}`);
  console.log(`${new Date().toISOString()}  node ${process.version}  ${availableParallelism()} cores (${cpus()[0]?.model ?? "unknown cpu"})  ${machineLoad()}`);
  console.log(`${measuredCode()}\n`);

  console.log("## Benchmark 1: webhook ingest (POST /webhook over HTTP, workers off)\n");
  const load = LoadGenerator.start();
  try {
    console.log(formatIngest(await runIngestBench(load, ingest)));
  } finally {
    await load.close();
  }

  console.log(`\n${machineLoad()}`);
  console.log(`\n## Benchmark 2: worker end to end (REPLY_CONCURRENCY ${endToEnd[0]?.replyConcurrency}, REPLY_DEBOUNCE_MS 0, one user per message)\n`);
  const results: EndToEndResult[] = [];
  for (const scenario of endToEnd) results.push(await runEndToEnd(scenario));
  console.log(formatEndToEnd(results));

  console.log("\n## Benchmark 3: Claude input tokens per reply, with and without prompt caching\n");
  console.log(await runCacheBench());

  console.log(`\n${machineLoad()} at the end; total bench time ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
