import { setTimeout } from "node:timers/promises";
import { type CallUsage, type ClaudeAnswer, type ClaudeClient, citationsOf, type GeneratedReply, textOf, toolUsesOf } from "../ai/claude.ts";
import { estimateCostUsd, type PriceOverrides } from "../ai/pricing.ts";
import type { ChatTurn, ClaudeAsk, ClaudeKnowledge, ToolResult } from "../ai/request.ts";
import type { Clock } from "../clock.ts";
import type { Config } from "../config/config.ts";
import { FencedOut, PermanentError, Postpone } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { StoredStep, StoredToolCall, ToolCallAnswer, ToolCallStart } from "../state/steps.ts";
import type { BusinessActions } from "../tools/actions.ts";
import { HANDOFF_TOOL, type ToolDefinition } from "../tools/definitions.ts";
import { withKeys } from "../tools/idempotency.ts";

/**
 * Claude's work on one answer (law 4, law 12): one call, or, when Claude uses the business's
 * tools, a loop of calls. Each answer is a step, recorded before anything it asks for runs;
 * each business action a tool call, sent with the same Idempotency-Key every time, repeated
 * with that key while its outcome is unsure, and left `unknown` for a person when it stays
 * so. A loop that resumes (a retry, a takeover) carries on at its first unfinished step.
 *
 * Where steps and tool calls are kept is the LoopStore's: Postgres for a customer's reply
 * (generation.ts), memory for an eval or the playground (src/eval/), so that what Claude is
 * asked and how its tools are run is this one code whoever asks.
 */

/** A tool call Claude asked for, with the Idempotency-Key it is sent with. */
export interface KeyedToolCall {
  id: string;
  name: string;
  input: unknown;
  idempotencyKey: string;
}

/** What a loop's steps and tool calls are kept in, and how Claude is asked for the next step. */
export interface LoopStore {
  /** Claude asked for step `step` (a customer's reply: armed, counted in the ledger, settled). */
  ask(step: number, ask: ClaudeAsk): Promise<ClaudeAnswer>;
  /** The answer for step `step` the caller already holds (kept through an outage), settled now; undefined: ask Claude. */
  resume(step: number): Promise<ClaudeAnswer | undefined>;
  /** The step kept before anything it asks for runs; undefined when the answer was finished meanwhile by another run. */
  recordStep(step: number, answer: ClaudeAnswer, calls: KeyedToolCall[]): Promise<StoredStep | undefined>;
  /** A tool call may go out from now (its attempt counted); refused when another run took over or finished it. */
  startToolCall(callId: string): Promise<ToolCallStart>;
  finishToolCall(callId: string, outcome: ToolCallAnswer & { state: "done" | "failed" | "unknown" }): Promise<void>;
  /** A business action never answered for sure: kept `unknown`, for a person to check; true when this run recorded it. */
  leaveToolCallUnknown(call: StoredToolCall, outcome: ToolCallAnswer): Promise<boolean>;
  /** Step `step` as kept now (its tool calls answered by this run or another). */
  readStep(step: number): Promise<StoredStep | undefined>;
  /** Claude answered without a step to keep (the context window): the next call is asked afresh. */
  answeredWithoutStep(): Promise<void>;
}

export interface ToolLoopDeps {
  clock: Clock;
  claude: Pick<ClaudeClient, "systemPrompt">;
  metrics: Pick<Metrics, "toolCalls">;
  actions: BusinessActions;
}

export interface ToolLoopSettings {
  numbers: Config["numbers"];
  tools: Pick<Config["tools"], "maxSteps" | "maxMs">;
  /** MODEL_PRICES_FILE's prices over the built-in table: what each call is priced at as it answers. */
  modelPrices?: PriceOverrides | undefined;
}

/** What a reply's Claude calls cost, all of them: stored with whatever the reply says. */
export type ReplyCost = Omit<GeneratedReply, "text" | "citations">;

/**
 * What Claude's work came to: the answer to send, or the customer handed to a person (the
 * caller words it: HANDOFF_REPLY), with what the calls that decided it cost.
 */
export type Written =
  /** `lastCall`: the call that wrote the draft, for the ledger (settled again if the draft is kept through an outage). */
  | { kind: "draft"; draft: GeneratedReply; lastCall?: { callId: string; usage: CallUsage } | undefined }
  | { kind: "handoff"; reason: string; toolUseId: string; cost: ReplyCost };

/** Who the loop answers: the number (its prompt and tools), and the name refusals are keyed by. */
export interface LoopSubject {
  phoneNumberId: string;
  /** The reply's id, or the eval case's: a refusal's handoff is keyed `refusal.<this>.<step>`. */
  answerId: string;
}

