import type { Db, Prisma } from "../db/client.ts";
import { PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { windowOpen } from "../whatsapp/window.ts";
import { auditOpenItems, resumeIn } from "./conversations.ts";
import { fenceOff } from "./fence.ts";
import { delivered, maybeSent } from "./parts.ts";
import { type ChosenTemplate, reopenForResend, writeStaffReply } from "./replies.ts";

/**
 * What a person does on the staff page, each one transaction that checks its starting state,
 * and who else holds the item, under the item's row lock (README.md in this folder has the
 * machine):
 *
 *   open ─resendDeadLetter─▶ resent            resent ─reopenAfterFailedQueue─▶ open
 *   open ─discardDeadLetter─▶ discarded
 *   a customer waiting for a person: open ─answerHandedOff─▶ open, a person's message on its way
 *                                    open ─giveBackToBot, resumeConversation─▶ resolved
 *   the bot of a conversation: pauseConversation, resumeConversation
 *   who has an item open, and who answers it: sayPresence, leaveItem, takeOver
 *
 * Two people, one item (issue 21): while one person is answering an item (they started a reply
 * there, and their page still says so within PRESENCE_TTL_MS), every other person's action on
 * it, or on the bot of its conversation, is refused (`held_by_other`, naming them) until they
 * take it over. An action nobody else holds makes its person the one answering. A refusal is
 * a code with what it needs to be said; src/admin/ words it.
 */

type Tx = Prisma.TransactionClient;

/** How often an open page says it is there. */
export const PRESENCE_BEAT_MS = 10_000;
/** A page silent this long has gone (closed, asleep, offline). */
export const PRESENCE_TTL_MS = 30_000;

/** Why an action did not happen. */
export type Refused =
  | { refused: "item_not_found" | "conversation_not_found" }
  | { refused: "already_handled"; state: string; by: string | null }
  | { refused: "held_by_other"; by: string }
  | { refused: "already_delivered" | "maybe_sent" | "has_reply" | "no_reply" | "window_closed" | "opted_out" };

export type StaffOutcome<T extends object = object> = ({ ok: true } & T) | ({ ok: false } & Refused);

const NOT_FOUND = { ok: false, refused: "item_not_found" } as const;

/** The item locked for an action, with what decides it. */
async function lockItem(tx: Tx, id: string) {
  const [letter] = await tx.$queryRaw<{ id: string; state: string; replyId: string | null; conversationId: string; actedBy: string | null }[]>`
    SELECT id, state::text AS state, reply_id AS "replyId", conversation_id AS "conversationId", acted_by AS "actedBy"
    FROM dead_letters WHERE id = ${id}::uuid FOR UPDATE`;
  return letter;
}

/**
 * The locked item, if `actor` may act on it: a refusal when it does not exist or someone else
 * is answering it; otherwise the actor answers it from now.
 */
async function takeItem(tx: Tx, id: string, actor: string, now: Date) {
  const letter = await lockItem(tx, id);
  if (!letter) return NOT_FOUND;
  const holder = await otherAnswering(tx, [id], actor, now);
  if (holder) return { ok: false, refused: "held_by_other", by: holder } as const;
  await answerFromNow(tx, id, actor, now);
  return { ok: true, letter } as const;
}

/** Who else answers one of `itemIds` now, if anyone (the first to have started). */
async function otherAnswering(tx: Tx, itemIds: string[], actor: string, now: Date): Promise<string | undefined> {
  if (itemIds.length === 0) return undefined;
  const since = new Date(now.getTime() - PRESENCE_TTL_MS);
  const [holder] = await tx.$queryRaw<{ actor: string }[]>`
    SELECT actor FROM staff_presence
    WHERE dead_letter_id = ANY(${itemIds}::uuid[]) AND actor <> ${actor} AND answering_at IS NOT NULL AND seen_at > ${since}::timestamptz
    ORDER BY answering_at LIMIT 1`;
  return holder?.actor;
}

/** The actor has the item open and answers it from `now` (an action, or a take-over). */
async function answerFromNow(tx: Tx, itemId: string, actor: string, now: Date): Promise<void> {
  await tx.$executeRaw`
    INSERT INTO staff_presence (dead_letter_id, actor, seen_at, answering_at) VALUES (${itemId}::uuid, ${actor}, ${now}::timestamptz, ${now}::timestamptz)
    ON CONFLICT (dead_letter_id, actor) DO UPDATE SET seen_at = EXCLUDED.seen_at, answering_at = EXCLUDED.answering_at`;
}

/** An item no longer open: who handled it, read under the lock, so a concurrent winner is seen. */
const alreadyHandled = (letter: { state: string; actedBy: string | null }) =>
  ({ ok: false, refused: "already_handled", state: letter.state, by: letter.actedBy }) as const;

export interface ResendInput {
  text?: string | undefined;
  regenerate?: boolean;
  template?: ChosenTemplate | undefined;
  confirmMaybeSent?: boolean | undefined;
  actor: string;
}

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
export async function resendDeadLetter(db: Db, id: string, input: ResendInput, now: Date): Promise<StaffOutcome<{ conversationId: string }>> {
  return db.$transaction(async (tx) => {
    const taken = await takeItem(tx, id, input.actor, now);
    if (!taken.ok) return taken;
    const { letter } = taken;
    if (letter.state !== "open") return alreadyHandled(letter);
    if (!letter.replyId) return { ok: false, refused: "no_reply" } as const;
    const [reply] = await tx.$queryRaw<{ id: string; text: string | null }[]>`SELECT id, text FROM replies WHERE id = ${letter.replyId}::uuid FOR UPDATE`;
    if (!reply) return NOT_FOUND;
    const parts = await tx.outboundMessage.findMany({ where: { replyId: reply.id } });
    if (parts.length > 0 && parts.every(delivered)) return { ok: false, refused: "already_delivered" } as const;
    const uncertain = parts.some(maybeSent);
    if (uncertain && !input.confirmMaybeSent) return { ok: false, refused: "maybe_sent" } as const;
    await tx.deadLetter.update({ where: { id }, data: { state: "resent", actedBy: input.actor, actedAt: now } });
    await fenceOff(tx, letter.conversationId);
    await reopenForResend(tx, reply, input, now);
    await tx.deadLetterAction.create({
      data: { deadLetterId: id, actor: input.actor, action: resendAction(input), createdAt: now, ...resendDetail(input, uncertain) },
    });
    return { ok: true, conversationId: letter.conversationId } as const;
  });
}

const resendAction = (input: ResendInput) =>
  input.regenerate ? "regenerate" : input.template ? "resend_template" : input.text !== undefined ? "resend_edited" : "resend";

/** What the item's history keeps of a resend: the person's words or template, and a maybe-sent reply they chose to send again. */
function resendDetail(input: ResendInput, uncertain: boolean): { detail?: Prisma.InputJsonValue } {
  if (input.text === undefined && !input.template && !uncertain) return {};
  return {
    detail: {
      ...(input.text !== undefined ? { text: input.text } : {}),
      ...(input.template ? templateDetail(input.template) : {}),
      ...(uncertain ? { maybeSentConfirmed: true } : {}),
    },
  };
}

const templateDetail = (template: ChosenTemplate) => ({
  template: template.name,
  language: template.language,
  parameters: [...template.parameters],
  text: template.text,
});

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
): Promise<StaffOutcome<{ conversationId: string; replyId: string }>> {
  return db.$transaction(async (tx) => {
    const taken = await takeItem(tx, id, input.actor, now);
    if (!taken.ok) return taken;
    const { letter } = taken;
    if (letter.state !== "open") return alreadyHandled(letter);
    if (letter.replyId) return { ok: false, refused: "has_reply" } as const;
    const [conversation] = await tx.$queryRaw<{ lastInboundAt: Date | null; optedOut: boolean }[]>`
      SELECT last_inbound_at AS "lastInboundAt", opted_out_at IS NOT NULL AS "optedOut"
      FROM conversations WHERE id = ${letter.conversationId}::uuid FOR UPDATE`;
    if (!conversation) return NOT_FOUND;
    if (conversation.optedOut) return { ok: false, refused: "opted_out" } as const;
    if ("text" in input && !windowOpen(conversation.lastInboundAt, now)) return { ok: false, refused: "window_closed" } as const;
    await tx.$executeRaw`
      UPDATE conversations SET paused_until = ${PAUSED_INDEFINITELY}::timestamptz, paused_by = ${input.actor}, updated_at = ${now}::timestamptz
      WHERE id = ${letter.conversationId}::uuid`;
    const replyId = await writeStaffReply(tx, letter.conversationId, "template" in input ? { template: input.template } : { text: input.text }, now);
    const detail = "template" in input ? { replyId, ...templateDetail(input.template) } : { replyId, text: input.text };
    await tx.deadLetterAction.create({ data: { deadLetterId: id, actor: input.actor, action: "staff_reply", detail, createdAt: now } });
    return { ok: true, conversationId: letter.conversationId, replyId } as const;
  });
}

