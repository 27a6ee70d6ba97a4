import { readFileSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { z } from "zod";

/**
 * Per business number (`phone_number_id`): its own system prompt, a template for when the
 * window has closed, the business's own knowledge, and its own tools (a file src/tools/tools-file.ts reads).
 * Paths are relative to the file's directory.
 */
const numberSettingsSchema = z
  .object({
    systemPrompt: z.string().trim().min(1).optional(),
    systemPromptFile: z.string().min(1).optional(),
    windowClosedTemplate: z
      .object({ name: z.string().min(1), language: z.string().min(2) })
      .strict()
      .optional(),
    knowledgeDir: z.string().min(1).optional(),
    toolsFile: z.string().min(1).optional(),
    /** What the number may spend on Claude in a UTC day, in USD (Meta's charges are in another currency, never added). */
    dailyBudget: z
      .object({ usd: z.number().positive().finite() }, { error: 'must be { "usd": <amount> }: the budget names its currency (Claude is billed in USD)' })
      .strict()
      .optional(),
  })
  .strict();
const numbersFileSchema = z.record(z.string(), numberSettingsSchema);

/**
 * The business numbers this deployment answers: those PHONE_NUMBERS_FILE lists, or, without
 * the file, "every" number Meta delivers for. Anything for another number is acknowledged and
 * dropped at the webhook: never stored, never sent to Claude, never answered with our token.
 */
export type ServedNumbers = "every" | ReadonlySet<string>;

export interface NumberSettings {
  readonly systemPrompt?: string;
  readonly windowClosedTemplate?: { readonly name: string; readonly language: string };
  /** The directory of the business's knowledge files, absolute; checked at start-up to be one. */
  readonly knowledgeDir?: string;
  /** The file of the business's HTTP endpoints Claude may call (src/tools/tools-file.ts reads it at start-up): absolute, and as written. */
  readonly toolsFile?: { readonly path: string; readonly given: string };
  /** Once the UTC day's Claude calls reach it (in USD), new answers go to staff, not to Claude. */
  readonly dailyBudget?: { readonly usd: number };
}

export function loadNumbers(path: string, problems: string[]): ReadonlyMap<string, NumberSettings> {
  const numbers = new Map<string, NumberSettings>();
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    problems.push(`PHONE_NUMBERS_FILE cannot be read as JSON: ${(error as Error).message}`);
    return numbers;
  }
  const parsed = numbersFileSchema.safeParse(raw);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) problems.push(`PHONE_NUMBERS_FILE ${issue.path.join(".") || "(root)"}: ${issue.message}`);
    return numbers;
  }
  if (Object.keys(parsed.data).length === 0) {
    // Serving none is never meant; serving every number is what leaving the file out says.
    problems.push("PHONE_NUMBERS_FILE lists no business numbers: list the phone_number_ids to answer, or unset it to answer every number");
    return numbers;
  }
  for (const [id, settings] of Object.entries(parsed.data)) {
    if (!/^\d+$/.test(id)) {
      problems.push(`PHONE_NUMBERS_FILE ${id}: keys must be phone_number_id digits`);
      continue;
    }
    let systemPrompt = settings.systemPrompt;
    if (settings.systemPromptFile) {
      try {
        systemPrompt = readFileSync(resolve(dirname(path), settings.systemPromptFile), "utf8").trim();
      } catch (error) {
        problems.push(`PHONE_NUMBERS_FILE ${id}.systemPromptFile cannot be read: ${(error as Error).message}`);
      }
    }
    const knowledgeDir =
      settings.knowledgeDir === undefined ? undefined : directoryAt(resolve(dirname(path), settings.knowledgeDir), `${id}.knowledgeDir`, problems);
    numbers.set(id, {
      ...(systemPrompt ? { systemPrompt } : {}),
      ...(settings.windowClosedTemplate ? { windowClosedTemplate: settings.windowClosedTemplate } : {}),
      ...(knowledgeDir ? { knowledgeDir } : {}),
      ...(settings.toolsFile !== undefined ? { toolsFile: { path: resolve(dirname(path), settings.toolsFile), given: settings.toolsFile } } : {}),
      ...(settings.dailyBudget !== undefined ? { dailyBudget: settings.dailyBudget } : {}),
    });
  }
  return numbers;
}

/** `path` when it is a directory; else a problem naming the setting and the path, and undefined. */
function directoryAt(path: string, setting: string, problems: string[]): string | undefined {
  try {
    if (statSync(path).isDirectory()) return path;
    problems.push(`PHONE_NUMBERS_FILE ${setting}: ${path} is not a directory`);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    problems.push(`PHONE_NUMBERS_FILE ${setting}: ${path} ${code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? (error as Error).message})`}`);
  }
  return undefined;
}