/**
 * The calls' usage summed: the stored steps', and the last call's when it was not stored as
 * one; and their price, each call priced alone (a long prompt's band is per request), or
 * undefined when a model has no price.
 */
export function costOf(prices: PriceOverrides | undefined, steps: readonly StoredStep[], last?: ClaudeAnswer): ReplyCost {
  const usages = [...steps.map((s) => s.usage), ...(last ? [last.usage] : [])];
  const sum = (pick: (u: ClaudeAnswer["usage"]) => number) => usages.reduce((n, u) => n + pick(u), 0);
  const costs = usages.map((u) => estimateCostUsd(u.model, u, prices));
  return {
    costUsd: costs.every((c) => c !== undefined) ? costs.reduce((n, c) => n + c, 0) : undefined,
    model: usages.at(-1)!.model,
    inputTokens: sum((u) => u.inputTokens),
    outputTokens: sum((u) => u.outputTokens),
    cacheReadTokens: sum((u) => u.cacheReadTokens),
    cacheCreationTokens: sum((u) => u.cacheCreationTokens),
    cacheCreation1hTokens: sum((u) => u.cacheCreation1hTokens),
  };
}

/** Repeats of an unsure tool call wait this long at first, doubling up to TOOL_RETRY_MAX_MS, within TOOL_MAX_MS. */
const TOOL_RETRY_FIRST_MS = 250;
const TOOL_RETRY_MAX_MS = 4000;

/** What Claude reads of an action nobody could confirm: plainly, so it neither retries nor tells the customer it failed. */
const unknownOutcome = (tool: string, why: string) =>
  `Outcome unknown: ${tool} was asked with an Idempotency-Key and never answered for sure (last: ${why}), so it may have been done. ` +
  "Do not call this tool again for it. Tell the customer a person will check whether it was done and get back to them; do not say it failed.";

/** How a stored step's tool calls were answered, for Claude to read. */
const resultsOf = (step: StoredStep): ToolResult[] => step.toolCalls.map((c) => ({ toolUseId: c.id, text: c.answer ?? "", isError: c.isError ?? true }));

/** The one Claude request of a step: the number's prompt and tools, the knowledge, the turns, the steps so far. */
export function askFor(
  deps: Pick<ToolLoopDeps, "claude">,
  settings: Pick<ToolLoopSettings, "numbers">,
  phoneNumberId: string,
  tools: readonly ToolDefinition[],
  request: { knowledge: ClaudeKnowledge | undefined; turns: ChatTurn[]; steps: readonly StoredStep[]; bounded: boolean },
): ClaudeAsk {
  return {
    systemPrompt: settings.numbers.get(phoneNumberId)?.systemPrompt ?? deps.claude.systemPrompt,
    knowledge: request.knowledge,
    tools,
    toolChoice: request.bounded ? "none" : "auto",
    turns: request.turns,
    steps: request.steps.map((s) => ({ content: s.content, results: s.stopReason === "tool_use" ? resultsOf(s) : [] })),
  };
}

export class ToolLoop {
  private readonly tools: readonly ToolDefinition[];

  constructor(
    private readonly deps: ToolLoopDeps,
    private readonly settings: ToolLoopSettings,
    private readonly subject: LoopSubject,
    private readonly store: LoopStore,
    private readonly log: Logger,
  ) {
    this.tools = [...deps.actions.definitions(subject.phoneNumberId), HANDOFF_TOOL];
  }

