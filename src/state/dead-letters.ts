import type { GeneratedReply } from "../ai/claude.ts";
import type { Db, Prisma } from "../db/client.ts";
import type { Failure } from "../errors.ts";
import { PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { splitForWhatsApp } from "../whatsapp/split.ts";
import { SERVICE_WINDOW_MS } from "../whatsapp/window.ts";
import { resumeIn } from "./conversations.ts";
import { assertLease, fenceOff, type Lease } from "./fence.ts";
import { bindStranded } from "./messages.ts";
import { delivered, maybeSent } from "./parts.ts";
import { type ChosenTemplate, reopenForResend, storeDraft, writeStaffReply } from "./replies.ts";

/**
 * A dead letter is a reply that could not be made or delivered (law 6), or a customer waiting
 * for a person: it keeps the failure's code and a reason a person can read, until staff
 * resend or discard it. README.md in this folder has the whole machine.
 *
 *   (deadLetterReply, openHandoffItem) open ─resend─▶ resent
 *                                      open ─discard─▶ discarded
 *                                      resent ─reopenAfterFailedQueue─▶ open   (the resend's job could not be queued)
 *   a customer waiting for a person:   open ─answerHandedOff─▶ open, a person's message on its way
 *                                      open ─giveBackToBot, resumeConversation─▶ resolved
 *
 * One open dead letter per reply (a UNIQUE index): a later failure of the same reply joins the
 * open item's history. Every staff action is in that history, attributed.
 *
 * A new item may come with a holding reply (law 14): HOLDING_REPLY, a reply of its own (kind
 * "holding", ready, its parts pending) made in the same transaction, so it is said once per
 * open item and sent by the part machinery of law 5. Only while WhatsApp lets us write to the
 * customer and nobody else speaks to them: the window open, not opted out, not paused (a
 * handoff has its own reply). A holding reply that fails joins its item's history instead of
 * becoming an item, or a holding message of its own.
 */

type Tx = Prisma.TransactionClient;

export interface DeadLetterInput {
  conversationId: string;
  replyId: string;
  failure: Pick<Failure, "source" | "code" | "reason" | "detail">;
  attempts: number;
  /** The same failure recorded twice (a redelivered status webhook) makes one row. */
  dedupKey: string;
  /** What the customer is told if the item is new and they can still be written to; undefined: nothing (the failure says they cannot be). */
  holdingReply?: string | undefined;
}

/** A dead letter recorded: a new item (`created`) or one joined; `holding` when a holding reply was made with it, for a reply job to send. */
export interface RecordedDeadLetter {
  id: string;
  created: boolean;
  holding: boolean;
}

/**
 * Who dead-letters: the reply job run holding the conversation (its lease must still hold:
 * law 8), or something outside it (a status webhook, the reconciler), which fences off
 * whatever run holds the conversation, so no part of the dead reply is sent after this
 * commits; that caller schedules a reply job for the rest of the conversation's work. Or
 * nobody: a reply no run was answering (its messages were just bound to it for staff).
 */
export type DeadLetterHolder = { lease: Lease } | "fence_off" | "unanswered";

/**
 * any → dead, with the failure recorded: a new open item, or the open item of the same reply
 * joined (`created` false). Null when this very failure was recorded before (the same
 * dedupKey: a redelivered status webhook). Throws FencedOut when the run's lease is lost.
 */
export async function deadLetterReply(db: Db, input: DeadLetterInput, holder: DeadLetterHolder, now: Date): Promise<RecordedDeadLetter | null> {
  return db.$transaction((tx) => deadLetterIn(tx, input, holder, now));
}

async function deadLetterIn(tx: Tx, input: DeadLetterInput, holder: DeadLetterHolder, now: Date): Promise<RecordedDeadLetter | null> {
  if (holder === "fence_off") await fenceOff(tx, input.conversationId);
  else if (holder !== "unanswered") await assertLease(tx, holder.lease);
  const existing = await tx.deadLetter.findUnique({ where: { dedupKey: input.dedupKey }, select: { id: true } });
  if (existing) return null;
  // Locks the reply row: two failures of one reply recorded at once serialise here.
  const dead = await tx.reply.update({
    where: { id: input.replyId },
    data: { state: "dead", generationDeadline: null, updatedAt: now },
    select: { kind: true },
  });
  const failure = {
    source: input.failure.source,
    code: input.failure.code ?? null,
    reason: input.failure.reason,
    detail: (input.failure.detail ?? undefined) as Prisma.InputJsonValue | undefined,
  };
  const history = (action: string) => ({ actor: "system", action, detail: { ...failure, dedupKey: input.dedupKey } as Prisma.InputJsonValue, createdAt: now });
  const open =
    dead.kind === "holding"
      ? await tx.deadLetter.findFirst({ where: { holdingReplyId: input.replyId }, select: { id: true } })
      : await tx.deadLetter.findFirst({ where: { replyId: input.replyId, state: "open" }, select: { id: true } });
  if (open) {
    await tx.deadLetterAction.create({ data: { deadLetterId: open.id, ...history(dead.kind === "holding" ? "holding_failed" : "failed_again") } });
    return { id: open.id, created: false, holding: false };
  }
  const letter = await tx.deadLetter.create({
    data: { conversationId: input.conversationId, replyId: input.replyId, dedupKey: input.dedupKey, attempts: input.attempts, ...failure, createdAt: now },
    select: { id: true },
  });
  const holding = dead.kind !== "holding" && input.holdingReply ? await sayHolding(tx, input.conversationId, letter.id, input.holdingReply, now) : false;
  return { id: letter.id, created: true, holding };
}

/**
 * The holding reply of a new item, when the customer can still be written to and nobody else
 * speaks to them; true when it was made. Its words are in the item's history.
 */
async function sayHolding(tx: Tx, conversationId: string, deadLetterId: string, text: string, now: Date): Promise<boolean> {
  const windowFrom = new Date(now.getTime() - SERVICE_WINDOW_MS);
  const [made] = await tx.$queryRaw<{ id: string }[]>`
    WITH reachable AS (
      SELECT id FROM conversations
      WHERE id = ${conversationId}::uuid AND opted_out_at IS NULL AND last_inbound_at > ${windowFrom}::timestamptz
        AND (paused_until IS NULL OR paused_until <= ${now}::timestamptz)
        -- One holding message waiting to go out says it for every item opened meanwhile.
        AND NOT EXISTS (SELECT 1 FROM replies r WHERE r.conversation_id = conversations.id AND r.kind = 'holding' AND r.state = 'ready')
    ),
    made AS (
      INSERT INTO replies (id, conversation_id, kind, state, text, updated_at)
      SELECT gen_random_uuid(), reachable.id, 'holding', 'ready', ${text}, ${now}::timestamptz FROM reachable
      RETURNING id
    ),
    parts AS (
      INSERT INTO outbound_messages (id, reply_id, seq, text)
      SELECT gen_random_uuid(), made.id, p.n - 1, p.text FROM made, unnest(${splitForWhatsApp(text)}::text[]) WITH ORDINALITY AS p(text, n)
    ),
    linked AS (UPDATE dead_letters SET holding_reply_id = made.id FROM made WHERE dead_letters.id = ${deadLetterId}::uuid)
    SELECT id::text FROM made`;
  if (!made) return false;
  await tx.deadLetterAction.create({ data: { deadLetterId, actor: "system", action: "holding_reply", detail: { replyId: made.id, text }, createdAt: now } });
  return true;
}

/**
 * The reconciler gave up on a conversation (law 6): each of its unfinished replies, and its
 * unanswered messages bound to one new reply (messages.ts, bindStranded), become dead letters,
 * in one transaction that fences off any run still holding it, with one holding reply at most.
 */
export async function deadLetterConversation(
  db: Db,
  conversationId: string,
  failure: DeadLetterInput["failure"],
  options: { dedupPrefix: string; holdingReply: string | undefined },
  now: Date,
): Promise<RecordedDeadLetter[]> {
  return db.$transaction(async (tx) => {
    await fenceOff(tx, conversationId);
    const unfinished = await tx.reply.findMany({
      where: { conversationId, state: { in: ["generating", "ready"] } },
      select: { id: true },
      orderBy: { createdAt: "asc" },
    });
    const stranded = await bindStranded(tx, conversationId, now);
    const replyIds = [...unfinished.map((r) => r.id), ...(stranded ? [stranded] : [])];
    const letters: RecordedDeadLetter[] = [];
    for (const replyId of replyIds) {
      const input = { conversationId, replyId, failure, attempts: 0, dedupKey: `${options.dedupPrefix}.${replyId}`, holdingReply: options.holdingReply };
      // Fenced off above, once for all of them.
      const letter = await deadLetterIn(tx, input, "unanswered", now);
      if (letter) letters.push(letter);
    }
    return letters;
  });
}

/**
 * One message that could never be read (its job's data is wrong: src/queue/catalog.ts) is kept
 * for staff as a dead letter of its own, bound to a dead reply. Null when a reply job bound
 * it first, or when this failure was recorded before.
 */
export async function deadLetterMessage(
  db: Db,
  message: { conversationId: string; messageId: string },
  failure: DeadLetterInput["failure"],
  holdingReply: string | undefined,
  now: Date,
): Promise<RecordedDeadLetter | null> {
  return db.$transaction(async (tx) => {
    const replyId = await bindStranded(tx, message.conversationId, now, message.messageId);
    if (!replyId) return null;
    const input = { conversationId: message.conversationId, replyId, failure, attempts: 0, dedupKey: `message.${message.messageId}`, holdingReply };
    return deadLetterIn(tx, input, "unanswered", now);
  });
}

/**
 * The staff item of a customer handed to a person (no reply to resend: the bot is paused for
 * them), inside the caller's transaction: the bind that applied a handoff word (keyed by its
 * wamid), Claude's handoff (keyed by its tool_use id, with Claude's reason), or the bind that
 * skipped a message written to a bot already paused (`waiting`, keyed by its wamid): that one
 * only when the conversation has no open item, since staff would already see it there. The
 * bind holds the conversation's row, so two runs cannot both find none. True when it opened one.
 */
export async function openHandoffItem(
  tx: Tx,
  conversationId: string,
  handoff: { key: string; reason?: string | undefined; waiting?: boolean },
): Promise<boolean> {
  if (handoff.waiting && (await tx.deadLetter.count({ where: { conversationId, state: "open" } })) > 0) return false;
  await tx.deadLetter.create({
    data: {
      conversationId,
      dedupKey: `handoff.${handoff.key}`,
      source: "handoff",
      // Claude's own handoff (handoff_to_human, or a refusal) says so, for the staff page's words.
      code: handoff.reason ? "claude" : handoff.waiting ? "paused" : null,
      reason: handoff.reason
        ? `Claude handed the customer to a person: ${handoff.reason}`
        : handoff.waiting
          ? "The customer wrote while the bot was paused for this conversation; nobody has answered them"
          : "The customer asked for a person; the bot is paused for this conversation until staff resume it",
      detail: handoff.reason ? { toolUseId: handoff.key, reason: handoff.reason } : { wamid: handoff.key },
    },
  });
  return true;
}

/**
 * generating → ready, with the customer handed to a person (Claude's handoff_to_human, or its
 * refusal): the reply says HANDOFF_REPLY (nothing when it is empty), the bot pauses for the
 * conversation and staff get the item with Claude's reason, in one transaction, for the lease
 * holder. Returns what storeDraft returns.
 */
export async function handOff(
  db: Db,
  lease: Lease,
  replyId: string,
  handoff: { key: string; reason: string; reply: GeneratedReply },
  now: Date,
): Promise<Awaited<ReturnType<typeof storeDraft>>> {
  return db.$transaction(async (tx) => {
    await assertLease(tx, lease);
    const stored = await storeDraft(tx, lease, replyId, handoff.reply, now);
    if (!stored.outbox) return stored; // handed off before (a retry): the item exists
    await tx.$executeRaw`
      UPDATE conversations SET paused_until = ${PAUSED_INDEFINITELY}::timestamptz, paused_by = 'claude', updated_at = ${now}::timestamptz
      WHERE id = ${lease.conversationId}::uuid`;
    await openHandoffItem(tx, lease.conversationId, { key: handoff.key, reason: handoff.reason });
    return stored;
  });
}

export type StaffActionResult =
  | { ok: true }
  | { ok: false; status: 404 | 409; error: string; code?: "already_delivered" | "maybe_sent" | "has_reply" | "no_reply" | "window_closed" | "opted_out" };

/**
 * open → resent, and the reply dead → ready (or generating): exactly once, however many people
 * press it at once. The item and its reply are locked first, so a concurrent resend, a status
 * webhook or a late failure is waited for and then seen; the conversation is fenced off, so a
 * run still holding it (it may have been sending the dead reply's other parts) sends nothing
 * more: the reply job the caller schedules sends the reply again, keeping law 8. A reply Meta
 * took meanwhile (a late status) is not sent again; one whose last send may have arrived is
 * resent only when the person confirms it (`confirmMaybeSent`). With `template`, the reply is
 * resolved by that approved template alone (issue 21), sent once by the part machinery.
 */
export async function resendDeadLetter(
  db: Db,
  id: string,
  input: { text?: string | undefined; regenerate?: boolean; template?: ChosenTemplate | undefined; confirmMaybeSent?: boolean | undefined; actor: string },
  now: Date,
): Promise<StaffActionResult & { conversationId?: string }> {
  return db.$transaction(async (tx) => {
    const letter = await lockItem(tx, id);
    if (!letter) return { ok: false, status: 404, error: "dead letter not found" } as const;
    if (letter.state !== "open") return alreadyHandled(tx, id);
    if (!letter.replyId) return NO_REPLY;
    const [reply] = await tx.$queryRaw<{ id: string; text: string | null }[]>`SELECT id, text FROM replies WHERE id = ${letter.replyId}::uuid FOR UPDATE`;
    if (!reply) return { ok: false, status: 404, error: "dead letter not found" } as const;
    const parts = await tx.outboundMessage.findMany({ where: { replyId: reply.id } });
    if (parts.length > 0 && parts.every(delivered)) {
      return {
        ok: false,
        status: 409,
        code: "already_delivered",
        error: "Meta took this reply after all (its status came late): the customer has it. Discard the item instead.",
      } as const;
    }
    const uncertain = parts.some(maybeSent);
    if (uncertain && !input.confirmMaybeSent) {
      return {
        ok: false,
        status: 409,
        code: "maybe_sent",
        error: "The last send of this reply may already have arrived: Meta never answered it and no status came. Resend anyway with confirmMaybeSent: true.",
      } as const;
    }
    await tx.deadLetter.update({ where: { id }, data: { state: "resent", actedBy: input.actor, actedAt: now } });
    await fenceOff(tx, letter.conversationId);
    await reopenForResend(tx, reply, input, now);
    await tx.deadLetterAction.create({
      data: {
        deadLetterId: id,
        actor: input.actor,
        action: input.regenerate ? "regenerate" : input.template ? "resend_template" : input.text !== undefined ? "resend_edited" : "resend",
        createdAt: now,
        ...(input.text !== undefined || input.template || uncertain
          ? {
              detail: {
                ...(input.text !== undefined ? { text: input.text } : {}),
                ...(input.template
                  ? { template: input.template.name, language: input.template.language, parameters: [...input.template.parameters], text: input.template.text }
                  : {}),
                ...(uncertain ? { maybeSentConfirmed: true } : {}),
              },
            }
          : {}),
      },
    });
    return { ok: true, conversationId: letter.conversationId } as const;
  });
}

/** Refused on a customer waiting for a person: there is no failed reply to send again. */
const NO_REPLY = {
  ok: false,
  status: 409,
  code: "no_reply",
  error: "This customer is waiting for a person and no reply failed: write to them (answer), then give the conversation back to the bot.",
} as const;

/** Refused on a failed reply: that item is resolved by sending it again (with a person's text, if they like). */
const HAS_REPLY = {
  ok: false,
  status: 409,
  code: "has_reply",
  error: "A reply failed here: send it again (your text may replace it) or discard it; answering and giving back are for customers waiting for a person.",
} as const;

/** The item locked for a staff action, with what decides it. */
async function lockItem(tx: Tx, id: string) {
  const [letter] = await tx.$queryRaw<{ id: string; state: string; replyId: string | null; conversationId: string }[]>`
    SELECT id, state::text AS state, reply_id AS "replyId", conversation_id AS "conversationId" FROM dead_letters WHERE id = ${id}::uuid FOR UPDATE`;
  return letter;
}

/**
 * open → open, with a person's message to a customer waiting for one (issue 21): their text,
 * or the approved template they chose, becomes a reply of kind "staff" (writeStaffReply) that
 * the reply job sends once (law 5) and Claude later reads as the business's side. The person
 * now holds the conversation: the bot stays paused, in their name, until it is given back.
 * Free text only within the 24-hour window (a template is for after it), never to a customer
 * who opted out. The caller schedules the reply job; if it cannot, the reconciler does.
 */
export async function answerHandedOff(
  db: Db,
  id: string,
  input: ({ text: string } | { template: ChosenTemplate }) & { actor: string },
  now: Date,
): Promise<StaffActionResult & { conversationId?: string; replyId?: string }> {
  return db.$transaction(async (tx) => {
    const letter = await lockItem(tx, id);
    if (!letter) return { ok: false, status: 404, error: "dead letter not found" } as const;
    if (letter.state !== "open") return alreadyHandled(tx, id);
    if (letter.replyId) return HAS_REPLY;
    const [conversation] = await tx.$queryRaw<{ lastInboundAt: Date | null; optedOut: boolean }[]>`
      SELECT last_inbound_at AS "lastInboundAt", opted_out_at IS NOT NULL AS "optedOut"
      FROM conversations WHERE id = ${letter.conversationId}::uuid FOR UPDATE`;
    if (!conversation) return { ok: false, status: 404, error: "dead letter not found" } as const;
    if (conversation.optedOut) {
      return {
        ok: false,
        status: 409,
        code: "opted_out",
        error: "The customer opted out (STOP): nothing more is sent to them until they write again.",
      } as const;
    }
    const windowOpen = conversation.lastInboundAt !== null && conversation.lastInboundAt.getTime() > now.getTime() - SERVICE_WINDOW_MS;
    if ("text" in input && !windowOpen) {
      return {
        ok: false,
        status: 409,
        code: "window_closed",
        error: "The 24-hour window has closed: WhatsApp refuses free text until the customer writes again. Send an approved template instead.",
      } as const;
    }
    await tx.$executeRaw`
      UPDATE conversations SET paused_until = ${PAUSED_INDEFINITELY}::timestamptz, paused_by = ${input.actor}, updated_at = ${now}::timestamptz
      WHERE id = ${letter.conversationId}::uuid`;
    const replyId = await writeStaffReply(tx, letter.conversationId, "template" in input ? { template: input.template } : { text: input.text }, now);
    const detail =
      "template" in input
        ? { replyId, template: input.template.name, language: input.template.language, parameters: [...input.template.parameters], text: input.template.text }
        : { replyId, text: input.text };
    await tx.deadLetterAction.create({ data: { deadLetterId: id, actor: input.actor, action: "staff_reply", detail, createdAt: now } });
    return { ok: true, conversationId: letter.conversationId, replyId } as const;
  });
}

/**
 * open → resolved: the person gives the conversation back to the bot (issue 21), which answers
 * the customer's next message with the person's words in its history. The same as resuming
 * the bot for the conversation (resumeConversation), reached from the item.
 */
export async function giveBackToBot(db: Db, id: string, actor: string, now: Date): Promise<StaffActionResult & { conversationId?: string }> {
  return db.$transaction(async (tx) => {
    const letter = await lockItem(tx, id);
    if (!letter) return { ok: false, status: 404, error: "dead letter not found" } as const;
    if (letter.state !== "open") return alreadyHandled(tx, id);
    if (letter.replyId) return HAS_REPLY;
    await resumeIn(tx, letter.conversationId, actor, now);
    return { ok: true, conversationId: letter.conversationId } as const;
  });
}

/** open → discarded, with an optional note. */
export async function discardDeadLetter(db: Db, id: string, input: { note?: string | undefined; actor: string }, now: Date): Promise<StaffActionResult> {
  return db.$transaction(async (tx) => {
    const won = await tx.deadLetter.updateMany({
      where: { id, state: "open" },
      data: { state: "discarded", actedBy: input.actor, actedAt: now, note: input.note ?? null },
    });
    if (won.count === 0) return alreadyHandled(tx, id);
    await tx.deadLetterAction.create({
      data: { deadLetterId: id, actor: input.actor, action: "discard", createdAt: now, ...(input.note ? { detail: { note: input.note } } : {}) },
    });
    return { ok: true } as const;
  });
}

/** Why a staff action lost: read after the conditional update or the lock, so a concurrent winner is seen. */
async function alreadyHandled(db: Pick<Db, "deadLetter">, id: string): Promise<StaffActionResult> {
  const letter = await db.deadLetter.findUnique({ where: { id }, select: { state: true, actedBy: true } });
  if (!letter) return { ok: false, status: 404, error: "dead letter not found" };
  return { ok: false, status: 409, error: `dead letter is already ${letter.state}${letter.actedBy ? ` by ${letter.actedBy}` : ""}` };
}

/**
 * resent → open, and its reply back to dead: undoes a resend whose reply job could not be
 * queued (Redis away), so the item is not lost from the open list. Only a resend still
 * standing is undone.
 */
export async function reopenAfterFailedQueue(db: Db, id: string, now: Date): Promise<void> {
  await db.$transaction(async (tx) => {
    const [letter] = await tx.$queryRaw<{ replyId: string | null; conversationId: string }[]>`
      UPDATE dead_letters SET state = 'open', acted_by = NULL, acted_at = NULL, updated_at = ${now}::timestamptz
      WHERE id = ${id}::uuid AND state = 'resent' RETURNING reply_id AS "replyId", conversation_id AS "conversationId"`;
    if (!letter) return;
    if (letter.replyId) {
      await fenceOff(tx, letter.conversationId);
      await tx.reply.update({ where: { id: letter.replyId }, data: { state: "dead", updatedAt: now } });
    }
    await tx.deadLetterAction.create({
      data: { deadLetterId: id, actor: "system", action: "reopen", detail: { reason: "the resend could not be queued" }, createdAt: now },
    });
  });
}

/** A person took the item over from whoever was answering it (src/admin/presence.ts), in its history, inside the take-over's transaction. */
export async function recordTakeOver(tx: Tx, deadLetterId: string, takeOver: { actor: string; from: string }, now: Date): Promise<void> {
  await tx.deadLetterAction.create({
    data: { deadLetterId, actor: takeOver.actor, action: "take_over", detail: takeOver.from ? { from: takeOver.from } : {}, createdAt: now },
  });
}
