import type { Db } from "../db/client.ts";
import type { Failure } from "../errors.ts";
import type { Prisma } from "../generated/prisma/client.ts";
import { assertLease, delivered, type Lease, maybeSent, reopenForResend } from "../replies/state.ts";
import type { ReasonKind } from "./explain.ts";
import { reasonKind } from "./reasons.ts";

/**
 * A dead letter is a reply that could not be made or delivered (law 6): it keeps the
 * conversation, the draft if there is one, Meta's or Anthropic's code and a reason a person
 * can read, until staff resend or discard it.
 */

/** What recording a dead letter needs: the database, and where new ones are counted (wa_dead_letters_created_total). */
export interface DeadLetterDeps {
  db: Db;
  metrics: { deadLettersCreated: DeadLettersCreated };
}

export interface DeadLettersCreated {
  inc(labels: { reason: ReasonKind }): void;
}

export interface DeadLetterInput {
  conversationId: string;
  replyId: string;
  failure: Pick<Failure, "source" | "code" | "reason" | "detail">;
  attempts: number;
  /** The same failure recorded twice (a redelivered status webhook) makes one row. */
  dedupKey: string;
}

/**
 * Marks the reply dead and records why, in one transaction. One open dead letter per reply: a
 * reply dead-lettered by its job and then reported failed by Meta (or the other way round) is
 * one item, and the later failure joins its history. From a reply job, `lease` proves the run
 * still owns the conversation (law 8). Returns the item, or null when this very failure was
 * recorded before (a redelivered status webhook). A new item is counted once it is committed.
 */
export async function recordDeadLetter(deps: DeadLetterDeps, input: DeadLetterInput, lease?: Lease): Promise<{ id: string; created: boolean } | null> {
  const recorded = await deps.db.$transaction(async (tx) => {
    if (lease) await assertLease(tx, lease);
    const existing = await tx.deadLetter.findUnique({ where: { dedupKey: input.dedupKey }, select: { id: true } });
    if (existing) return null;
    // Locks the reply row: two failures of one reply recorded at once serialise here.
    await tx.reply.update({ where: { id: input.replyId }, data: { state: "dead" } });
    const failure = {
      source: input.failure.source,
      code: input.failure.code ?? null,
      reason: input.failure.reason,
      detail: (input.failure.detail ?? undefined) as Prisma.InputJsonValue | undefined,
    };
    const open = await tx.deadLetter.findFirst({ where: { replyId: input.replyId, state: "open" }, select: { id: true } });
    if (open) {
      await tx.deadLetterAction.create({
        data: { deadLetterId: open.id, actor: "system", action: "failed_again", detail: { ...failure, dedupKey: input.dedupKey } as Prisma.InputJsonValue },
      });
      return { id: open.id, created: false };
    }
    const letter = await tx.deadLetter.create({
      data: { conversationId: input.conversationId, replyId: input.replyId, dedupKey: input.dedupKey, attempts: input.attempts, ...failure },
      select: { id: true },
    });
    return { id: letter.id, created: true };
  });
  if (recorded?.created) deps.metrics.deadLettersCreated.inc({ reason: reasonKind(input.failure.source, input.failure.code ?? null) });
  return recorded;
}

/**
 * The staff item of a customer's request for a person (no reply to resend: the bot is paused
 * for them), inside the caller's transaction: the caller counts it (`countHandoff`) once that
 * has committed.
 */
export async function openHandoffItem(tx: Prisma.TransactionClient, conversationId: string, wamid: string): Promise<void> {
  await tx.deadLetter.create({
    data: {
      conversationId,
      dedupKey: `handoff.${wamid}`,
      source: "handoff",
      reason: "The customer asked for a person; the bot is paused for this conversation until staff resume it",
      detail: { wamid },
    },
  });
}

export function countHandoff(deps: Pick<DeadLetterDeps, "metrics">): void {
  deps.metrics.deadLettersCreated.inc({ reason: "handoff" });
}

export type StaffActionResult = { ok: true } | { ok: false; status: 404 | 409; error: string; code?: "already_delivered" | "maybe_sent" };

/**
 * Staff resend: exactly once, however many people press it at once. The open → resent
 * transition is a conditional update, so only one request can win it; the winner puts the
 * reply back in the conversation's queue (the reply job sends it, keeping law 8), with the
 * staff's text when given. Claude is called again only when there is neither text nor draft.
 * A reply Meta took meanwhile (a late status) is not sent again; one whose last send may have
 * arrived is resent only when the person confirms it (`confirmMaybeSent`).
 */