  async run(turns: ChatTurn[], knowledge: ClaudeKnowledge | undefined, steps: StoredStep[]): Promise<Written> {
    const { phoneNumberId } = this.subject;
    let shortened = false;
    for (;;) {
      const last = steps.at(-1);
      if (last?.stopReason === "refusal") return this.refused(last.step, steps);
      if (last?.stopReason === "tool_use") {
        const handoff = await this.runTools(last, steps);
        if (handoff) return handoff;
      }
      const answer: ClaudeAnswer =
        (await this.store.resume(steps.length)) ??
        (await this.store.ask(
          steps.length,
          askFor(this.deps, this.settings, phoneNumberId, this.tools, {
            knowledge,
            // Shortened: the messages being answered alone, without the history before them (history.ts marks its end).
            turns: shortened ? turns.slice(turns.findLastIndex((t) => t.cacheBreakpoint) + 1) : turns,
            steps,
            bounded: this.bounded(steps),
          }),
        ));
      switch (answer.stopReason) {
        case "tool_use":
        case "pause_turn":
        case "refusal": {
          // Kept before any tool it asks for runs: a run that resumes never asks Claude for it
          // again. A refusal too: the handoff it leads to may not be recorded at once (law 4).
          const uses = answer.stopReason === "tool_use" ? toolUsesOf(answer.content) : [];
          const calls = withKeys(
            phoneNumberId,
            uses,
            steps.flatMap((s) => s.toolCalls),
          );
          const stored = await this.store.recordStep(steps.length, answer, calls);
          if (!stored) throw new Postpone(this.deps.clock.now().getTime(), "the reply was answered or dead-lettered meanwhile; taken again");
          steps.push(stored);
          continue;
        }
        case "model_context_window_exceeded":
          if (shortened)
            throw new PermanentError({
              source: "anthropic",
              code: "context_window",
              reason: "The conversation is too long for Claude, even without its history",
            });
          shortened = true;
          this.log.warn({ event: "reply.context_window_exceeded" }, "asked again without the conversation's history");
          await this.store.answeredWithoutStep();
          continue;
        default:
          return { kind: "draft", draft: this.draftOf(answer, steps), lastCall: answer.callId ? { callId: answer.callId, usage: answer.usage } : undefined };
      }
    }
  }

  /** Claude declined (a stored step): the customer is handed to a person rather than left in silence. */
  private refused(step: number, steps: readonly StoredStep[]): Written {
    return {
      kind: "handoff",
      reason: "Claude declined to answer this message",
      toolUseId: `refusal.${this.subject.answerId}.${step}`,
      cost: costOf(this.settings.modelPrices, steps),
    };
  }

  /** The words to send, never cut mid-sentence (an answer that ran out of tokens is trimmed to its last full sentence). */
  private draftOf(answer: ClaudeAnswer, steps: readonly StoredStep[]): GeneratedReply {
    let text = textOf(answer.content);
    if (answer.stopReason === "max_tokens") {
      const end = Math.max(
        text.lastIndexOf(". "),
        text.lastIndexOf("! "),
        text.lastIndexOf("? "),
        text.lastIndexOf("\n"),
        /[.!?]$/.test(text) ? text.length - 1 : -1,
      );
      text = end > 0 ? text.slice(0, end + 1).trim() : "";
      this.log.warn({ event: "reply.max_tokens" }, "Claude's answer ran out of tokens: sent up to its last full sentence");
    }
    if (!text) throw new PermanentError({ source: "anthropic", code: "empty", reason: `Claude returned no text to send (stop reason ${answer.stopReason})` });
    const citations = citationsOf(answer.content);
    return { text, ...costOf(this.settings.modelPrices, steps, answer), ...(citations.length > 0 ? { citations } : {}) };
  }

  /** Past TOOL_MAX_STEPS tool calls or TOOL_MAX_MS since the first step: Claude answers with what it has. */
  private bounded(steps: readonly StoredStep[]): boolean {
    const calls = steps.reduce((n, s) => n + s.toolCalls.length, 0);
    const first = steps[0]?.createdAt.getTime();
    return calls >= this.settings.tools.maxSteps || (first !== undefined && this.deps.clock.now().getTime() - first >= this.settings.tools.maxMs);
  }

  /**
   * The tool calls a stored step asked for, each run once: a stored answer is reused (also for
   * the same action asked again: the same tool with the same input has the same key), a call
   * that may have gone out (recorded, started, never answered) is repeated with its key, and
   * a call past the loop's bounds is answered "not run" without reaching the business.
   */
  private async runTools(step: StoredStep, steps: readonly StoredStep[]): Promise<Written | undefined> {
    const earlier = steps.slice(0, -1).reduce((n, s) => n + s.toolCalls.length, 0);
    const first = steps[0]!.createdAt.getTime();
    for (const [i, call] of step.toolCalls.entries()) {
      // Checked before the state: a run that recorded the handoff and then lost the database
      // before pausing the bot must still hand off when the reply is retried.
      if (call.name === HANDOFF_TOOL.name) {
        const reason =
          typeof (call.input as { reason?: unknown })?.reason === "string"
            ? (call.input as { reason: string }).reason
            : "Claude handed the customer to a person";
        if (call.state === "requested") await this.finish(call, { state: "done", answer: "The customer was handed to a person.", isError: false });
        return { kind: "handoff", reason, toolUseId: call.id, cost: costOf(this.settings.modelPrices, steps) };
      }
      if (call.state !== "requested") continue;
      const done = steps.flatMap((s) => s.toolCalls).find((c) => c.idempotencyKey === call.idempotencyKey && c.id !== call.id);
      if (done && done.state !== "requested") {
        // The same action asked for again (Claude retrying it under a new id): its answer, not a second request.
        await this.finish(call, { state: done.state, answer: done.answer ?? "", isError: done.isError ?? true });
        continue;
      }
      // A call that may have gone out is repeated whatever the bounds: only its answer (to the
      // same key) says whether the business acted.
      const mayHaveGoneOut = call.attempts > 0;
      if (!mayHaveGoneOut && (earlier + i >= this.settings.tools.maxSteps || this.deps.clock.now().getTime() - first >= this.settings.tools.maxMs)) {
        await this.finish(call, { state: "failed", answer: "Not run: this reply reached its limit of tool calls. Answer with what you know.", isError: true });
        continue;
      }
      await this.act(call, first);
    }
    // Every call of the step is answered now (by this run or another): read them as kept.
    const fresh = await this.store.readStep(step.step);
    if (fresh) step.toolCalls = fresh.toolCalls;
    return undefined;
  }

