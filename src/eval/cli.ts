import { statSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import { ClaudeClient } from "../ai/claude.ts";
import { type Clock, systemClock } from "../clock.ts";
import { ConfigError } from "../config/config.ts";
import { createDb, type Db } from "../db/client.ts";
import { type KnowledgeBase, startKnowledgeBase } from "../knowledge/knowledge.ts";
import { createLogger, type Logger } from "../logger.ts";
import { createMetrics } from "../metrics/metrics.ts";
import { loadSettings, type Settings } from "../settings.ts";
import { businessActions } from "../tools/actions.ts";
import type { ConverseSettings } from "./converse.ts";
import { EvalFileError, type ReadEvalFile, readEvalFile } from "./file.ts";
import { caseLines, passes, progressBar, reportJson, reportJunit, summaryLines } from "./report.ts";
import { type CaseResult, type EvalReport, runEval } from "./run.ts";

/**
 * npm run eval -- FILE [--json OUT] [--junit OUT] [--concurrency N] [--case NAME] [--min-pass SHARE] [--live-tools]
 *
 * The business's questions run through the code that answers customers, with its tools stubbed,
 * nothing sent and nothing stored (issue 34). Exit 0 when the share of cases passed reaches
 * --min-pass (default 1), 1 when it does not, 2 for a bad file, option or configuration, each
 * problem named.
 */

export const EVAL_USAGE = "usage: npm run eval -- FILE [--json OUT] [--junit OUT] [--concurrency N] [--case NAME] [--min-pass SHARE] [--live-tools]";

export interface EvalIo {
  out(line: string): void;
  err(line: string): void;
  /** A terminal: a progress bar is drawn on stderr as cases finish. */
  tty: boolean;
  /** Rewrites the progress bar's line ("" clears it). */
  progress?(text: string): void;
}

/**
 * What the eval never uses, filled so the settings read as they would for `npm start`: it
 * talks to no Meta, serves no staff, and reads Postgres only for stored knowledge passages.
 */
const NOT_USED_BY_THE_EVAL: Record<string, string> = {
  WHATSAPP_VERIFY_TOKEN: "not-used-by-the-eval",
  WHATSAPP_APP_SECRET: "not-used-by-the-eval",
  WHATSAPP_ACCESS_TOKEN: "not-used-by-the-eval",
  ADMIN_TOKEN: "not-used-by-the-eval-0000",
  DATABASE_URL: "postgresql://eval@127.0.0.1:1/not-used-by-the-eval",
};

interface Options {
  file: string;
  json?: string | undefined;
  junit?: string | undefined;
  concurrency: number;
  only?: string | undefined;
  minPass: number;
  liveTools: boolean;
}

function readOptions(argv: string[]): Options | string[] {
  let parsed: ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    return [(error as Error).message, EVAL_USAGE];
  }
  const { values, positionals } = parsed;
  const problems: string[] = [];
  if (positionals.length !== 1) problems.push(positionals.length === 0 ? "name the eval file" : `one eval file, not ${positionals.length}`);
  const concurrency = Number(values.concurrency ?? 4);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 32) problems.push("--concurrency must be a whole number from 1 to 32");
  const minPass = Number(values["min-pass"] ?? 1);
  if (!Number.isFinite(minPass) || minPass < 0 || minPass > 1) problems.push("--min-pass must be a share from 0 to 1 (0.9: nine cases in ten)");
  if (problems.length > 0) return [...problems, EVAL_USAGE];
  return {
    file: positionals[0]!,
    json: values.json,
    junit: values.junit,
    concurrency,
    only: values.case,
    minPass,
    liveTools: values["live-tools"] ?? false,
  };
}

const OPTIONS = {
  json: { type: "string" },
  junit: { type: "string" },
  concurrency: { type: "string" },
  case: { type: "string" },
  "min-pass": { type: "string" },
  "live-tools": { type: "boolean" },
} as const;

/** Runs the eval the arguments ask for; resolves with the exit code. */
export async function runEvalCli(argv: string[], env: Record<string, string | undefined>, io: EvalIo): Promise<number> {
  const options = readOptions(argv);
  if (Array.isArray(options)) return refuse(io, options);
  const loaded = loadFileAndSettings(options, env);
  if (Array.isArray(loaded)) return refuse(io, loaded);
  const { read, settings } = loaded;
  const { file } = read;

  const clock = systemClock;
  const logger = createLogger({ level: env.LOG_LEVEL ?? "error" });
  // Read only for knowledge past KNOWLEDGE_TOKEN_BUDGET (its stored passages), one query at a time.
  const db = createDb(settings.databaseUrl, { poolSize: 2 });
  const knowledge = await openKnowledge(file.number, settings, { db, logger, clock });
  const claude = new ClaudeClient({ ...settings.anthropic });
  const judge = new ClaudeClient({ ...settings.anthropic, model: settings.anthropic.judgeModel });
  const cases = options.only ? 1 : file.cases.length;
  io.out(`Eval of ${options.file}: ${cases} case${cases === 1 ? "" : "s"} for number ${file.number}, asked of ${claude.model} (rubrics: ${judge.model})`);
  try {
    const report = await runEval(
      {
        clock,
        logger,
        claude,
        judge,
        knowledge,
        metrics: createMetrics(),
        actions: businessActions(settings.businessTools, settings.tools.answerMaxBytes, clock),
        graph: { downloadMedia: () => Promise.reject(new Error("an eval's turns are words only")) },
      },
      converseSettings(settings),
      file,
      {
        concurrency: options.concurrency,
        only: options.only,
        liveTools: options.liveTools,
        onCase: (result, done, of) => showCase(io, result, done, of),
      },
    );
    return finish(io, options, report);
  } finally {
    await knowledge?.close();
    await db.$disconnect();
  }
}

