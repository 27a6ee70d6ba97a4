import { randomUUID } from "node:crypto";
import type { CallUsage, ClaudeAnswer, ClaudeClient } from "../ai/claude.ts";
import { greatestCostUsd } from "../ai/pricing.ts";
import type { ClaudeAsk, ClaudeKnowledge } from "../ai/request.ts";
import type { Clock } from "../clock.ts";
import { type Db, isDatabaseUnavailable } from "../db/client.ts";
import { countDeadLetter } from "../dlq/dead-letters.ts";
import { FencedOut, PermanentError, Postpone, RetryableError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { countClaudeCall, type Metrics } from "../metrics/metrics.ts";
import type { KeptStep } from "../queue/catalog.ts";
import { countedClaudeCall, settleClaudeCall } from "../state/claude-calls.ts";
import type { Begun } from "../state/conversations.ts";
import { type QuestionMessage, readHistory } from "../state/history.ts";
import { armGeneration, releaseGeneration } from "../state/replies.ts";
import {
  finishToolCall,
  leaveToolCallUnknown,
  readSteps,
  recordStep,
  type StoredStep,
  type StoredToolCall,
  startToolCall,
  type ToolCallAnswer,
  type ToolCallStart,
} from "../state/steps.ts";
import type { BusinessActions } from "../tools/actions.ts";
import { conversationTurns, type HistoryDeps, type HistorySettings } from "./history.ts";
import { type KeyedToolCall, type LoopStore, ToolLoop, type ToolLoopSettings, type Written } from "./tool-loop.ts";

export type { ReplyCost, Written } from "./tool-loop.ts";

/**
 * Writing a customer's reply with Claude (law 4): the tool loop (tool-loop.ts) over the
 * reply's messages and history, its steps and tool calls kept in Postgres, so that a run that
 * resumes a reply (a retry, a takeover) carries on at its first unfinished step: it never asks
 * Claude again for a stored step, never calls a tool again whose answer is stored, and
 * repeats, with the same key, a call that may have gone out. Every Claude call is armed first:
 * a run that takes over waits for a call that may still answer (replies.generation_deadline).
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
export interface GenerationSettings extends HistorySettings, ToolLoopSettings {
  generation: GenerationTiming;
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

/**
 * A step Claude answered while Postgres could not record it lives in the reply job (Redis)
 * until it can: `kept` is the one the job holds, `keep` puts one there.
 */
export interface StepKeeping {
  kept: KeptStep | undefined;
  keep(step: KeptStep): Promise<void>;
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
  const store = new ReplyStore(deps, settings, begun, log, planned ? { deadline: reply.generationDeadline, armedAt } : undefined, keeping);
  const loop = new ToolLoop(deps, settings, { phoneNumberId: conversation.phoneNumberId, answerId: reply.id }, store, log);
  const stored = planned ? [] : await readSteps(deps.db, reply.id);
  const turns = await conversationTurns(deps, settings, messages, history);
  if (turns.length === 0) throw new Error(`reply ${reply.id} has no messages to answer`);
  const knowledge = await deps.knowledge?.forReply(conversation.phoneNumberId, wordsOf(messages));
  return loop.run(turns, knowledge, stored);
}

const wordsOf = (messages: readonly QuestionMessage[]) => messages.flatMap((m) => (m.text ? [m.text] : [])).join("\n");

/**
 * Settles a call's ledger row (state/claude-calls.ts) from its answer. Postgres being away
 * throws: the caller keeps the answer in the job, whose next run settles it (again is harmless).
 */
export async function settleAnswer(
  deps: Pick<GenerationDeps, "db" | "clock">,
  settings: Pick<GenerationSettings, "modelPrices">,
  answer: { callId?: string | undefined; usage: CallUsage },
): Promise<void> {
  if (!answer.callId) return; // kept before the ledger
  await settleClaudeCall(deps.db, answer.callId, answer.usage, settings.modelPrices, deps.clock.now());
}

/**
 * A customer's reply's steps and tool calls, kept in Postgres (src/state/steps.ts) by the run
 * that holds the conversation, and its Claude calls armed and counted in the ledger first.
 */
class ReplyStore implements LoopStore {
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
    this.armed = armed?.deadline ? armed : undefined;
  }

  async resume(step: number): Promise<ClaudeAnswer | undefined> {
    const kept = this.keeping.kept;
    if (kept?.replyId !== this.begun.reply.id || kept.step !== step) return undefined;
    await settleAnswer(this.deps, this.settings, kept);
    return kept;
  }

  async recordStep(step: number, answer: ClaudeAnswer, calls: KeyedToolCall[]): Promise<StoredStep | undefined> {
    const { reply } = this.begun;
    try {
      return await recordStep(this.deps.db, reply.id, step, answer, calls, this.deps.clock.now());
    } catch (error) {
      // Paid for: if Postgres cannot take it now, Redis keeps it until it can (law 4).
      if (isDatabaseUnavailable(error) && answer !== this.keeping.kept) await this.keeping.keep({ replyId: reply.id, step, ...answer });
      throw error;
    }
  }

  startToolCall(callId: string): Promise<ToolCallStart> {
    return startToolCall(this.deps.db, this.begun.lease, callId, this.deps.clock.now());
  }

  async finishToolCall(callId: string, outcome: ToolCallAnswer & { state: "done" | "failed" | "unknown" }): Promise<void> {
    await finishToolCall(this.deps.db, callId, outcome, this.deps.clock.now());
  }

  async leaveToolCallUnknown(call: StoredToolCall, outcome: ToolCallAnswer): Promise<boolean> {
    const { conversation, reply } = this.begun;
    const left = await leaveToolCallUnknown(this.deps.db, { ...call, conversationId: conversation.id, replyId: reply.id }, outcome, this.deps.clock.now());
    if (left) countDeadLetter(this.deps, { source: "tool", code: "tool_unknown" });
    return left;
  }

  async readStep(step: number): Promise<StoredStep | undefined> {
    return (await readSteps(this.deps.db, this.begun.reply.id)).find((s) => s.step === step);
  }

  /** Answered, and nothing of it to store: the next call arms the deadline anew. */
  async answeredWithoutStep(): Promise<void> {
    await releaseGeneration(this.deps.db, this.begun.reply.id, this.lastDeadline!);
  }

  /**
   * One Claude call, armed first: a run that did not just bind the reply sets its deadline
   * anew, waiting out a call another run may still be waiting on; the call starts only well
   * before the deadline by this run's own clock; one that ends without an answer releases it.
   * Reserved in the ledger before it is made (within the number's daily budget), settled after.
   */
  async ask(step: number, ask: ClaudeAsk): Promise<ClaudeAnswer> {
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
    const plan = {
      id: callId,
      phoneNumberId: conversation.phoneNumberId,
      replyId: reply.id,
      step,
      model: asked.model,
      reservedUsd: greatestCostUsd(asked.model, this.deps.claude.boundOf(ask), this.settings.modelPrices),
      budgetUsd: this.settings.numbers.get(conversation.phoneNumberId)?.dailyBudget?.usd,
    };
    const { db, clock, metrics } = this.deps;
    const answer = await countedClaudeCall(
      db,
      plan,
      this.settings.modelPrices,
      () => clock.now(),
      async () => ({ ...(await this.deps.claude.ask(ask)), callId }),
      {
        refused: () => releaseGeneration(db, reply.id, deadline),
        failed: async (error) => {
          const timedOut = error instanceof RetryableError && error.code === "timeout";
          countClaudeCall(metrics, asked, { error: { retryable: !(error instanceof PermanentError), timedOut } }, this.settings.modelPrices);
          if (timedOut) this.log.warn({ event: "reply.claude_timeout" }, "Claude did not answer in time; the call may be billed, and a retry is another");
          await releaseGeneration(db, reply.id, deadline).catch(() => undefined); // at worst the retry waits for the deadline
        },
        answered: (answer) => countClaudeCall(metrics, asked, { ok: { ...answer.usage, text: "" } }, this.settings.modelPrices),
        // Paid for, and its row still reserved: Redis keeps the answer, and the run that resumes
        // this step settles the row instead of asking again (law 4). Swallowed here, a settle lost
        // to a dropped connection left the row reserved while the reply went on and was sent.
        unsettled: async (answer, error) => {
          if (isDatabaseUnavailable(error)) await this.keeping.keep({ replyId: reply.id, step, ...answer });
        },
      },
    );
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
