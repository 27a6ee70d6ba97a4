import { readFileSync } from "node:fs";
import { isNode, LineCounter, parseDocument } from "yaml";
import { z } from "zod";

/**
 * An eval file (issue 34): the business's own questions, what each tool answers here, and what
 * the answers must show. YAML (JSON is YAML too), read by the `yaml` package, every problem
 * named with its line, as start-up names bad configuration.
 */

const object = z.record(z.string(), z.unknown());

export const toolStub = z.strictObject({
  input: object.optional().describe("matched as a subset of Claude's input; absent: any input"),
  answer: z.unknown().refine((v) => v !== undefined, { error: "answer is required" }),
  /** The business answered with an error (Claude reads it as one). */
  error: z.boolean().optional(),
});

const expectation = z.strictObject({
  contains: z.array(z.string().min(1)).optional(),
  notContains: z.array(z.string().min(1)).optional(),
  matches: z
    .string()
    .min(1)
    .refine(
      (pattern) => {
        try {
          new RegExp(pattern, "i");
          return true;
        } catch {
          return false;
        }
      },
      { error: "matches is not a valid regular expression" },
    )
    .optional(),
  cites: z.array(z.string().min(1)).optional(),
  tools: z.array(z.strictObject({ name: z.string().min(1), input: object.optional() })).optional(),
  noTools: z.boolean().optional(),
  handoff: z.boolean().optional(),
  rubric: z.string().min(1).optional(),
});

const evalCase = z.strictObject({
  name: z.string().trim().min(1),
  turns: z.array(z.string().trim().min(1)).min(1, { error: "a case needs at least one customer turn" }),
  expect: expectation,
});

const evalFileSchema = z.strictObject({
  number: z
    .union([z.string(), z.number()])
    .transform(String)
    .pipe(z.string().regex(/^\d+$/, { error: "number is a phone_number_id: digits" })),
  tools: z.record(z.string(), z.array(toolStub)).optional(),
  cases: z.array(evalCase).min(1, { error: "the file has no cases" }),
});

export type EvalFile = z.output<typeof evalFileSchema>;
export type EvalCase = EvalFile["cases"][number];
export type Expectation = EvalCase["expect"];
export type ToolStub = z.output<typeof toolStub>;

/** The file's problems, each "FILE:LINE: what", for the CLI to print before it exits 2. */
export class EvalFileError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join("\n"));
  }
}

/** A checked eval file, and where in it a value stands ("FILE:LINE"), for problems found later (a stub of a tool the number lacks). */
export interface ReadEvalFile {
  file: EvalFile;
  at(path: (string | number)[]): string;
}

/** Reads and checks an eval file; throws EvalFileError naming every problem with its line. */
export function readEvalFile(path: string): ReadEvalFile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (error) {
    throw new EvalFileError([`${path}: cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`]);
  }
  return parseEvalFile(path, text);
}

export function parseEvalFile(path: string, text: string): ReadEvalFile {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const at = (offset: number | undefined) => `${path}:${offset === undefined ? 1 : lines.linePos(offset).line}`;
  if (doc.errors.length > 0) throw new EvalFileError(doc.errors.map((e) => `${at(e.pos[0])}: ${e.message.split("\n")[0]}`));
  const parsed = evalFileSchema.safeParse(doc.toJS());
  const problems: string[] = [];
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const path = issue.path.map(String);
      problems.push(`${at(offsetOf(doc, path))}: ${path.join(".") || "(file)"}: ${issue.message}`);
    }
    throw new EvalFileError(problems);
  }
  const seen = new Map<string, number>();
  parsed.data.cases.forEach((c, i) => {
    if (seen.has(c.name)) problems.push(`${at(offsetOf(doc, ["cases", String(i), "name"]))}: cases.${i}.name: "${c.name}" names case ${seen.get(c.name)} too`);
    else seen.set(c.name, i);
  });
  if (problems.length > 0) throw new EvalFileError(problems);
  return { file: parsed.data, at: (keys) => at(offsetOf(doc, keys.map(String))) };
}

/** Where the value at `path` starts in the file: the deepest node of the path that exists. */
function offsetOf(doc: ReturnType<typeof parseDocument>, path: string[]): number | undefined {
  for (let depth = path.length; depth >= 0; depth--) {
    const keys = path.slice(0, depth).map((key) => (/^\d+$/.test(key) ? Number(key) : key));
    const node = depth === 0 ? doc.contents : doc.getIn(keys, true);
    if (isNode(node) && node.range) return node.range[0];
  }
  return undefined;
}