/** Problems found before anything is opened end the run with exit 2, each one named. */
function refuse(io: EvalIo, problems: readonly string[]): number {
  for (const line of problems) io.err(line);
  return 2;
}

/**
 * The eval file and the settings, or what is wrong with them. A bad file or configuration is the
 * user's to fix (exit 2); anything else is a bug and is thrown.
 */
function loadFileAndSettings(options: Options, env: Record<string, string | undefined>): { read: ReadEvalFile; settings: Settings } | string[] {
  let read: ReadEvalFile;
  let settings: Settings;
  try {
    read = readEvalFile(options.file);
    settings = loadSettings({ ...NOT_USED_BY_THE_EVAL, ...env });
  } catch (error) {
    if (error instanceof EvalFileError) return error.problems;
    if (error instanceof ConfigError) return [error.message];
    throw error;
  }
  const problems = fileProblems(read, settings, options);
  return problems.length > 0 ? problems : { read, settings };
}

/** The number's knowledge, read as live replies read it but never written (readOnly): the eval stores nothing. */
async function openKnowledge(phoneNumberId: string, settings: Settings, deps: { db: Db; logger: Logger; clock: Clock }): Promise<KnowledgeBase | undefined> {
  const number = settings.numbers.get(phoneNumberId);
  if (!number?.knowledgeDir) return undefined;
  return startKnowledgeBase({
    ...deps,
    dirs: new Map([[phoneNumberId, number.knowledgeDir]]),
    tokenBudget: settings.knowledge.tokenBudget,
    limits: settings.knowledge.limits,
    language: settings.searchLanguage,
    readOnly: true,
  });
}

/** The same settings a live reply is made with, so the eval measures what customers get. */
function converseSettings(settings: Settings): ConverseSettings {
  return {
    numbers: settings.numbers,
    tools: settings.tools,
    modelPrices: settings.costs.modelPrices,
    historyMessages: settings.anthropic.historyMessages,
    historyTokenBudget: settings.anthropic.historyTokenBudget,
    mediaMaxBytes: settings.conversation.mediaMaxBytes,
    handoffReply: settings.conversation.handoffReply,
  };
}

/** A finished case's lines, printed above the progress bar so the bar stays the last line on a terminal. */
function showCase(io: EvalIo, result: CaseResult, done: number, of: number): void {
  if (io.tty) io.progress?.("");
  for (const line of caseLines(result)) io.out(line);
  if (io.tty) io.progress?.(done < of ? progressBar(done, of) : "");
}

/** Prints the summary, writes the reports asked for, and answers the exit code: 0 when --min-pass is reached, else 1. */
function finish(io: EvalIo, options: Options, report: EvalReport): number {
  for (const line of summaryLines(report, options.minPass)) io.out(line);
  if (options.json) writeFileSync(options.json, reportJson(options.file, report, options.minPass));
  if (options.junit) writeFileSync(options.junit, reportJunit(options.file, report));
  return passes(report, options.minPass) ? 0 : 1;
}

/** What the file asks that this configuration cannot give: its number, a case, a stubbed tool, a place to write. */
function fileProblems(read: ReadEvalFile, settings: Settings, options: Options): string[] {
  const { file, at } = read;
  const problems: string[] = [];
  if (!settings.numbers.has(file.number))
    problems.push(
      `${at(["number"])}: number ${file.number} is not an entry of PHONE_NUMBERS_FILE (${settings.numbers.size ? [...settings.numbers.keys()].join(", ") : "none set"})`,
    );
  const tools = new Set((settings.businessTools.get(file.number) ?? []).map((t) => t.name));
  for (const name of Object.keys(file.tools ?? {}))
    if (!tools.has(name)) problems.push(`${at(["tools", name])}: tools.${name}: number ${file.number} has no tool named ${name} (its toolsFile)`);
  if (options.only && !file.cases.some((c) => c.name === options.only)) problems.push(`--case: no case is named "${options.only}"`);
  for (const out of [options.json, options.junit]) if (out && !isWritableDir(dirname(resolve(out)))) problems.push(`${out}: its folder does not exist`);
  return problems;
}

function isWritableDir(dir: string): boolean {
  try {
    return statSync(dir).isDirectory();
  } catch {
    return false;
  }
}
