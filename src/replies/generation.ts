import { randomUUID } from "node:crypto";
import { setTimeout } from "node:timers/promises";
import { type CallUsage, type ClaudeAnswer, type ClaudeClient, citationsOf, type GeneratedReply, textOf, toolUsesOf } from "../ai/claude.ts";
import { estimateCostUsd, greatestCostUsd, type PriceOverrides } from "../ai/pricing.ts";
import type { ChatTurn, ClaudeKnowledge, ToolResult } from "../ai/request.ts";
import type { Clock } from "../clock.ts";
import type { Config } from "../config/config.ts";
import { budgetSpent } from "../costs/budget.ts";
import { type Db, isDatabaseUnavailable } from "../db/client.ts";
import { countDeadLetter } from "../dlq/dead-letters.ts";
import { FencedOut, PermanentError, Postpone, RetryableError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { countClaudeCall, type Metrics } from "../metrics/metrics.ts";
import type { KeptStep } from "../queue/catalog.ts";
import { closeClaudeCall, reserveClaudeCall, settleClaudeCall } from "../state/claude-calls.ts";
import type { Begun } from "../state/conversations.ts";
import { type QuestionMessage, readHistory } from "../state/history.ts";
import { armGeneration, releaseGeneration } from "../state/replies.ts";
import { finishToolCall, leaveToolCallUnknown, readSteps, recordStep, type StoredStep, type StoredToolCall, startToolCall } from "../state/steps.ts";
import type { BusinessActions } from "../tools/actions.ts";
import { HANDOFF_TOOL, type ToolDefinition } from "../tools/definitions.ts";
import { withKeys } from "../tools/idempotency.ts";
import { conversationTurns, type HistoryDeps, type HistorySettings } from "./history.ts";

/**
 * Writing a reply's answer with Claude (law 4): one call, or, when Claude uses the business's
 * tools, a loop of calls, each stored as a step before anything it asks for runs, and each
 * business action a tool call recorded before it runs and sent with the same Idempotency-Key
 * every time (law 12). A run that resumes a reply (a retry, a takeover) carries on at its
 * first unfinished step: it never asks Claude again for a stored step, never calls a tool
 * again whose answer is stored, and repeats, with the same key, a call that may have gone
 * out. Every Claude call is armed first: a run that takes over waits for a call that may still
 * answer (replies.generation_deadline).
 */

/** What Claude is shown of the business's knowledge for a reply (src/knowledge/). */
export interface KnowledgeSource {
  forReply(phoneNumberId: string, query: string): Promise<ClaudeKnowledge | undefined>;
}

export interface GenerationDeps extends HistoryDeps {
  db: Db;
  clock: Clock;
  claude: ClaudeClient;
  metrics: Metrics;
  actions: BusinessActions;
  knowledge?: KnowledgeSource | undefined;
}

/** What the settings say of writing an answer: each number's prompt, the loop's bounds, the clocks, the prices. */
export interface GenerationSettings extends HistorySettings {
  numbers: Config["numbers"];
  generation: GenerationTiming;
  tools: Pick<Config["tools"], "maxSteps" | "maxMs">;
  /** MODEL_PRICES_FILE's prices over the built-in table: what each call is priced at as it answers. */
  modelPrices?: PriceOverrides | undefined;
}

/** How long a reply's Claude call may take to start and to answer (law 4 across a takeover). */
export interface GenerationTiming {
  /** A run starts its call only this soon after it armed the reply's deadline (history and media read on the way). */
  startWithinMs: number;
  /** The Claude client's own timeout: a call started in time is answered or abandoned by the deadline. */
  timeoutMs: number;
}

/** The reply's generation deadline, from the moment a run arms it: a call that may still answer is waited for until then. */
export const generationBudgetMs = (timing: GenerationTiming) => timing.startWithinMs + timing.timeoutMs + GENERATION_MARGIN_MS;
/** Clocks and statements between the run's own check and the database's deadline. */
const GENERATION_MARGIN_MS = 1000;

/** What a reply's Claude calls cost, all of them: stored with whatever the reply says. */
export type ReplyCost = Omit<GeneratedReply, "text" | "citations">;

/**
 * A step Claude answered while Postgres could not record it lives in the reply job (Redis)
 * until it can: `kept` is the one the job holds, `keep` puts one there.
 */
export interface StepKeeping {
  kept: KeptStep | undefined;
  keep(step: KeptStep): Promise<void>;
}

/**
 * What Claude's work came to: the answer to send, or the customer handed to a person (the
 * caller words it: HANDOFF_REPLY), with what the calls that decided it cost.
 */
export type Written =
  /** `lastCall`: the call that wrote the draft, for the ledger (settled again if the draft is kept through an outage). */
  | { kind: "draft"; draft: GeneratedReply; lastCall?: { callId: string; usage: CallUsage } | undefined }
  | { kind: "handoff"; reason: string; toolUseId: string; cost: ReplyCost };

/**
 * The calls' usage summed: the stored steps', and the last call's when it was not stored as
 * one; and their price, each call priced alone (a long prompt's band is per request), or
 * undefined when a model has no price.
 */
function costOf(prices: PriceOverrides | undefined, steps: readonly StoredStep[], last?: ClaudeAnswer): ReplyCost {
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

type ReplyBegun = Extract<Begun, { kind: "reply" }>;

/**
 * The answer for a reply still generating. `armedAt` is when this run's bind armed the
 * reply's deadline (the clock's monotonic reading); a run that did not plan the reply arms it itself.
 */
export async function writeAnswer(
  deps: GenerationDeps,
  settings: GenerationSettings,
  begun: ReplyBegun,
  armedAt: number,
  log: Logger,
  keeping: StepKeeping,
): Promise<Written> {
  const { conversation, reply, planned } = begun;
  const { messages, history } = planned?.history
    ? { messages: planned.messages, history: planned.history }
    : await readHistory(deps.db, reply, settings.historyMessages);
  const loop = new ToolLoop(deps, settings, begun, log, planned ? { deadline: reply.generationDeadline, armedAt } : undefined, keeping);
  const stored = planned ? [] : await readSteps(deps.db, reply.id);
  const turns = await conversationTurns(deps, settings, messages, history);
  if (turns.length === 0) throw new Error(`reply ${reply.id} has no messages to answer`);
  const knowledge = await deps.knowledge?.forReply(conversation.phoneNumberId, wordsOf(messages));
  return loop.run(turns, knowledge, stored);
}

const wordsOf = (messages: readonly QuestionMessage[]) => messages.flatMap((m) => (m.text ? [m.text] : [])).join("\n");

/** Settles a call's ledger row (state/claude-calls.ts) from its answer; Postgres being away leaves it reserved for the answer's keeper. */
export async function settleAnswer(
  deps: Pick<GenerationDeps, "db" | "clock">,
  settings: Pick<GenerationSettings, "modelPrices">,
  answer: { callId?: string | undefined; usage: CallUsage },
): Promise<void> {
  if (!answer.callId) return; // kept before the ledger
  try {
    await settleClaudeCall(deps.db, answer.callId, answer.usage, estimateCostUsd(answer.usage.model, answer.usage, settings.modelPrices), deps.clock.now());
  } catch (error) {
    if (!isDatabaseUnavailable(error)) throw error;
  }
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

class ToolLoop {
  private readonly tools: readonly ToolDefinition[];
  /** The deadline this run armed for its next call, and when (the clock's monotonic reading): none once used. */
  private armed: { deadline: Date | null; armedAt: number } | undefined;
  /** The deadline of the call that answered last. */
  private lastDeadline: Date | undefined;

  constructor(
    private readonly deps: GenerationDeps,
    private readonly settings: GenerationSettings,
    private readonly begun: ReplyBegun,
    private readonly log: Logger,
    armed: { deadline: Date | null; armedAt: number } | undefined,
    private readonly keeping: StepKeeping,
  ) {
    this.tools = [...deps.actions.definitions(begun.conversation.phoneNumberId), HANDOFF_TOOL];
    this.armed = armed?.deadline ? armed : undefined;
  }

  async run(turns: ChatTurn[], knowledge: ClaudeKnowledge | undefined, steps: StoredStep[]): Promise<Written> {
    const { reply, conversation } = this.begun;
    let shortened = false;
    for (;;) {
      const last = steps.at(-1);
      if (last?.stopReason === "refusal") return this.refused(last.step, steps);
      if (last?.stopReason === "tool_use") {
        const handoff = await this.runTools(last, steps);
        if (handoff) return handoff;
      }
      const bounded = this.bounded(steps);
      const kept = this.keeping.kept;
      const answer: ClaudeAnswer =
        kept?.replyId === reply.id && kept.step === steps.length
          ? await this.settled(kept)
          : await this.call(steps.length, {
              systemPrompt: this.settings.numbers.get(conversation.phoneNumberId)?.systemPrompt ?? this.deps.claude.systemPrompt,
              knowledge,
              tools: this.tools,
              toolChoice: bounded ? "none" : "auto",
              // Shortened: the messages being answered alone, without the history before them (history.ts marks its end).
              turns: shortened ? turns.slice(turns.findLastIndex((t) => t.cacheBreakpoint) + 1) : turns,
              steps: steps.map((s) => ({ content: s.content, results: s.stopReason === "tool_use" ? resultsOf(s) : [] })),
            });
      switch (answer.stopReason) {
        case "tool_use":
        case "pause_turn":
        case "refusal": {
          // Stored before any tool it asks for runs: a run that resumes never asks Claude for it
          // again. A refusal too: the handoff it leads to may not be recorded at once (law 4).
          const uses = answer.stopReason === "tool_use" ? toolUsesOf(answer.content) : [];
          const calls = withKeys(
            conversation.phoneNumberId,
            uses,
            steps.flatMap((s) => s.toolCalls),
          );
          let stored: StoredStep | undefined;
          try {
            stored = await recordStep(this.deps.db, reply.id, steps.length, answer, calls, this.deps.clock.now());
          } catch (error) {
            // Paid for: if Postgres cannot take it now, Redis keeps it until it can (law 4).
            if (isDatabaseUnavailable(error) && answer !== kept) await this.keeping.keep({ replyId: reply.id, step: steps.length, ...answer });
            throw error;
          }
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
          // Answered, and nothing of it to store: the next call arms the deadline anew.
          await releaseGeneration(this.deps.db, reply.id, this.lastDeadline!);
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
      toolUseId: `refusal.${this.begun.reply.id}.${step}`,
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
    // Every call of the step is answered now (by this run or another): read them as stored.
    const fresh = (await readSteps(this.deps.db, this.begun.reply.id)).find((s) => s.step === step.step);
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
    const { lease, conversation } = this.begun;
    for (let attempt = 0; ; attempt++) {
      const started = await startToolCall(this.deps.db, lease, call.id, this.deps.clock.now());
      if (!started.ok) {
        if (started.refused === "fenced_out") throw new FencedOut(`conversation ${lease.conversationId} was taken over before tool call ${call.id}`);
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
      const outcome = await this.deps.actions.call(conversation.phoneNumberId, call.name, call.input, {
        idempotencyKey: call.idempotencyKey,
        ...(left > 0 ? { signal: AbortSignal.timeout(left) } : {}),
      });
      this.deps.metrics.toolCalls.inc({
        phone_number_id: conversation.phoneNumberId,
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
      if (
        await leaveToolCallUnknown(this.deps.db, { ...call, conversationId: conversation.id, replyId: this.begun.reply.id }, unknown, this.deps.clock.now())
      ) {
        countDeadLetter(this.deps, { source: "tool", code: "tool_unknown" });
        this.log.warn({ event: "tool.unknown", toolCall: call.id, tool: call.name }, "a business action never confirmed; a person checks it");
      }
      Object.assign(call, { state: "unknown", ...unknown });
      return;
    }
  }

  private async finish(call: StoredToolCall, outcome: Parameters<typeof finishToolCall>[2]): Promise<void> {
    await finishToolCall(this.deps.db, call.id, outcome, this.deps.clock.now());
    // Seen by a later call of the same action in this run (runTools).
    Object.assign(call, { state: outcome.state, answer: outcome.answer, isError: outcome.isError });
  }

  /**
   * The answer's ledger row settled to the usage Anthropic answered with. While Postgres is
   * away it stays reserved (counted at its greatest cost), and the answer, kept in the job
   * with its call's id, settles it when the database is back.
   */
  private async settled(answer: ClaudeAnswer): Promise<ClaudeAnswer> {
    await settleAnswer(this.deps, this.settings, answer);
    return answer;
  }

  /**
   * One Claude call, armed first: a run that did not just bind the reply sets its deadline
   * anew, waiting out a call another run may still be waiting on; the call starts only well
   * before the deadline by this run's own clock; one that ends without an answer releases it.
   */
  private async call(step: number, ask: Parameters<ClaudeClient["ask"]>[0]): Promise<ClaudeAnswer> {
    const { lease, reply, conversation } = this.begun;
    let armed = this.armed;
    this.armed = undefined;
    if (!armed) {
      const armedAt = this.deps.clock.monotonicMs();
      const result = await armGeneration(this.deps.db, lease, reply.id, generationBudgetMs(this.settings.generation), this.deps.clock.now());
      if (!result.ok) {
        if (result.refused === "fenced_out") throw new FencedOut(`conversation ${lease.conversationId} was taken over before Claude was asked`);
        if (result.refused === "in_flight") throw new Postpone(result.until.getTime(), "a Claude call for this reply may still answer");
        throw new Postpone(this.deps.clock.now().getTime(), "the reply was answered or dead-lettered meanwhile; taken again");
      }
      armed = { deadline: result.deadline, armedAt };
    }
    const deadline = armed.deadline!;
    this.lastDeadline = deadline;
    if (this.deps.clock.monotonicMs() - armed.armedAt > this.settings.generation.startWithinMs) {
      await releaseGeneration(this.deps.db, reply.id, deadline);
      throw new RetryableError({
        source: "internal",
        code: "slow_start",
        reason: `Claude was not asked within ${this.settings.generation.startWithinMs} ms of the reply's start (reading its history and media took longer)`,
      });
    }
    const asked = { phoneNumberId: conversation.phoneNumberId, model: this.deps.claude.model };
    const callId = randomUUID();
    const reserved = await reserveClaudeCall(
      this.deps.db,
      {
        id: callId,
        phoneNumberId: conversation.phoneNumberId,
        replyId: reply.id,
        step,
        model: asked.model,
        reservedUsd: greatestCostUsd(asked.model, this.deps.claude.boundOf(ask), this.settings.modelPrices),
        budgetUsd: this.settings.numbers.get(conversation.phoneNumberId)?.dailyBudget?.usd,
      },
      this.deps.clock.now(),
    );
    if (!reserved.ok) {
      await releaseGeneration(this.deps.db, reply.id, deadline);
      throw budgetSpent(this.settings.numbers.get(conversation.phoneNumberId)!.dailyBudget!.usd, reserved);
    }
    let answer: ClaudeAnswer;
    try {
      answer = { ...(await this.deps.claude.ask(ask)), callId };
    } catch (error) {
      const timedOut = error instanceof RetryableError && error.code === "timeout";
      countClaudeCall(this.deps.metrics, asked, { error: { retryable: !(error instanceof PermanentError), timedOut } }, this.settings.modelPrices);
      if (timedOut) this.log.warn({ event: "reply.claude_timeout" }, "Claude did not answer in time; the call may be billed, and a retry is another");
      // An error Anthropic answered (a status) is not billed; no answer at all may be.
      const answered = error instanceof RetryableError || error instanceof PermanentError ? /^\d+$/.test(error.code ?? "") : false;
      await closeClaudeCall(this.deps.db, callId, answered ? "refused" : "unknown", this.deps.clock.now()).catch(() => undefined); // counted at its reservation
      await releaseGeneration(this.deps.db, reply.id, deadline).catch(() => undefined); // at worst the retry waits for the deadline
      throw error;
    }
    await this.settled(answer);
    countClaudeCall(this.deps.metrics, asked, { ok: { ...answer.usage, text: "" } }, this.settings.modelPrices);
    this.log.info(
      {
        event: "reply.generated",
        model: answer.usage.model,
        stopReason: answer.stopReason,
        inputTokens: answer.usage.inputTokens,
        outputTokens: answer.usage.outputTokens,
        cacheReadTokens: answer.usage.cacheReadTokens,
      },
      "Claude answered",
    );
    return answer;
  }
}
