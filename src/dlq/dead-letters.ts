import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import { type Queues, scheduleReply } from "../queue/queues.ts";
import {
  type DeadLetterHolder,
  type DeadLetterInput,
  deadLetterConversation,
  deadLetterMessage,
  deadLetterReply,
  type RecordedDeadLetter,
} from "../state/dead-letters.ts";
import type { ReasonKind } from "./explain.ts";
import { reasonKind } from "./reasons.ts";

/**
 * Recording a dead letter (the transition is src/state/dead-letters.ts), counting it
 * for the operators' alerts once it is committed (wa_dead_letters_created_total{reason}), and
 * never leaving the customer in silence (law 14): a new item brings a holding reply when the
 * failure leaves them reachable, and a reply job to send it.
 */

/** What recording a dead letter needs: the database, where new ones are counted, the queue that sends the holding reply, and the time. */
export interface DeadLetterDeps {
  db: Db;
  queues: Queues;
  metrics: { deadLettersCreated: DeadLettersCreated };
  clock: Clock;
}

/**
 * After these failures nothing we write reaches the customer, or somebody else speaks to them:
 * a closed window, a number that cannot receive or is known only by a BSUID Meta would not
 * take, our own set-up (a bad token sends nothing), a handoff (it has its own reply).
 */
const UNREACHABLE: ReadonlySet<ReasonKind> = new Set(["window_closed", "cannot_receive", "needs_phone", "setup", "handoff"]);

/** HOLDING_REPLY (`text`), when it is set and the failure leaves the customer reachable. */
function holdingReplyFor(text: string, failure: Pick<DeadLetterInput["failure"], "source" | "code">): string | undefined {
  return text && !UNREACHABLE.has(reasonKind(failure.source, failure.code ?? null)) ? text : undefined;
}

export interface DeadLettersCreated {
  inc(labels: { reason: ReasonKind }): void;
}

/**
 * The DLQ as the workers record to it. HOLDING_REPLY is its own setting, given once at start:
 * each way of recording an item offers it to the customer when the failure leaves them
 * reachable (holdingReplyFor), then counts what is new and schedules the reply that sends it.
 */
export class DeadLetterDesk {
  constructor(
    private readonly deps: DeadLetterDeps,
    private readonly holdingText: string,
  ) {}

  /** A reply becomes a dead letter (or joins its open one). */
  async reply(input: Omit<DeadLetterInput, "holdingReply">, holder: DeadLetterHolder): Promise<RecordedDeadLetter | "csat_dropped" | null> {
    const recorded = await deadLetterReply(this.deps.db, { ...input, holdingReply: this.holdingFor(input.failure) }, holder, this.deps.clock.now());
    await afterDeadLetters(this.deps, input.conversationId, recorded && recorded !== "csat_dropped" ? [recorded] : [], input.failure);
    return recorded;
  }

  /** A message no worker could read becomes a dead letter of its own (null: bound or recorded before). */
  async message(message: { conversationId: string; messageId: string }, failure: DeadLetterInput["failure"]): Promise<RecordedDeadLetter | null> {
    const letter = await deadLetterMessage(this.deps.db, message, failure, this.holdingFor(failure), this.deps.clock.now());
    await afterDeadLetters(this.deps, message.conversationId, letter ? [letter] : [], failure);
    return letter;
  }

  /** What a conversation left unfinished becomes dead letters (the reconciler gave up on it): how many. */
  async conversation(conversationId: string, failure: DeadLetterInput["failure"], dedupPrefix: string): Promise<number> {
    const holdingReply = this.holdingFor(failure);
    const letters = await deadLetterConversation(this.deps.db, conversationId, failure, { dedupPrefix, holdingReply }, this.deps.clock.now());
    await afterDeadLetters(this.deps, conversationId, letters, failure);
    return letters.length;
  }

  private holdingFor(failure: Pick<DeadLetterInput["failure"], "source" | "code">): string | undefined {
    return holdingReplyFor(this.holdingText, failure);
  }
}

/**
 * Once dead letters are committed: the new ones counted, and a reply job for the conversation
 * when a holding reply waits to go out (BullMQ keeps it until a run in progress ends).
 */
async function afterDeadLetters(
  deps: DeadLetterDeps,
  conversationId: string,
  letters: readonly RecordedDeadLetter[],
  failure: Pick<DeadLetterInput["failure"], "source" | "code">,
): Promise<void> {
  for (const letter of letters) if (letter.created) countDeadLetter(deps, failure);
  if (letters.some((letter) => letter.holding)) await scheduleReply(deps.queues, conversationId, 0);
}

/** Counts a dead letter created by a transition of its own (the reconciler's, a handoff). */
export function countDeadLetter(deps: Pick<DeadLetterDeps, "metrics">, failure: Pick<DeadLetterInput["failure"], "source" | "code">): void {
  deps.metrics.deadLettersCreated.inc({ reason: reasonKind(failure.source, failure.code ?? null) });
}

export function countHandoff(deps: Pick<DeadLetterDeps, "metrics">): void {
  deps.metrics.deadLettersCreated.inc({ reason: "handoff" });
}
