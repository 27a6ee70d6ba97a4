import { anthropicError, blocksOf, type ClaudeAnswer, type ClaudeRequest, MessagesApiServer } from "../../sim/anthropic/messages-api.ts";

/**
 * A local stand-in for Anthropic's Messages API, on the protocol the demo's offline responder
 * speaks too (sim/anthropic/). The real Anthropic SDK calls it through
 * ANTHROPIC_BASE_URL. It records every request and how many were in flight at once, and
 * answers from a script, else with `answerFor`, else with `reply`.
 */

export type { AnswerBlock, ClaudeAnswer, ClaudeArrival, ClaudeRequest, StopReason } from "../../sim/anthropic/messages-api.ts";
export { anthropicError };

/** Whether the request's last user turn carries tool results: Claude is being told what a tool answered. */
export const answersToolResults = (request: ClaudeRequest): boolean => {
  const content = request.messages.findLast((m) => m.role === "user")?.content;
  return Array.isArray(content) && content.some((b: { type?: string }) => b.type === "tool_result");
};

/** Anthropic's `usage` of one answer. */
export interface BilledUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
  cache_creation?: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
}

export class FakeAnthropic extends MessagesApiServer {
  readonly requests: ClaudeRequest[] = [];
  /** The usage of every answer given, as Anthropic reports it: what the calls are billed for. */
  readonly usages: BilledUsage[] = [];
  /** Of those, the answers whose caller had hung up (a timeout, a killed worker): billed, never read. */
  readonly unread: BilledUsage[] = [];
  private readonly script: ClaudeAnswer[] = [];
  reply: (request: ClaudeRequest) => string = (request) => `Reply #${this.requests.indexOf(request) + 1}`;
  /** Answers what the script does not, when it has an answer (a scenario's tool use); else `reply` does. */
  answerFor: (request: ClaudeRequest) => ClaudeAnswer | undefined = () => undefined;

  /** Queue answers for the next requests, in order; afterwards `reply` answers again. */
  answer(...answers: ClaudeAnswer[]): void {
    this.script.push(...answers);
  }

  protected override respond(request: ClaudeRequest): ClaudeAnswer {
    return this.script.shift() ?? this.answerFor(request) ?? { text: this.reply(request) };
  }

  protected override received(request: ClaudeRequest): void {
    this.requests.push(request);
  }

  protected override billed(usage: Record<string, unknown>, read: boolean): void {
    this.usages.push(usage as unknown as BilledUsage);
    if (!read) this.unread.push(usage as unknown as BilledUsage);
  }

  /** The text of every user turn the model was shown in request `i`. */
  userText(i: number): string {
    const request = this.requests[i];
    if (!request) return "";
    return request.messages
      .filter((m) => m.role === "user")
      .flatMap((m) => blocksOf(m.content).map((b) => b.text))
      .join("\n");
  }
}
