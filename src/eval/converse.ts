import type { CallUsage, Citation, ClaudeClient } from "../ai/claude.ts";
import type { Logger } from "../logger.ts";
import type { KnowledgeSource } from "../replies/generation.ts";
import { conversationTurns, type HistoryDeps, type HistorySettings } from "../replies/history.ts";
import { ToolLoop, type ToolLoopDeps, type ToolLoopSettings } from "../replies/tool-loop.ts";
import type { HistoryRows } from "../state/history.ts";
import { type CallLedger, MemoryStore } from "./memory.ts";
import type { StubbedActions, StubbedCall } from "./stubs.ts";

/**
 * A customer's turns answered as the bot answers them live, with nothing sent and nothing
 * stored: each turn's words become Claude's request through the same history, knowledge and
 * tool loop as a reply (src/replies/), each answer joins the history of the next turn, and a
 * handoff ends the conversation (a person answers from there).
 */

export interface ConverseDeps extends ToolLoopDeps, HistoryDeps {
  claude: ClaudeClient;
  actions: StubbedActions;
  knowledge?: KnowledgeSource | undefined;
  logger: Logger;
  /** The playground's: every call in the cost ledger, within the number's daily budget. An eval's are not. */
  ledger?: CallLedger | undefined;
}

export interface ConverseSettings extends ToolLoopSettings, HistorySettings {
  /** HANDOFF_REPLY: what a customer handed to a person is told (empty: nothing). */
  handoffReply: string;
}

export interface TurnAnswer {
  /** The customer's words. */
  turn: string;
  /** What the customer would read: the answer, or HANDOFF_REPLY after a handoff. */
  text: string;
  /** Why the customer was handed to a person (handoff_to_human's reason, or Claude's refusal), if they were. */
  handoff: string | undefined;
  citations: Citation[];
  toolCalls: StubbedCall[];
  /** One per Claude call. */
  usage: CallUsage[];
}

export async function converse(
  deps: ConverseDeps,
  settings: ConverseSettings,
  phoneNumberId: string,
  name: string,
  turns: readonly string[],
): Promise<TurnAnswer[]> {
  const history: HistoryRows = { earlier: [], replies: [] };
  const answers: TurnAnswer[] = [];
  let at = 0;
  for (const [i, turn] of turns.entries()) {
    const messages = [{ text: turn, payload: { type: "text", text: { body: turn } } }];
    const asked = await conversationTurns(deps, settings, messages, history);
    const knowledge = await deps.knowledge?.forReply(phoneNumberId, turn);
    const store = new MemoryStore(deps.claude, deps.clock, deps.ledger);
    const callsBefore = deps.actions.calls.length;
    const loop = new ToolLoop(deps, settings, { phoneNumberId, answerId: `${name}.${i}` }, store, deps.logger);
    const written = await loop.run(asked, knowledge, []);
    const text = written.kind === "draft" ? written.draft.text : settings.handoffReply;
    answers.push({
      turn,
      text,
      handoff: written.kind === "handoff" ? written.reason : undefined,
      citations: written.kind === "draft" ? (written.draft.citations ?? []) : [],
      toolCalls: deps.actions.calls.slice(callsBefore),
      usage: store.usage,
    });
    if (written.kind === "handoff") break;
    history.earlier.push({ text: turn, at: at++ });
    history.replies.push({ text, at: at++ });
  }
  return answers;
}