  /**
   * One business action, until the business answers for sure: an unsure ending (a timeout, a
   * connection lost, a proxy's page) is repeated with the same key, with backoff, while the
   * reply's time for tool calls (TOOL_MAX_MS from its first step) lasts. Still unsure then, an
   * action that may have been done is left `unknown` for a person to check (law 12 must not
   * rest on Claude not asking again); a read that could not be made is an error Claude reads.
   */
  private async act(call: StoredToolCall, first: number): Promise<void> {
    const { phoneNumberId } = this.subject;
    for (let attempt = 0; ; attempt++) {
      const started = await this.store.startToolCall(call.id);
      if (!started.ok) {
        if (started.refused === "fenced_out") throw new FencedOut(`the conversation was taken over before tool call ${call.id}`);
        return; // finished meanwhile by another run: its answer is read by the caller
      }
      if (started.attempt > 1)
        this.log.warn(
          { event: "tool.repeated", toolCall: call.id, attempt: started.attempt },
          "a tool call that may have gone out is sent again, with the same key",
        );
      const leftMs = () => this.settings.tools.maxMs - (this.deps.clock.now().getTime() - first);
      const began = this.deps.clock.monotonicMs();
      // The tool's own timeoutMs bounds each attempt; the loop's time left too while there is some
      // (a run resuming past it still asks once: the answer to the same key may be sure now).
      const left = leftMs();
      const outcome = await this.deps.actions.call(phoneNumberId, call.name, call.input, {
        idempotencyKey: call.idempotencyKey,
        ...(left > 0 ? { signal: AbortSignal.timeout(left) } : {}),
      });
      this.deps.metrics.toolCalls.inc({
        phone_number_id: phoneNumberId,
        tool: call.name,
        outcome: outcome.unsure ? "no_answer" : outcome.isError ? "error" : "ok",
      });
      this.log.info(
        {
          event: outcome.isError ? "tool.failed" : "tool.done",
          toolCall: call.id,
          tool: call.name,
          status: outcome.status,
          unsure: outcome.unsure,
          ms: Math.round(this.deps.clock.monotonicMs() - began),
        },
        outcome.isError ? "a business tool answered with an error" : "a business tool answered",
      );
      const answered = { answer: outcome.text, isError: outcome.isError, status: outcome.status, request: outcome.request };
      if (!outcome.unsure) return this.finish(call, { ...answered, state: outcome.status === undefined && outcome.isError ? "failed" : "done" });
      const pause = Math.min(TOOL_RETRY_MAX_MS, TOOL_RETRY_FIRST_MS * 2 ** attempt);
      if (leftMs() > pause) {
        await setTimeout(pause);
        continue;
      }
      if (!outcome.maybeActed) return this.finish(call, { ...answered, state: "failed" });
      const unknown = { ...answered, answer: unknownOutcome(call.name, outcome.text) };
      if (await this.store.leaveToolCallUnknown(call, unknown))
        this.log.warn({ event: "tool.unknown", toolCall: call.id, tool: call.name }, "a business action never confirmed; a person checks it");
      Object.assign(call, { state: "unknown", ...unknown });
      return;
    }
  }

  private async finish(call: StoredToolCall, outcome: ToolCallAnswer & { state: "done" | "failed" | "unknown" }): Promise<void> {
    await this.store.finishToolCall(call.id, outcome);
    // Seen by a later call of the same action in this run (runTools).
    Object.assign(call, { state: outcome.state, answer: outcome.answer, isError: outcome.isError });
  }
}
