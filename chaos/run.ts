import { execFileSync } from "node:child_process";
import { mkdtemp } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { fmt } from "../bench/stats.ts";
import { formatReport, missedGoals, type ScenarioError, type ScenarioResult } from "./report.ts";
import { COMMON_ENV, SCENARIOS, type Scenario } from "./scenarios.ts";
import { settle } from "./settle.ts";
import { ChaosSystem, closeAllSystems } from "./system.ts";

/**
 * `npm run chaos [-- 3 5 redis …]`: the system's real processes (web and workers, started
 * from src/main.ts) against production faults, each scenario on its own Postgres and Redis,
 * with a simulated Meta and Claude. Prints one table: messages sent in, answered,
 * dead-lettered, lost, Claude calls per answer and sends per reply part. It measures; it
 * does not assert: the exit code is 0 when goals are missed, 1 only when a scenario could
 * not run. Progress goes to stderr, the report to stdout; process logs go to files.
 */

/** After the last activity, a settled system should stay quiet this long (a late resend would show). */
const QUIET = {
  shortMs: 4000,
  longMs: Number(COMMON_ENV.RECONCILE_AFTER_MS) + 2 * Number(COMMON_ENV.RECONCILE_INTERVAL_MS),
};

function chosen(args: string[]): Scenario[] {
  if (args.length === 0) return SCENARIOS;
  const picked = SCENARIOS.filter((s) => args.some((a) => (/^\d+$/.test(a) ? String(s.id) === a : s.slug.includes(a))));
  if (picked.length === 0) {
    console.error(`no scenario matches ${args.join(" ")}; there are:\n${SCENARIOS.map((s) => `  ${s.id}. ${s.slug}`).join("\n")}`);
    process.exit(2);
  }
  return picked;
}

/** Which code was measured: the commit, and whether src/ differs from it. */
function measuredCode(): string {
  try {
    const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--", "src"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim() !== "";
    return `commit ${commit}${dirty ? " + uncommitted changes in src/" : ""}`;
  } catch {
    return "commit unknown (no git)";
  }
}

async function runScenario(scenario: Scenario, logRoot: string): Promise<ScenarioResult | ScenarioError> {
  const slug = `${scenario.id}-${scenario.slug}`;
  const logDir = join(logRoot, slug);
  const started = Date.now();
  let system: ChaosSystem | undefined;
  try {
    system = await ChaosSystem.start({
      slug,
      logRoot,
      workers: scenario.workers,
      env: { ...COMMON_ENV, ...scenario.env },
      claudeLatencyMs: scenario.claudeLatencyMs,
      duplicateRate: scenario.duplicateRate ?? 0.1,
      shop: scenario.shop,
      seed: scenario.id,
    });
    const injection = await scenario.run(system);
    system.deliverer.deadline = injection.deadline;
    const outcome = await settle(system, injection.deadline, QUIET);
    return {
      scenario,
      note: injection.note,
      claudeAllowance: injection.claudeAllowance ?? 0,
      outcome,
      delivery: system.deliverer.stats,
      duplicatesDelivered: system.customers.duplicatesDelivered,
      unexpectedExits: system.processes.filter((p) => !p.running && !p.killedOnPurpose).map((p) => `${p.name} (${p.exit}, see ${p.logPath})`),
      elapsedMs: Date.now() - started,
      logDir,
    };
  } catch (error) {
    return { scenario, error, logDir };
  } finally {
    await system?.close();
  }
}

async function main(): Promise<void> {
  const scenarios = chosen(process.argv.slice(2));
  const started = Date.now();
  const logRoot = await mkdtemp(join(tmpdir(), "chaos-"));
  console.log(`# whatsapp-ai-reply chaos: the real processes under production faults`);
  console.log(`${new Date().toISOString()}  node ${process.version}  ${availableParallelism()} cores  ${measuredCode()}`);
  console.log(
    `settings: ${Object.entries(COMMON_ENV)
      .map(([k, v]) => `${k}=${v}`)
      .join(" ")}\n`,
  );

  const results: (ScenarioResult | ScenarioError)[] = [];
  for (const [i, scenario] of scenarios.entries()) {
    console.error(`[${i + 1}/${scenarios.length}] ${scenario.id}. ${scenario.slug} ...`);
    const result = await runScenario(scenario, logRoot);
    results.push(result);
    const summary =
      "error" in result
        ? `could not run: ${result.error instanceof Error ? result.error.message : String(result.error)}`
        : `${result.outcome.tally.lost} lost, ${fmt(result.elapsedMs / 1000)} s${missedGoals(result).length ? " (goal missed)" : ""}`;
    console.error(`      ${summary}`);
  }

  console.log(formatReport(results));
  console.log(`\ntotal chaos time ${fmt((Date.now() - started) / 1000)} s; process logs under ${logRoot}`);
  if (results.some((r) => "error" in r)) process.exitCode = 1;
}

let stopping = false;
async function interrupted(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  console.error(`\n${signal}: stopping every process and server started by this run ...`);
  await closeAllSystems();
  process.exit(130);
}
process.on("SIGINT", () => void interrupted("SIGINT"));
process.on("SIGTERM", () => void interrupted("SIGTERM"));

main()
  .catch((error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  })
  .finally(async () => {
    await closeAllSystems();
    // A straggling timer or socket must not keep a finished run alive.
    process.exit(process.exitCode ?? 0);
  });
