import type { TurnAnswer } from "./converse.ts";
import type { Expectation } from "./file.ts";
import { isSubset } from "./stubs.ts";

/**
 * A case's expectations, checked on what the bot said: the words, the pattern, the knowledge
 * cited and the tools called (by the last answer), the handoff (of the case), each failure
 * saying what was seen instead. The rubric is graded separately (judge.ts).
 */

export type ExpectationKind = "contains" | "notContains" | "matches" | "cites" | "tools" | "noTools" | "handoff" | "rubric" | "stub";

export interface Checked {
  kind: ExpectationKind;
  /** What was expected, in words: `contains "closed"`. */
  expected: string;
  pass: boolean;
  /** What was seen instead, for a failure. */
  seen?: string | undefined;
}

const short = (text: string, max = 160) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);
const json = (value: unknown) => JSON.stringify(value);

export function checkExpectations(expect: Expectation, answers: readonly TurnAnswer[]): Checked[] {
  const last = answers.at(-1);
  const text = last?.text ?? "";
  const lower = text.toLowerCase();
  const checked: Checked[] = [];
  const said = `the answer was “${short(text)}”`;
  for (const words of expect.contains ?? [])
    checked.push({ kind: "contains", expected: `contains “${words}”`, pass: lower.includes(words.toLowerCase()), seen: said });
  for (const words of expect.notContains ?? [])
    checked.push({ kind: "notContains", expected: `does not contain “${words}”`, pass: !lower.includes(words.toLowerCase()), seen: said });
  if (expect.matches !== undefined)
    checked.push({ kind: "matches", expected: `matches /${expect.matches}/i`, pass: new RegExp(expect.matches, "i").test(text), seen: said });
  const cited = [...new Set((last?.citations ?? []).map((c) => c.source))];
  for (const file of expect.cites ?? [])
    checked.push({
      kind: "cites",
      expected: `cites ${file}`,
      pass: cited.some((source) => source === file || source.endsWith(`/${file}`)),
      seen: cited.length ? `it cited ${cited.join(", ")}` : "it cited nothing",
    });
  const calls = answers.flatMap((a) => a.toolCalls);
  const calledWords = calls.length ? `it called ${calls.map((c) => `${c.name} ${json(c.input)}`).join(", ")}` : "it called no tool";
  for (const tool of expect.tools ?? [])
    checked.push({
      kind: "tools",
      expected: `calls ${tool.name}${tool.input ? ` with ${json(tool.input)}` : ""}`,
      pass: calls.some((c) => c.name === tool.name && (tool.input === undefined || isSubset(tool.input, c.input))),
      seen: calledWords,
    });
  if (expect.noTools) checked.push({ kind: "noTools", expected: "calls no tool", pass: calls.length === 0, seen: calledWords });
  const handedOff = answers.some((a) => a.handoff !== undefined);
  if (expect.handoff !== undefined)
    checked.push({
      kind: "handoff",
      expected: expect.handoff ? "hands the customer to a person" : "does not hand the customer to a person",
      pass: handedOff === expect.handoff,
      seen: handedOff ? `it handed off: ${answers.find((a) => a.handoff)?.handoff}` : "it did not hand off",
    });
  // A tool no stub answers fails the case, whatever was expected of it: the answer stands on nothing the business said.
  for (const call of calls.filter((c) => c.how === "not_run"))
    checked.push({ kind: "stub", expected: `a stub answers ${call.name} ${json(call.input)}`, pass: false, seen: "no stub in the file matches that input" });
  return checked;
}
