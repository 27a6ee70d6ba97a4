import type { BusinessTool, InputSchema } from "./business-tool.ts";

/** A client tool as the Messages API takes it (`tools[]`): what Claude sees of a tool, and nothing more. */
export interface ToolDefinition {
  readonly name: string;
  readonly description: string;
  readonly input_schema: InputSchema;
}

/**
 * The business's tools as Claude is given them: name, description and input schema. The
 * request (URL, headers, secrets) stays ours: Claude asks for a tool by name, never for an address.
 */
export function toolDefinitions(tools: readonly BusinessTool[]): ToolDefinition[] {
  return tools.map((tool) => ({ name: tool.name, description: tool.description, input_schema: tool.inputSchema }));
}

/** Built in, beside every number's own tools: no tools file may use the name. */
export const HANDOFF_TOOL_NAME = "handoff_to_human";

/**
 * How Claude hands the customer to a person. The assistant answers from the business's
 * knowledge and tools only (Meta's terms bar a general-purpose assistant); where those end, a
 * person takes over, rather than a guess.
 */
export const HANDOFF_TOOL: ToolDefinition = Object.freeze({
  name: HANDOFF_TOOL_NAME,
  description:
    "Hand this conversation to a person from the business's team, who will answer the customer here. " +
    "Use it when you cannot help from the business's knowledge and tools, when the customer asks for a person, " +
    "when the customer is upset or the matter is sensitive, or whenever you would otherwise have to guess " +
    "(a price, a policy, an order's state, anything the knowledge and tools do not say). " +
    "Do not promise what the team will do; the customer is told a person will answer.",
  input_schema: Object.freeze({
    type: "object",
    properties: {
      reason: {
        type: "string",
        description: "Why a person is needed, in one sentence for the team (what the customer wants and what you could not do).",
      },
    },
    required: ["reason"],
    additionalProperties: false,
  }),
});
