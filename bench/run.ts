import { execFileSync } from "node:child_process";
import { availableParallelism, cpus, loadavg } from "node:os";
import { runCacheBench } from "./cache.ts";
import { conversationsSettings, conversationsTarget, formatConversations, runConversationsBench } from "./conversations.ts";
import { formatIngest, ingestSettings, ingestTargets, runIngestBench } from "./ingest.ts";
import { formatIsolation, isolationSettings, isolationTarget, runIsolationBench } from "./isolation.ts";
import { LoadGenerator } from "./load.ts";
import { formatScale, runScaleBench, scaleSettings } from "./scale.ts";
import { formatSplit, runSplitBench, splitSettings } from "./split.ts";
import { answeringPerMessage, formatSql, runSqlBench, type SqlSettings } from "./sql.ts";
import { formatStartup, runStartupBench, startupTarget } from "./startup.ts";
import { fmt } from "./stats.ts";
import { type TargetLine, Targets } from "./targets.ts";
import { runWorkerBench } from "./worker-bench.ts";

/**
 * `npm run bench`: benchmark 1 (webhook ingest over HTTP), benchmark 2 (worker end to end,
 * the worker in a process of its own), benchmark 3 (prompt caching), benchmark 4 (SQL per
 * answered message and the plans of every statement), benchmark 5 (webhook acks with the
 * workers saturated, in npm start's layouts), benchmark 6 (1 and 2 worker processes, on one
 * Redis and on a Redis Cluster), benchmark 7 (splitting a 100 000-unit reply, beside a floor
 * measured in the same run), benchmark 8 (start-up, compiled and through tsx), benchmark 9
 * (GET /admin/conversations at 100 000 conversations against an empty database), printed as
 * tables, then issues 10's, 22's and 36's
 * targets beside their figures. Needs Redis and Postgres as for the tests (TEST_REDIS_URL,
 * TEST_DATABASE_URL); each benchmark builds its own isolated harness and removes it after.
 * BENCH_QUICK=1 shortens every phase, for checking the bench itself, not for figures.
 */

const quick = process.env.BENCH_QUICK === "1";

const ingest = ingestSettings(quick);

const sql: SqlSettings = { customers: quick ? 5 : 50, storedMessages: quick ? 10_000 : 100_000, timeoutMs: 60_000 };

/**
 * Issue 10's figures on main before the work on it (commit c6a175b, measured by this bench:
 * bench/BASELINE-issue-10.md): what each target is measured against.
 */
const BASELINE = {
  sqlPerMessage: "37",
  seqScans: "0 of 33",
};

/** Other work on the machine moves every figure here; print it so a reader can tell. */
const machineLoad = () =>
  `load average ${loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")}`;

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
    // The bench itself may be ahead of the code it measures: name the commit src/ and prisma/ come from.
    const code = execFileSync("git", ["log", "-1", "--format=%h", "--", "src", "prisma"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    return `commit ${commit}${code && code !== commit ? ` (src/ and prisma/ as of ${code})` : ""}${dirty ? " + uncommitted changes in src/" : ""}`;
  } catch {
    return "commit unknown (no git)";
  }
}

