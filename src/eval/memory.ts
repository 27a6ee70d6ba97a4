import type { CallUsage, ClaudeAnswer, ClaudeClient } from "../ai/claude.ts";
import type { ClaudeAsk } from "../ai/request.ts";
import type { Clock } from "../clock.ts";
import type { KeyedToolCall, LoopStore } from "../replies/tool-loop.ts";
import type { StoredStep, StoredToolCall, ToolCallAnswer, ToolCallStart } from "../state/steps.ts";

/** Where each call of an answer nobody receives is counted, if anywhere: the playground's, in the cost ledger. */
export interface CallLedger {
  around(ask: ClaudeAsk, call: () => Promise<ClaudeAnswer>): Promise<ClaudeAnswer>;
}

/**
 * The tool loop's steps and tool calls kept in memory, for an answer nobody receives (an eval's
 * case, the playground): nothing is written to Postgres, and every Claude call's usage is
 * gathered for the report.
 */
export class MemoryStore implements LoopStore {
  readonly steps: StoredStep[] = [];
  readonly usage: CallUsage[] = [];
  /** What each tool call answered, and whether it went out (the business's own request, or a stub's answer). */
  readonly answers = new Map<string, ToolCallAnswer & { state: string }>();

  constructor(
    private readonly claude: Pick<ClaudeClient, "ask">,
    private readonly clock: Clock,
    private readonly ledger?: CallLedger | undefined,
  ) {}

  async ask(_step: number, ask: ClaudeAsk): Promise<ClaudeAnswer> {
    const call = () => this.claude.ask(ask);
    const answer = await (this.ledger ? this.ledger.around(ask, call) : call());
    this.usage.push(answer.usage);
    return answer;
  }

  async resume(): Promise<ClaudeAnswer | undefined> {
    return undefined; // nothing is ever kept through an outage here: the caller runs again
  }

  async recordStep(step: number, answer: ClaudeAnswer, calls: KeyedToolCall[]): Promise<StoredStep> {
    const stored: StoredStep = {
      step,
      content: answer.content,
      stopReason: answer.stopReason,
      usage: answer.usage,
      createdAt: this.clock.now(),
      toolCalls: calls.map((c) => ({ ...c, state: "requested", attempts: 0, answer: null, isError: null })),
    };
    this.steps.push(stored);
    return stored;
  }

  async startToolCall(callId: string): Promise<ToolCallStart> {
    const call = this.call(callId);
    if (call.state !== "requested") return { ok: false, refused: "finished" };
    call.attempts += 1;
    return { ok: true, attempt: call.attempts };
  }

  async finishToolCall(callId: string, outcome: ToolCallAnswer & { state: "done" | "failed" | "unknown" }): Promise<void> {
    Object.assign(this.call(callId), { state: outcome.state, answer: outcome.answer, isError: outcome.isError });
    this.answers.set(callId, outcome);
  }

  async leaveToolCallUnknown(call: StoredToolCall, outcome: ToolCallAnswer): Promise<boolean> {
    await this.finishToolCall(call.id, { ...outcome, state: "unknown" });
    return true;
  }

  async readStep(step: number): Promise<StoredStep | undefined> {
    return this.steps.find((s) => s.step === step);
  }

  async answeredWithoutStep(): Promise<void> {}

  /** Every tool call Claude asked for, in order, with how it was answered. */
  toolCalls(): (StoredToolCall & { request?: { method: string; url: string } | undefined })[] {
    return this.steps.flatMap((s) => s.toolCalls.map((c) => ({ ...c, request: this.answers.get(c.id)?.request })));
  }

  private call(callId: string): StoredToolCall {
    const call = this.steps.flatMap((s) => s.toolCalls).find((c) => c.id === callId);
    if (!call) throw new Error(`no tool call ${callId} in this answer`);
    return call;
  }
}