/**
 * open → resolved: the person gives the conversation back to the bot (issue 21), which answers
 * the customer's next message with the person's words in its history. The same as resuming
 * the bot for the conversation (resumeConversation), reached from the item.
 */
export async function giveBackToBot(db: Db, id: string, actor: string, now: Date): Promise<StaffOutcome<{ conversationId: string }>> {
  return db.$transaction(async (tx) => {
    const taken = await takeItem(tx, id, actor, now);
    if (!taken.ok) return taken;
    const { letter } = taken;
    if (letter.state !== "open") return alreadyHandled(letter);
    if (letter.replyId) return { ok: false, refused: "has_reply" } as const;
    await resumeIn(tx, letter.conversationId, actor, now);
    return { ok: true, conversationId: letter.conversationId } as const;
  });
}

/** open → discarded, with an optional note. */
export async function discardDeadLetter(db: Db, id: string, input: { note?: string | undefined; actor: string }, now: Date): Promise<StaffOutcome> {
  return db.$transaction(async (tx) => {
    const taken = await takeItem(tx, id, input.actor, now);
    if (!taken.ok) return taken;
    if (taken.letter.state !== "open") return alreadyHandled(taken.letter);
    await tx.deadLetter.update({ where: { id }, data: { state: "discarded", actedBy: input.actor, actedAt: now, note: input.note ?? null } });
    await tx.deadLetterAction.create({
      data: { deadLetterId: id, actor: input.actor, action: "discard", createdAt: now, ...(input.note ? { detail: { note: input.note } } : {}) },
    });
    return { ok: true } as const;
  });
}

