import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../src/config/config.ts";
import { testEnv } from "./support/harness.ts";

/** Issue 19: each business number's knowledge and tools, as start-up reads and checks them. */

const SHOP = "106540352242922";
const CLINIC = "106540352249999";

/** A PHONE_NUMBERS_FILE in a directory of its own, beside the given files (paths relative to it). */
async function numbersFile(numbers: unknown, files: Record<string, string> = {}): Promise<{ dir: string; path: string }> {
  const dir = await mkdtemp(join(tmpdir(), "tools-config-"));
  for (const [name, content] of Object.entries(files)) {
    await mkdir(join(dir, name, ".."), { recursive: true });
    await writeFile(join(dir, name), content);
  }
  const path = join(dir, "numbers.json");
  await writeFile(path, JSON.stringify(numbers));
  return { dir, path };
}

function problemsOf(env: Record<string, string | undefined>): string[] {
  try {
    loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  return [];
}

describe("the tool loop's bounds and the knowledge budget", () => {
  it("default to 5 tool calls in 30 s per reply, answers cut at 16 KiB, 30000 tokens of knowledge whole", () => {
    const config = loadConfig(testEnv());
    expect(config.tools).toEqual({ maxSteps: 5, maxMs: 30_000, answerMaxBytes: 16_384 });
    expect(config.knowledge).toEqual({ tokenBudget: 30_000 });
  });

  it("are read from the environment, and a bad one is named", () => {
    const config = loadConfig(testEnv({ TOOL_MAX_STEPS: "3", TOOL_MAX_MS: "5000", TOOL_ANSWER_MAX_BYTES: "1024", KNOWLEDGE_TOKEN_BUDGET: "0" }));
    expect(config.tools).toEqual({ maxSteps: 3, maxMs: 5000, answerMaxBytes: 1024 });
    expect(config.knowledge.tokenBudget).toBe(0);
    expect(problemsOf(testEnv({ TOOL_MAX_STEPS: "0", TOOL_MAX_MS: "soon", TOOL_ANSWER_MAX_BYTES: "10", KNOWLEDGE_TOKEN_BUDGET: "-1" }))).toEqual([
      'KNOWLEDGE_TOKEN_BUDGET must be an integer from 0 to 150000, got "-1"',
      'TOOL_MAX_STEPS must be an integer from 1 to 50, got "0"',
      'TOOL_MAX_MS must be an integer from 1000 to 600000, got "soon"',
      'TOOL_ANSWER_MAX_BYTES must be an integer from 256 to 1048576, got "10"',
    ]);
  });
});

describe("a number's knowledgeDir", () => {
  it("is resolved against PHONE_NUMBERS_FILE's directory, absolute", async () => {
    const { dir, path } = await numbersFile({ [SHOP]: { knowledgeDir: "shop/knowledge" }, [CLINIC]: {} }, { "shop/knowledge/prices.md": "# Prices" });
    const config = loadConfig(testEnv({ PHONE_NUMBERS_FILE: path }));
    expect(config.numbers.get(SHOP)?.knowledgeDir).toBe(join(dir, "shop/knowledge"));
    expect(config.numbers.get(CLINIC)?.knowledgeDir).toBeUndefined();
  });

  it("that does not exist, or is a file, stops start-up naming the number and the path", async () => {
    const { dir, path } = await numbersFile(
      { [SHOP]: { knowledgeDir: "shop/knowledge" }, [CLINIC]: { knowledgeDir: "clinic.md" } },
      { "clinic.md": "# Hours" },
    );
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: path }))).toEqual([
      `PHONE_NUMBERS_FILE ${SHOP}.knowledgeDir: ${join(dir, "shop/knowledge")} does not exist`,
      `PHONE_NUMBERS_FILE ${CLINIC}.knowledgeDir: ${join(dir, "clinic.md")} is not a directory`,
    ]);
  });
});
