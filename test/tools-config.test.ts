import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../src/config/config.ts";
import { testEnv } from "./support/harness.ts";

/** Issue 19: each business number's knowledge and tools, as start-up reads and checks them. */

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