/** Human handoff: the bot stops answering the conversation until `until` (its messages are still stored); in its open items' history. */
export async function pauseConversation(db: Db, change: { conversationId: string; until: Date; actor: string }, now: Date): Promise<StaffOutcome> {
  return db.$transaction(async (tx) => {
    const paused = await tx.$executeRaw`
      UPDATE conversations SET paused_until = ${change.until}::timestamptz, paused_by = ${change.actor}, updated_at = ${now}::timestamptz
      WHERE id = ${change.conversationId}::uuid`;
    if (paused === 0) return { ok: false, refused: "conversation_not_found" } as const;
    const until = change.until.getTime() === PAUSED_INDEFINITELY.getTime() ? null : change.until.toISOString();
    await auditOpenItems(tx, change.conversationId, { actor: change.actor, action: "pause_bot", detail: { until } }, now);
    return { ok: true } as const;
  });
}

/**
 * The bot answers again (whoever paused it); nobody waits for a person any more (resumeIn).
 * Refused while someone else answers one of the conversation's open items: resuming would
 * resolve the customer they are writing to.
 */
export async function resumeConversation(db: Db, change: { conversationId: string; actor: string }, now: Date): Promise<StaffOutcome> {
  return db.$transaction(async (tx) => {
    const open = await tx.$queryRaw<{ id: string }[]>`
      SELECT id FROM dead_letters WHERE conversation_id = ${change.conversationId}::uuid AND state = 'open' ORDER BY id FOR UPDATE`;
    const holder = await otherAnswering(
      tx,
      open.map((item) => item.id),
      change.actor,
      now,
    );
    if (holder) return { ok: false, refused: "held_by_other", by: holder } as const;
    return (await resumeIn(tx, change.conversationId, change.actor, now))
      ? ({ ok: true } as const)
      : ({ ok: false, refused: "conversation_not_found" } as const);
  });
}

