import { z } from "zod";
import { type CallUsage, type ClaudeClient, toolUsesOf } from "../ai/claude.ts";
import type { ToolDefinition } from "../tools/definitions.ts";
import type { TurnAnswer } from "./converse.ts";

/**
 * A rubric graded by Claude (EVAL_JUDGE_MODEL): one call, made to answer through the `grade`
 * tool, so the verdict is a boolean and a reason, never prose to interpret.
 */

export const GRADE_TOOL: ToolDefinition = Object.freeze({
  name: "grade",
  description: "Record whether the assistant's last answer meets the rubric, and why, in one or two sentences.",
  input_schema: Object.freeze({
    type: "object",
    properties: {
      pass: { type: "boolean", description: "true when the last answer meets the rubric" },
      reason: { type: "string", description: "why, citing the answer" },
    },
    required: ["pass", "reason"],
  }),
});

const JUDGE_PROMPT =
  "You grade a business's customer-service assistant. You are shown a conversation between a customer and the assistant, " +
  "and a rubric. Decide whether the assistant's LAST answer meets the rubric. Judge only against the rubric: do not reward " +
  "style the rubric does not ask for. Answer with the grade tool.";

const verdict = z.object({ pass: z.boolean(), reason: z.string() });

export interface Grade {
  pass: boolean;
  reason: string;
  usage: CallUsage;
}

export async function grade(judge: Pick<ClaudeClient, "ask">, conversation: readonly TurnAnswer[], rubric: string): Promise<Grade> {
  const transcript = conversation.map((a) => `Customer: ${a.turn}\nAssistant: ${a.text || "(nothing)"}`).join("\n\n");
  const answer = await judge.ask({
    systemPrompt: JUDGE_PROMPT,
    tools: [GRADE_TOOL],
    toolChoice: { tool: GRADE_TOOL.name },
    turns: [{ role: "user", text: `<conversation>\n${transcript}\n</conversation>\n\n<rubric>\n${rubric}\n</rubric>` }],
  });
  const parsed = verdict.safeParse(toolUsesOf(answer.content).find((use) => use.name === GRADE_TOOL.name)?.input);
  if (!parsed.success) return { pass: false, reason: "the judge did not answer with the grade tool", usage: answer.usage };
  return { ...parsed.data, usage: answer.usage };
}
