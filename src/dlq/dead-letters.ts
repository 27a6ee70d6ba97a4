import type { Db } from "../db/client.ts";
import { type DeadLetterHolder, type DeadLetterInput, deadLetterReply } from "../replies/state/dead-letters.ts";
import type { ReasonKind } from "./explain.ts";
import { reasonKind } from "./reasons.ts";

/**
 * Recording a dead letter (the transition is src/replies/state/dead-letters.ts) and counting
 * it for the operators' alerts once it is committed: wa_dead_letters_created_total{reason}.
 */

/** What recording a dead letter needs: the database, and where new ones are counted. */
export interface DeadLetterDeps {
  db: Db;
  metrics: { deadLettersCreated: DeadLettersCreated };
}

export interface DeadLettersCreated {
  inc(labels: { reason: ReasonKind }): void;
}

/** A reply becomes a dead letter (or joins its open one); a new one is counted by its reason. */
export async function recordDeadLetter(
  deps: DeadLetterDeps,
  input: DeadLetterInput,
  holder: DeadLetterHolder,
  now = new Date(),
): Promise<{ id: string; created: boolean } | null> {
  const recorded = await deadLetterReply(deps.db, input, holder, now);
  if (recorded?.created) countDeadLetter(deps, input.failure);
  return recorded;
}

/** Counts a dead letter created by a transition of its own (the reconciler's, a handoff). */
export function countDeadLetter(deps: Pick<DeadLetterDeps, "metrics">, failure: Pick<DeadLetterInput["failure"], "source" | "code">): void {
  deps.metrics.deadLettersCreated.inc({ reason: reasonKind(failure.source, failure.code ?? null) });
}

export function countHandoff(deps: Pick<DeadLetterDeps, "metrics">): void {
  deps.metrics.deadLettersCreated.inc({ reason: "handoff" });
}
