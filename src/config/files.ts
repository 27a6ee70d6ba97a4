import { readFileSync } from "node:fs";
import type { z } from "zod";

/**
 * The JSON files the environment names (MODEL_PRICES_FILE, META_RATES_FILE, a number's tools
 * file): read here, checked by the module that owns each one's meaning (src/ai/prices-file.ts,
 * src/costs/rates-file.ts, src/tools/tools-file.ts), every problem named with its place.
 */

/** The file's JSON, or undefined after reporting why it cannot be read. */
export function readJsonFile(variable: string, path: string, problems: string[]): unknown {
  try {
    return JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    problems.push(`${variable} cannot be read as JSON: ${(error as Error).message}`);
    return undefined;
  }
}

/** Reports each zod issue with its place in the file; a bad key says what a key must be (zod nests that message). */
export const reportIssues = (variable: string, problems: string[]) => (issue: z.core.$ZodIssue) => {
  const message = issue.code === "invalid_key" ? (issue.issues[0]?.message ?? issue.message) : issue.message;
  problems.push(`${variable} ${issue.path.join(".") || "(root)"}: ${message}`);
};