async function main(): Promise<void> {
  const started = Date.now();
  console.log(`# whatsapp-ai-reply benchmarks${quick ? " (BENCH_QUICK: figures not meaningful)" : ""}`);
  console.log(`${new Date().toISOString()}  node ${process.version}  ${availableParallelism()} cores (${cpus()[0]?.model ?? "unknown cpu"})  ${machineLoad()}`);
  console.log(`${measuredCode()}\n`);

  // Each benchmark prints its own section and adds its target lines; the machine's load is
  // printed between them, since other work on the machine moves the figures that follow.
  const targets = new Targets();
  await benchIngest(targets);
  console.log(`\n${machineLoad()}`);
  await benchWorker(targets);
  await benchCache();
  console.log(`\n${machineLoad()}`);
  await benchSql(targets);
  console.log(`\n${machineLoad()}`);
  await benchIsolation(targets);
  console.log(`\n${machineLoad()}`);
  await benchScale();
  console.log(`\n${machineLoad()}`);
  benchSplit();
  console.log(`\n${machineLoad()}`);
  await benchStartup(targets);
  console.log(`\n${machineLoad()}`);
  await benchConversations(targets);

  console.log("\n## Targets of issues 10, 22 and 33 (baseline: main before the work: bench/BASELINE-issue-10.md, issue 22's text)\n");
  console.log(targets.format());

  console.log(`\n${machineLoad()} at the end; total bench time ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

/** Prints a benchmark's target lines under its tables, and keeps them for the summary at the end. */
function addTargets(targets: Targets, lines: TargetLine[]): void {
  console.log("");
  for (const line of lines) {
    console.log(Targets.inline(line));
    targets.add(line);
  }
}

async function benchIngest(targets: Targets): Promise<void> {
  console.log("## Benchmark 1: webhook ingest (POST /webhook over HTTP, workers off)\n");
  const load = LoadGenerator.start();
  try {
    const report = await runIngestBench(load, ingest);
    console.log(formatIngest(report));
    addTargets(targets, ingestTargets(report));
  } finally {
    await load.close();
  }
}

async function benchWorker(targets: Targets): Promise<void> {
  console.log("\n## Benchmark 2: worker end to end, the worker in a process of its own (REPLY_DEBOUNCE_MS 0, one user per message)\n");
  const worker = await runWorkerBench(quick);
  console.log(worker.text);
  // The worker bench prints its target lines inside its text: here they are only kept.
  for (const line of worker.lines) targets.add(line);
}

async function benchCache(): Promise<void> {
  console.log("\n## Benchmark 3: prompt caching with each model's minimum prefix: the share of the prompt read from cache\n");
  console.log(await runCacheBench());
}

async function benchSql(targets: Targets): Promise<void> {
  console.log("\n## Benchmark 4: SQL statements per answered message, and the plan of every statement\n");
  const counted = await runSqlBench(sql);
  console.log(formatSql(counted));
  const worst = answeringPerMessage(counted).reduce((w, p) => (p.perMessage > w.perMessage ? p : w));
  addTargets(targets, [
    {
      target: "1. SQL per answered text message, inbound + reply jobs",
      goal: "≤ 8",
      figure: `${fmt(worst.perMessage, 1)} (${worst.phase})`,
      met: worst.perMessage <= 8,
      baseline: BASELINE.sqlPerMessage,
    },
    {
      target: `2a. statements reading a large table by Seq Scan (${fmt(counted.seeded.messages)} messages stored)`,
      goal: "0",
      figure: `${counted.plans.failing.length} of ${counted.plans.statements.length}`,
      met: counted.plans.failing.length === 0,
      baseline: BASELINE.seqScans,
    },
  ]);
}

async function benchIsolation(targets: Targets): Promise<void> {
  console.log("\n## Benchmark 5: webhook acks while the workers are saturated (npm start's layouts, real processes)\n");
  const isolation = isolationSettings(quick);
  const isolationLoad = LoadGenerator.start(undefined, { ownSession: true });
  try {
    const runs = await runIsolationBench(isolationLoad, isolation);
    console.log(formatIsolation(runs, isolation));
    addTargets(targets, [isolationTarget(runs, isolation)]);
  } finally {
    await isolationLoad.close();
  }
}

async function benchScale(): Promise<void> {
  console.log("\n## Benchmark 6: scaling out, 1 and 2 worker processes on one Redis and on a Redis Cluster (real processes)\n");
  const scale = scaleSettings(quick);
  console.log(formatScale(await runScaleBench(scale), scale));
}

function benchSplit(): void {
  console.log("\n## Benchmark 7: splitting a 100 000-unit reply into WhatsApp messages (CPU on the worker's event loop)\n");
  console.log(formatSplit(runSplitBench(splitSettings(quick))));
}

async function benchStartup(targets: Targets): Promise<void> {
  console.log("\n## Benchmark 8: start-up, npm start's layout from process start to the first /readyz 200, compiled and through tsx\n");
  const startup = await runStartupBench(quick);
  console.log(formatStartup(startup));
  addTargets(targets, [startupTarget(startup)]);
}

async function benchConversations(targets: Targets): Promise<void> {
  console.log("\n## Benchmark 9: GET /admin/conversations, the first page and searches, at 100 000 conversations and on an empty database\n");
  const conversations = await runConversationsBench(conversationsSettings(quick));
  console.log(formatConversations(conversations));
  addTargets(targets, [conversationsTarget(conversations)]);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
