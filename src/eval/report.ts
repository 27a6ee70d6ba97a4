import type { CaseResult, EvalReport } from "./run.ts";

/**
 * How an eval's results are told: a line per case as it finishes, a summary, and for CI the
 * whole report as JSON and as JUnit XML (one testcase per case, a failure naming what failed).
 */

const usd = (amount: number | undefined) => (amount === undefined ? "unpriced" : `$${amount.toFixed(4)}`);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** "✓ name" or "✗ name", and under a failure each expectation that failed with what was seen. */
export function caseLines(result: CaseResult): string[] {
  if (result.pass) return [`✓ ${result.name} (${seconds(result.ms)})`];
  const lines = [`✗ ${result.name} (${seconds(result.ms)})`];
  if (result.error) lines.push(`    error: ${result.error}`);
  for (const check of result.checks.filter((c) => !c.pass)) lines.push(`    ${check.expected}: ${check.seen ?? "not so"}`);
  return lines;
}

/** A progress bar for a terminal: [#####-----] 5/10. */
export function progressBar(done: number, of: number, width = 24): string {
  const filled = Math.round((done / Math.max(1, of)) * width);
  return `[${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${of}`;
}

export function summaryLines(report: EvalReport, minPass: number): string[] {
  const total = report.cases.length;
  const share = total === 0 ? 0 : report.passed / total;
  const kinds = Object.entries(report.failedByKind)
    .map(([kind, n]) => `${kind} ${n}`)
    .join(", ");
  const { tokens } = report;
  return [
    "",
    `${report.passed} of ${total} cases passed (${Math.round(share * 100)}%; needed ${Math.round(minPass * 100)}%)${kinds ? `; failed expectations: ${kinds}` : ""}`,
    `Claude: ${report.claudeCalls} calls, tokens in ${tokens.input}, out ${tokens.output}, cache read ${tokens.cacheRead}, cache write ${tokens.cacheWrite}; ${usd(report.costUsd)}; ${seconds(report.ms)}`,
  ];
}

/** The report for `--json`: every case with its expectations, answers, citations, tool calls and usage. */
export function reportJson(file: string, report: EvalReport, minPass: number): string {
  return `${JSON.stringify(
    {
      file,
      passed: report.passed,
      total: report.cases.length,
      minPass,
      ok: passes(report, minPass),
      failedByKind: report.failedByKind,
      claudeCalls: report.claudeCalls,
      tokens: report.tokens,
      costUsd: report.costUsd ?? null,
      ms: Math.round(report.ms),
      cases: report.cases.map((c) => ({
        name: c.name,
        pass: c.pass,
        error: c.error ?? null,
        expectations: c.checks,
        rubric: c.rubric ?? null,
        answers: c.answers.map((a) => ({ turn: a.turn, text: a.text, handoff: a.handoff ?? null, citations: a.citations, toolCalls: a.toolCalls })),
        usage: c.usage,
        ms: Math.round(c.ms),
      })),
    },
    null,
    2,
  )}\n`;
}

/** Text as XML 1.0 takes it: its five special characters escaped, and the control characters it cannot hold at all dropped. */
const xml = (text: string) =>
  [...text]
    .filter((c) => c >= " " || c === "\t" || c === "\n" || c === "\r")
    .join("")
    .replace(/[<>&"']/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&apos;" })[c]!);

/** The report for `--junit`: one testsuite, a testcase per case, a failure naming the expectations that failed. */
export function reportJunit(file: string, report: EvalReport): string {
  const failures = report.cases.filter((c) => !c.pass).length;
  const cases = report.cases.map((c) => {
    const open = `  <testcase classname="${xml(file)}" name="${xml(c.name)}" time="${(c.ms / 1000).toFixed(3)}"`;
    if (c.pass) return `${open}/>`;
    const failed = [...(c.error ? [`error: ${c.error}`] : []), ...c.checks.filter((k) => !k.pass).map((k) => `${k.expected}: ${k.seen ?? "not so"}`)];
    return `${open}>\n    <failure message="${xml(failed[0] ?? "failed")}">${xml(failed.join("\n"))}</failure>\n  </testcase>`;
  });
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuite name="${xml(file)}" tests="${report.cases.length}" failures="${failures}" errors="0" time="${(report.ms / 1000).toFixed(3)}">`,
    ...cases,
    "</testsuite>",
    "",
  ].join("\n");
}

/** Whether the share of cases passed reaches `minPass` (0 to 1). */
export const passes = (report: EvalReport, minPass: number) => report.cases.length > 0 && report.passed / report.cases.length >= minPass;
