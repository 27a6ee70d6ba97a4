import type { Clock } from "../clock.ts";
import type { BusinessTool } from "./business-tool.ts";
import { callTool, type ToolOutcome } from "./call.ts";
import { type ToolDefinition, toolDefinitions } from "./definitions.ts";

/**
 * A worker's business actions, per number: what Claude is told of a number's tools, and how
 * one of them is called. The reply's tool loop (src/replies/generation.ts) decides when.
 */
export interface BusinessActions {
  definitions(phoneNumberId: string): readonly ToolDefinition[];
  call(phoneNumberId: string, name: string, input: unknown, options: { idempotencyKey: string; signal?: AbortSignal }): Promise<ToolOutcome>;
}

export function businessActions(tools: ReadonlyMap<string, readonly BusinessTool[]>, answerMaxBytes: number, clock: Clock): BusinessActions {
  const toolsOf = (phoneNumberId: string) => tools.get(phoneNumberId) ?? [];
  return {
    definitions: (phoneNumberId) => toolDefinitions(toolsOf(phoneNumberId)),
    async call(phoneNumberId, name, input, { idempotencyKey, signal }) {
      const tool = toolsOf(phoneNumberId).find((t) => t.name === name);
      // A stored step may name a tool the configuration no longer has (a deploy in between).
      if (!tool)
        return {
          isError: true,
          text: `Not sent: this business has no tool named ${name}`,
          ms: 0,
          unsure: false,
          maybeActed: false,
          request: { method: "", url: "" },
        };
      return callTool(tool, input, { idempotencyKey, maxAnswerBytes: answerMaxBytes, clock, ...(signal ? { signal } : {}) });
    },
  };
}