export interface Viewer {
  actor: string;
  seenAt: Date;
  answering: boolean;
}

/**
 * The actor has the item open (their page says so every PRESENCE_BEAT_MS), `answering` once
 * they have started a reply there: who else has it open, the one answering first. Answering is
 * claimed only while nobody else answers (a page that was taken over keeps saying it is
 * answering: that must not take the item back), and kept until the page leaves. Pages gone
 * quiet leave, so the table holds only the pages open now. Null for an unknown item.
 */
export async function sayPresence(db: Db, id: string, viewer: { actor: string; answering: boolean }, now: Date): Promise<Viewer[] | null> {
  const since = new Date(now.getTime() - PRESENCE_TTL_MS);
  return db.$transaction(async (tx) => {
    const [item] = await tx.$queryRaw<{ id: string }[]>`SELECT id FROM dead_letters WHERE id = ${id}::uuid`;
    if (!item) return null;
    await tx.$executeRaw`DELETE FROM staff_presence WHERE dead_letter_id = ${id}::uuid AND seen_at <= ${since}::timestamptz`;
    const claim = viewer.answering ? now : null;
    await tx.$executeRaw`
      INSERT INTO staff_presence (dead_letter_id, actor, seen_at, answering_at)
      SELECT ${id}::uuid, ${viewer.actor}, ${now}::timestamptz,
             CASE WHEN NOT EXISTS (
               SELECT 1 FROM staff_presence o WHERE o.dead_letter_id = ${id}::uuid AND o.actor <> ${viewer.actor}
                 AND o.answering_at IS NOT NULL AND o.seen_at > ${since}::timestamptz) THEN ${claim}::timestamptz END
      ON CONFLICT (dead_letter_id, actor) DO UPDATE SET seen_at = EXCLUDED.seen_at,
        answering_at = COALESCE(staff_presence.answering_at, EXCLUDED.answering_at)`;
    return tx.$queryRaw<Viewer[]>`
      SELECT actor, seen_at AS "seenAt", answering_at IS NOT NULL AS answering FROM staff_presence
      WHERE dead_letter_id = ${id}::uuid AND actor <> ${viewer.actor}
      ORDER BY answering_at NULLS LAST, actor`;
  });
}

/** The actor has left the item: they no longer have it open, nor answer it. */
export async function leaveItem(db: Db, id: string, actor: string): Promise<void> {
  await db.$executeRaw`DELETE FROM staff_presence WHERE dead_letter_id = ${id}::uuid AND actor = ${actor}`;
}

/**
 * The actor answers the item from now on: the others answering it stop (they are told when
 * they act, or by their page's next beat), and the item's history records it. Returns whom it
 * was taken from ("" when nobody), or null when there is no such item.
 */
export async function takeOver(db: Db, itemId: string, actor: string, now: Date): Promise<string | null> {
  return db.$transaction(async (tx) => {
    if (!(await lockItem(tx, itemId))) return null;
    const since = new Date(now.getTime() - PRESENCE_TTL_MS);
    const previous = await tx.$queryRaw<{ actor: string }[]>`
      UPDATE staff_presence SET answering_at = NULL
      WHERE dead_letter_id = ${itemId}::uuid AND actor <> ${actor} AND answering_at IS NOT NULL AND seen_at > ${since}::timestamptz
      RETURNING actor`;
    await answerFromNow(tx, itemId, actor, now);
    const from = previous.map((p) => p.actor).join(", ");
    await tx.deadLetterAction.create({ data: { deadLetterId: itemId, actor, action: "take_over", detail: from ? { from } : {}, createdAt: now } });
    return from;
  });
}
