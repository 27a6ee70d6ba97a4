import type { Clock } from "../clock.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../logger.ts";
import { type Queues, scheduleReply } from "../queue/queues.ts";
import type { ChosenTemplate } from "../state/replies.ts";
import { answerHandedOff, type ResendInput, reopenAfterFailedQueue, resendDeadLetter, type StaffOutcome } from "../state/staff-actions.ts";

/**
 * A person's action on a dead letter that sends something, whole: the transition
 * (src/state/staff-actions.ts), then the reply job that sends it, and what happens when that
 * job cannot be queued. The staff routes (src/admin/) only speak HTTP around these.
 */

export interface StaffSendDeps {
  db: Db;
  queues: Queues;
  clock: Clock;
}

/** The queue could not take the reply job: the item stays (or is again) as it was. */
export type Unqueued = { ok: false; refused: "queue_unavailable" };

/** After an outage, resends go out this far apart, so as not to trip Meta's rate limits again. */
export const BULK_SPACING_MS = 500;

/** Resends one item and queues its reply job `delayMs` from now; undone if the queue is unreachable. */
export async function resend(
  deps: StaffSendDeps,
  id: string,
  input: ResendInput,
  now: Date,
  delayMs = 0,
): Promise<StaffOutcome<{ conversationId: string }> | Unqueued> {
  const result = await resendDeadLetter(deps.db, id, input, now);
  if (!result.ok) return result;
  try {
    await scheduleReply(deps.queues, result.conversationId, delayMs);
  } catch {
    await reopenAfterFailedQueue(deps.db, id, now);
    return { ok: false, refused: "queue_unavailable" };
  }
  return result;
}

/**
 * A person's message to a customer waiting for one, stored once and its reply job queued.
 * Not undone when the queue is unreachable: the message is stored, ready, and the reconciler
 * queues its job; undoing it could race a run already sending it.
 */
export async function answerWaiting(
  deps: StaffSendDeps,
  id: string,
  input: Parameters<typeof answerHandedOff>[2],
  now: Date,
  log: Pick<Logger, "warn">,
): Promise<StaffOutcome<{ conversationId: string; replyId: string }>> {
  const result = await answerHandedOff(deps.db, id, input, now);
  if (!result.ok) return result;
  await scheduleReply(deps.queues, result.conversationId, 0).catch((error: unknown) =>
    log.warn({ event: "dlq.answer_not_queued", deadLetter: id, err: error }, "the answer's reply job could not be queued; the reconciler will queue it"),
  );
  return result;
}

/**
 * After an outage: every open item of one failure code resent, `spacingMs` apart, each reply
 * once even if it stood in the list twice. An item someone else answers, or that cannot be
 * resent now, is skipped.
 */
export async function bulkRetry(
  deps: StaffSendDeps,
  input: { code: string; spacingMs?: number | undefined; confirmMaybeSent?: boolean | undefined; actor: string },
  now: Date,
): Promise<{ resent: number; skipped: number; spacingMs: number }> {
  // Oldest first, as the queue lists them: what has waited longest is resent first.
  const items = await deps.db.deadLetter.findMany({
    where: { state: "open", code: input.code },
    orderBy: { createdAt: "asc" },
    take: 500,
    select: { id: true, replyId: true },
  });
  const spacingMs = input.spacingMs ?? BULK_SPACING_MS;
  let resent = 0;
  let skipped = 0;
  const seen = new Set<string>();
  for (const item of items) {
    if (item.replyId && seen.has(item.replyId)) continue;
    if (item.replyId) seen.add(item.replyId);
    const result = await resend(deps, item.id, { actor: input.actor, confirmMaybeSent: input.confirmMaybeSent }, now, resent * spacingMs);
    if (result.ok) resent++;
    else skipped++;
  }
  return { resent, skipped, spacingMs };
}

/**
 * An approved template on an item: a failed reply is resolved by it (a resend, `resent`); a
 * customer waiting for a person, who has no failed reply, gets it as the person's message
 * (`open`).
 */
export async function sendTemplate(
  deps: StaffSendDeps,
  id: string,
  input: { template: ChosenTemplate; confirmMaybeSent: boolean | undefined; actor: string },
  now: Date,
  log: Pick<Logger, "warn">,
): Promise<StaffOutcome<{ state: "resent" | "open" }> | Unqueued> {
  const item = await deps.db.deadLetter.findUnique({ where: { id }, select: { replyId: true } });
  if (item && item.replyId === null) {
    const answered = await answerWaiting(deps, id, { template: input.template, actor: input.actor }, now, log);
    return answered.ok ? { ok: true, state: "open" } : answered;
  }
  const resent = await resend(deps, id, input, now);
  return resent.ok ? { ok: true, state: "resent" } : resent;
}