export async function resendDeadLetter(
  db: Db,
  id: string,
  input: { text?: string | undefined; regenerate?: boolean; confirmMaybeSent?: boolean | undefined; actor: string },
): Promise<StaffActionResult & { conversationId?: string }> {
  return db.$transaction(async (tx) => {
    const letter = await tx.deadLetter.findUnique({ where: { id }, include: { reply: { include: { parts: true } } } });
    if (!letter) return { ok: false, status: 404, error: "dead letter not found" };
    const reply = letter.reply;
    if (!reply) return { ok: false, status: 409, error: "dead letter has no reply to resend; discard it instead" };
    if (letter.state === "open" && reply.parts.length > 0 && reply.parts.every(delivered)) {
      return {
        ok: false,
        status: 409,
        code: "already_delivered",
        error: "Meta took this reply after all (its status came late): the customer has it. Discard the item instead.",
      };
    }
    const uncertain = reply.parts.some(maybeSent);
    if (letter.state === "open" && uncertain && !input.confirmMaybeSent) {
      return {
        ok: false,
        status: 409,
        code: "maybe_sent",
        error: "The last send of this reply may already have arrived: Meta never answered it and no status came. Resend anyway with confirmMaybeSent: true.",
      };
    }
    const won = await tx.deadLetter.updateMany({
      where: { id, state: "open" },
      data: { state: "resent", actedBy: input.actor, actedAt: new Date() },
    });
    if (won.count === 0) return alreadyHandled(tx, id);
    await reopenForResend(tx, reply, input);
    await tx.deadLetterAction.create({
      data: {
        deadLetterId: id,
        actor: input.actor,
        action: input.regenerate ? "regenerate" : input.text !== undefined ? "resend_edited" : "resend",
        ...(input.text !== undefined || uncertain
          ? { detail: { ...(input.text !== undefined ? { text: input.text } : {}), ...(uncertain ? { maybeSentConfirmed: true } : {}) } }
          : {}),
      },
    });
    return { ok: true, conversationId: letter.conversationId };
  });
}

export async function discardDeadLetter(db: Db, id: string, input: { note?: string | undefined; actor: string }): Promise<StaffActionResult> {
  return db.$transaction(async (tx) => {
    const won = await tx.deadLetter.updateMany({
      where: { id, state: "open" },
      data: { state: "discarded", actedBy: input.actor, actedAt: new Date(), note: input.note ?? null },
    });
    if (won.count === 0) return alreadyHandled(tx, id);
    await tx.deadLetterAction.create({
      data: { deadLetterId: id, actor: input.actor, action: "discard", ...(input.note ? { detail: { note: input.note } } : {}) },
    });
    return { ok: true };
  });
}

/** Why a staff action lost: read after the conditional update, so a concurrent winner is seen. */
async function alreadyHandled(db: Pick<Db, "deadLetter">, id: string): Promise<StaffActionResult> {
  const letter = await db.deadLetter.findUnique({ where: { id }, select: { state: true, actedBy: true } });
  if (!letter) return { ok: false, status: 404, error: "dead letter not found" };
  return { ok: false, status: 409, error: `dead letter is already ${letter.state}${letter.actedBy ? ` by ${letter.actedBy}` : ""}` };
}

/** Undo a resend whose job could not be enqueued, so the item is not lost from the open list. */
export async function reopenDeadLetter(db: Db, id: string, replyId: string | undefined): Promise<void> {
  await db.$transaction([
    db.deadLetter.update({ where: { id }, data: { state: "open", actedBy: null, actedAt: null } }),
    ...(replyId ? [db.reply.update({ where: { id: replyId }, data: { state: "dead" } })] : []),
    db.deadLetterAction.create({ data: { deadLetterId: id, actor: "system", action: "reopen", detail: { reason: "the resend could not be queued" } } }),
  ]);
}

/** A staff action on a whole conversation (pausing the bot) shows in the history of its open items. */
export async function auditConversation(db: Db, conversationId: string, actor: string, action: string, detail?: Record<string, unknown>): Promise<void> {
  const open = await db.deadLetter.findMany({ where: { conversationId, state: "open" }, select: { id: true } });
  await db.deadLetterAction.createMany({
    data: open.map((letter) => ({ deadLetterId: letter.id, actor, action, ...(detail ? { detail: detail as Prisma.InputJsonValue } : {}) })),
  });
}
