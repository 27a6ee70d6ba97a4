import type { CallUsage, ClaudeClient } from "../ai/claude.ts";
import { estimateCostUsd } from "../ai/pricing.ts";
import type { BusinessActions } from "../tools/actions.ts";
import { type ConverseDeps, type ConverseSettings, converse, type TurnAnswer } from "./converse.ts";
import { type Checked, checkExpectations } from "./expect.ts";
import type { EvalCase, EvalFile } from "./file.ts";
import { grade } from "./judge.ts";
import { stubbedActions } from "./stubs.ts";

/**
 * Runs an eval file's cases (issue 34), a few at a time: each case's turns answered as live
 * (converse.ts) with the file's stubs for tools, its expectations checked, its rubric graded.
 */

export interface EvalDeps extends Omit<ConverseDeps, "actions"> {
  /** The number's real tools: what Claude is told of them, and `--live-tools`' calls. */
  actions: BusinessActions;
  /** Claude as EVAL_JUDGE_MODEL, for rubrics. */
  judge: Pick<ClaudeClient, "ask">;
}

export interface EvalOptions {
  concurrency: number;
  /** Only the case of this name. */
  only?: string | undefined;
  /** `--live-tools`: a call no stub answers goes to the business. */
  liveTools: boolean;
  /** Told of each case as it finishes (the CLI prints a line). */
  onCase?: (result: CaseResult, done: number, of: number) => void;
}

export interface CaseResult {
  name: string;
  pass: boolean;
  checks: Checked[];
  answers: TurnAnswer[];
  rubric?: { pass: boolean; reason: string } | undefined;
  /** Why the case could not run to its end (Claude refused the request, a tool threw). */
  error?: string | undefined;
  /** Every Claude call the case made, its judge's included. */
  usage: CallUsage[];
  ms: number;
}

export interface EvalReport {
  cases: CaseResult[];
  passed: number;
  failedByKind: Record<string, number>;
  claudeCalls: number;
  tokens: { input: number; output: number; cacheRead: number; cacheWrite: number };
  /** Undefined when a model has no price. */
  costUsd: number | undefined;
  ms: number;
}

export async function runEval(deps: EvalDeps, settings: ConverseSettings, file: EvalFile, options: EvalOptions): Promise<EvalReport> {
  const began = deps.clock.monotonicMs();
  const cases = options.only ? file.cases.filter((c) => c.name === options.only) : file.cases;
  const results: CaseResult[] = new Array(cases.length);
  let next = 0;
  let done = 0;
  const worker = async () => {
    for (let i = next++; i < cases.length; i = next++) {
      results[i] = await runCase(deps, settings, file, cases[i]!, options.liveTools);
      options.onCase?.(results[i]!, ++done, cases.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.concurrency, cases.length)) }, worker));
  return summarise(results, deps.clock.monotonicMs() - began, settings);
}

async function runCase(deps: EvalDeps, settings: ConverseSettings, file: EvalFile, evalCase: EvalCase, liveTools: boolean): Promise<CaseResult> {
  const began = deps.clock.monotonicMs();
  const actions = stubbedActions(deps.actions, file.tools ?? {}, { live: liveTools ? "all" : "none" });
  const usage: CallUsage[] = [];
  let answers: TurnAnswer[] = [];
  try {
    answers = await converse({ ...deps, actions }, settings, file.number, `eval.${evalCase.name}`, evalCase.turns);
    usage.push(...answers.flatMap((a) => a.usage));
    const checks = checkExpectations(evalCase.expect, answers);
    let rubric: CaseResult["rubric"];
    if (evalCase.expect.rubric) {
      const graded = await grade(deps.judge, answers, evalCase.expect.rubric);
      usage.push(graded.usage);
      rubric = { pass: graded.pass, reason: graded.reason };
      checks.push({ kind: "rubric", expected: `meets the rubric “${evalCase.expect.rubric}”`, pass: graded.pass, seen: `the judge: ${graded.reason}` });
    }
    return { name: evalCase.name, pass: checks.every((c) => c.pass), checks, answers, rubric, usage, ms: deps.clock.monotonicMs() - began };
  } catch (error) {
    usage.push(...answers.flatMap((a) => a.usage));
    // A Claude or tool failure says where it came from ("anthropic 400: …"): the message as it is.
    const reason = error instanceof Error ? error.message : String(error);
    return { name: evalCase.name, pass: false, checks: [], answers, error: reason, usage, ms: deps.clock.monotonicMs() - began };
  }
}

function summarise(cases: CaseResult[], ms: number, settings: Pick<ConverseSettings, "modelPrices">): EvalReport {
  const usage = cases.flatMap((c) => c.usage);
  const failedByKind: Record<string, number> = {};
  for (const c of cases) {
    if (c.error) failedByKind.error = (failedByKind.error ?? 0) + 1;
    for (const check of c.checks) if (!check.pass) failedByKind[check.kind] = (failedByKind[check.kind] ?? 0) + 1;
  }
  const costs = usage.map((u) => estimateCostUsd(u.model, u, settings.modelPrices));
  return {
    cases,
    passed: cases.filter((c) => c.pass).length,
    failedByKind,
    claudeCalls: usage.length,
    tokens: {
      input: usage.reduce((n, u) => n + u.inputTokens, 0),
      output: usage.reduce((n, u) => n + u.outputTokens, 0),
      cacheRead: usage.reduce((n, u) => n + u.cacheReadTokens, 0),
      cacheWrite: usage.reduce((n, u) => n + u.cacheCreationTokens, 0),
    },
    costUsd: costs.every((c) => c !== undefined) ? costs.reduce((n, c) => n + c, 0) : undefined,
    ms,
  };
}
