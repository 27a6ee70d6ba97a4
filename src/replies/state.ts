import type { GeneratedReply } from "../ai/claude.ts";
import { type Db, isUniqueViolation } from "../db/client.ts";
import { FencedOut } from "../errors.ts";
import type { Prisma, Reply } from "../generated/prisma/client.ts";
import { PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { type PendingMessage, type PlanSettings, planNextAnswer } from "../messages/plan.ts";
import { splitForWhatsApp } from "./split.ts";

/**
 * The reply's state machine, in one file: every change to a reply or to one of its parts
 * (the WhatsApp messages it is sent as) is one of these functions, each one statement or one
 * transaction, the way BullMQ keeps each atomic change of a job in one named script.
 *
 *   conversation: taken by each reply job run (reply_fence + 1); a run whose fence is no
 *                 longer current was overtaken (it stalled past its lock) and may neither
 *                 write nor send (law 8)
 *   reply:  generating ─storeDraft─▶ ready ─markReplySent─▶ sent
 *           any ─(dead letter, src/dlq)─▶ dead ─reopenForResend─▶ ready | generating
 *   part:   pending ─markSending─▶ sending ─markAccepted─▶ accepted
 *           sending ─markRefused─▶ pending          (Graph's error body: Meta did not take it)
 *           sending ─markSending, after resend_after─▶ sending   (law 5's window: no status came)
 *           sending ─reopenForResend─▶ unconfirmed  (a person chose not to wait; kept for its status)
 *   A part that is sending or unconfirmed is never deleted or renumbered: a late status webhook
 *   must still find it by the id we sent in biz_opaque_callback_data.
 */

type Tx = Prisma.TransactionClient;

/** A reply job run's hold on its conversation, valid while `fence` is the conversation's current one. */
export interface Lease {
  conversationId: string;
  fence: bigint;
}

/** What the reply path needs of a conversation, read as it was taken. */
export interface ConversationView {
  id: string;
  phoneNumberId: string;
  /** The customer's phone number, when Meta has shared it. */
  waId: string | null;
  /** The customer's BSUID (or parent BSUID), when Meta has given one. */
  userId: string | null;
  lastInboundAt: Date | null;
}

export type Begun =
  | { kind: "no_conversation" }
  | { kind: "nothing_to_answer" }
  | { kind: "debounce"; untilMs: number }
  | { kind: "reply"; lease: Lease; conversation: ConversationView; reply: Reply };

export interface BeginSettings extends PlanSettings {
  /** A burst is answered once: wait until the newest message is this old... */
  debounceMs: number;
  /** ...but never hold the oldest one longer than this. */
  debounceMaxMs: number;
  /** Opens the staff item of a customer's request for a person, inside the same transaction. */
  openHandoff: (tx: Tx, conversationId: string, wamid: string) => Promise<void>;
}

/**
 * The locked pass that starts every reply job run: takes the conversation (raising its fence,
 * which locks the row until the pass commits), then picks the reply to work on, the oldest
 * one not finished, or plans the next answer from the unanswered messages in order (skips,
 * opt-out, pause and handoff included) and binds them to a new reply.
 */
export async function beginReply(db: Db, conversationId: string, settings: BeginSettings, now = Date.now()): Promise<Begun> {
  return db.$transaction(async (tx) => {
    const [taken] = await tx.$queryRaw<(ConversationView & { fence: bigint; optedOutAt: Date | null; pausedUntil: Date | null })[]>`
      UPDATE conversations c SET reply_fence = c.reply_fence + 1
      FROM contacts ct
      WHERE c.id = ${conversationId}::uuid AND ct.id = c.contact_id
      RETURNING c.id, c.reply_fence AS fence, c.phone_number_id AS "phoneNumberId", ct.wa_id AS "waId",
                COALESCE(ct.user_id, ct.parent_user_id) AS "userId",
                c.last_inbound_at AS "lastInboundAt", c.opted_out_at AS "optedOutAt", c.paused_until AS "pausedUntil"`;
    if (!taken) return { kind: "no_conversation" };
    const lease = { conversationId, fence: taken.fence };
    const conversation: ConversationView = {
      id: taken.id,
      phoneNumberId: taken.phoneNumberId,
      waId: taken.waId,
      userId: taken.userId,
      lastInboundAt: taken.lastInboundAt,
    };

    const unfinished = await tx.reply.findFirst({ where: { conversationId, state: { in: ["generating", "ready"] } }, orderBy: { createdAt: "asc" } });
    if (unfinished) return { kind: "reply", lease, conversation, reply: unfinished };

    const messages = await tx.inboundMessage.findMany({
      where: { conversationId, replyId: null, skipReason: null },
      // Meta's timestamps have one-second resolution; the order the webhook received them in
      // breaks the ties (inbound jobs store them concurrently, so storage order would not).
      orderBy: [{ sentAt: "asc" }, { arrival: { sort: "asc", nulls: "first" } }, { createdAt: "asc" }],
      select: { id: true, wamid: true, text: true, cannedText: true, control: true, createdAt: true },
    });
    if (messages.length === 0) return { kind: "nothing_to_answer" };
    const newest = Math.max(...messages.map((m) => m.createdAt.getTime()));
    const oldest = Math.min(...messages.map((m) => m.createdAt.getTime()));
    const quietAt = Math.min(newest + settings.debounceMs, oldest + settings.debounceMaxMs);
    if (quietAt > now) return { kind: "debounce", untilMs: quietAt };

    const plan = planNextAnswer(messages as PendingMessage[], {
      optedOut: taken.optedOutAt !== null,
      paused: taken.pausedUntil !== null && taken.pausedUntil.getTime() > now,
    }, settings);
    const reasons = new Map<string, string[]>();
    for (const skip of plan.skips) reasons.set(skip.reason, [...(reasons.get(skip.reason) ?? []), skip.id]);
    for (const [skipReason, ids] of reasons) {
      await tx.inboundMessage.updateMany({ where: { id: { in: ids }, replyId: null, skipReason: null }, data: { skipReason } });
    }
    if (plan.effects.optedOut !== undefined) {
      await tx.conversation.update({ where: { id: conversationId }, data: { optedOutAt: plan.effects.optedOut ? new Date(now) : null } });
    }
    if (plan.effects.handoffWamid) {
      await tx.conversation.update({ where: { id: conversationId }, data: { pausedUntil: PAUSED_INDEFINITELY, pausedBy: "customer" } });
      await settings.openHandoff(tx, conversationId, plan.effects.handoffWamid);
    }
    if (!plan.answer) return { kind: "nothing_to_answer" };

    // A configured answer is ready at once: no Claude call.
    const reply = await tx.reply.create({
      data:
        plan.answer.kind === "canned"
          ? {
              conversationId,
              kind: "canned",
              state: "ready",
              text: plan.answer.text,
              parts: { create: splitForWhatsApp(plan.answer.text).map((text, seq) => ({ seq, text })) },
            }
          : { conversationId },
    });
    const bound = await tx.inboundMessage.updateMany({
      where: { id: { in: plan.answer.messageIds }, replyId: null, skipReason: null },
      data: { replyId: reply.id },
    });
    if (bound.count !== plan.answer.messageIds.length) throw new Error(`conversation ${conversationId}: messages were bound concurrently`);
    return { kind: "reply", lease, conversation, reply };
  });
}

/**
 * Inside a transaction: proves the lease still holds and keeps it until commit (FOR SHARE
 * waits for a takeover in flight, then sees it). Returns the conversation's latest inbound
 * time, for the 24-hour window.
 */
export async function assertLease(tx: Tx, lease: Lease): Promise<{ lastInboundAt: Date | null }> {
  const [held] = await tx.$queryRaw<{ lastInboundAt: Date | null }[]>`
    SELECT last_inbound_at AS "lastInboundAt" FROM conversations
    WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE`;
  if (!held) throw new FencedOut(`conversation ${lease.conversationId} was taken over by another worker`);
  return held;
}

/**
 * generating → ready: Claude's answer and its parts, stored before anything is sent (law 4).
 * Without a lease (the reconciler salvaging a draft a failed job kept) it still cannot clobber
 * anything: only a reply still generating takes it.
 */
export async function storeDraft(db: Db, lease: Lease | null, replyId: string, draft: GeneratedReply): Promise<{ lastInboundAt: Date | null }> {
  return db.$transaction(async (tx) => {
    const held = lease ? await assertLease(tx, lease) : { lastInboundAt: null };
    const updated = await tx.reply.updateMany({
      where: { id: replyId, state: "generating" },
      data: {
        state: "ready",
        text: draft.text,
        model: draft.model,
        inputTokens: draft.inputTokens,
        outputTokens: draft.outputTokens,
        cacheReadTokens: draft.cacheReadTokens,
        cacheCreationTokens: draft.cacheCreationTokens,
      },
    });
    if (updated.count === 1) await appendParts(tx, replyId, splitForWhatsApp(draft.text).map((text) => ({ text })));
    return held;
  });
}

/**
 * Adds parts after any the reply already has: a part Meta accepted and later reported failed
 * stays as history, so new parts never reuse its number.
 */
async function appendParts(tx: Tx, replyId: string, parts: { text: string; template?: string | null }[]): Promise<void> {
  if (parts.length === 0) return;
  const last = await tx.outboundMessage.aggregate({ where: { replyId }, _max: { seq: true } });
  const first = (last._max.seq ?? -1) + 1;
  await tx.outboundMessage.createMany({
    data: parts.map((part, i) => ({ replyId, seq: first + i, text: part.text, template: part.template ?? null })),
  });
}

/** The parts still to send, in order, with the first part's number (only it may quote). */
export async function unsentParts(db: Db, replyId: string) {
  const [parts, first] = await Promise.all([
    db.outboundMessage.findMany({ where: { replyId, sendState: { in: ["pending", "sending"] } }, orderBy: { seq: "asc" } }),
    db.outboundMessage.findFirst({ where: { replyId }, orderBy: { seq: "asc" }, select: { seq: true } }),
  ]);
  return { parts, firstSeq: first?.seq };
}

/**
 * pending → sending, or a maybe-sent part whose wait is over → sending again (law 5's window):
 * only for the lease holder. From now until `resendAfterMs` has passed nobody sends it again,
 * so that a send Meta took is confirmed by its status webhook first. Returns the attempt's
 * number, or null when the part was not this run's to send.
 */
export async function markSending(db: Db, lease: Lease, partId: string, resendAfterMs: number): Promise<number | null> {
  const [marked] = await db.$queryRaw<{ attempt: number }[]>`
    UPDATE outbound_messages
    SET send_state = 'sending', send_attempt = send_attempt + 1,
        resend_after = now() + (${resendAfterMs}::double precision * interval '1 millisecond')
    WHERE id = ${partId}::uuid
      AND (send_state = 'pending' OR (send_state = 'sending' AND wamid IS NULL AND resend_after <= now()))
      AND EXISTS (SELECT 1 FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE)
    RETURNING send_attempt AS attempt`;
  return marked?.attempt ?? null;
}

/** Why markSending declined: the part's state now, and whether the lease still holds. */
export async function partNow(db: Db, lease: Lease, partId: string) {
  const [row] = await db.$queryRaw<{ sendState: string; resendAfter: Date | null; held: boolean }[]>`
    SELECT p.send_state::text AS "sendState", p.resend_after AS "resendAfter", (c.reply_fence = ${lease.fence}) AS held
    FROM outbound_messages p JOIN replies r ON r.id = p.reply_id JOIN conversations c ON c.id = r.conversation_id
    WHERE p.id = ${partId}::uuid`;
  if (!row) throw new Error(`part ${partId} vanished`);
  return row;
}

/**
 * → accepted with Meta's wamid: Meta's answer to our send, or a status webhook that carried our
 * part id back (biz_opaque_callback_data). A fact, so it needs no lease: it records what
 * happened even when the run that sent it has been overtaken. True when it changed the part.
 */
export async function markAccepted(db: Db, partId: string, wamid: string): Promise<boolean> {
  const changed = await db.$executeRaw`
    UPDATE outbound_messages SET send_state = 'accepted', wamid = ${wamid}, accepted_at = now()
    WHERE id = ${partId}::uuid AND wamid IS NULL`;
  return changed > 0;
}

/** sending → pending: Meta refused this attempt with Graph's error body, so it is safe to send again. */
export async function markRefused(db: Db, partId: string, attempt: number): Promise<void> {
  await db.$executeRaw`
    UPDATE outbound_messages SET send_state = 'pending'
    WHERE id = ${partId}::uuid AND send_state = 'sending' AND send_attempt = ${attempt} AND wamid IS NULL`;
}

/** ready → sent, once every part is accepted (a "failed" status may have dead-lettered it meanwhile). */
export async function markReplySent(db: Db, replyId: string): Promise<boolean> {
  const changed = await db.$executeRaw`
    UPDATE replies SET state = 'sent', sent_at = now(), updated_at = now()
    WHERE id = ${replyId}::uuid AND state = 'ready'
      AND NOT EXISTS (SELECT 1 FROM outbound_messages WHERE reply_id = ${replyId}::uuid AND send_state IN ('pending', 'sending'))`;
  return changed > 0;
}

/**
 * Past the 24-hour window only an approved template reaches the customer: it replaces what
 * was never sent (pending parts). A maybe-sent free-form part is never deleted (law 5): once
 * its wait for a status is over it becomes `unconfirmed`, since it can no longer be sent as
 * free text; until then it stays `sending`, and the template waits behind it. Once in place
 * the template is not added again.
 */
export async function replaceUnsentWithTemplate(db: Db, lease: Lease, replyId: string, template: { name: string; language: string }): Promise<void> {
  await db.$transaction(async (tx) => {
    await assertLease(tx, lease);
    await tx.outboundMessage.deleteMany({ where: { replyId, sendState: "pending", NOT: { template: template.name } } });
    await tx.$executeRaw`
      UPDATE outbound_messages SET send_state = 'unconfirmed'
      WHERE reply_id = ${replyId}::uuid AND send_state = 'sending' AND template IS NULL AND wamid IS NULL AND resend_after <= now()`;
    const live = await tx.outboundMessage.count({
      where: { replyId, template: template.name, sendState: { not: "unconfirmed" }, OR: [{ status: null }, { status: { not: "failed" } }] },
    });
    const text = `[Template "${template.name}" (${template.language}): the 24-hour window had closed]`;
    if (live === 0) await appendParts(tx, replyId, [{ text, template: template.name }]);
    await tx.reply.update({ where: { id: replyId }, data: { state: "ready", text } });
  });
}

/** Delivery receipts only move forward (sent < delivered < read; failed is terminal). True when it moved. */
export async function recordStatus(db: Db, partId: string, status: { status: string; rank: number; at: Date }): Promise<boolean> {
  const advanced = await db.outboundMessage.updateMany({
    where: { id: partId, statusRank: { lt: status.rank } },
    data: { status: status.status, statusRank: status.rank, statusAt: status.at },
  });
  return advanced.count > 0;
}

type PartRow = { sendState: string; status: string | null; wamid: string | null };

/** Meta may have delivered it: we sent it and never learned the outcome (law 5). */
export const maybeSent = (part: PartRow) => (part.sendState === "sending" || part.sendState === "unconfirmed") && part.wamid === null;
/** Meta took it and has not reported it failed. */
export const delivered = (part: PartRow) => part.sendState === "accepted" && part.status !== "failed";

/**
 * dead → ready (or generating, to ask Claude again): a person's resend. What never reached the
 * customer is sent anew, as it was (a template stays a template) or as the person's text;
 * a maybe-sent part becomes `unconfirmed`, kept so its late status still finds it.
 */
export async function reopenForResend(
  tx: Tx,
  reply: Pick<Reply, "id" | "text">,
  choice: { text?: string | undefined; regenerate?: boolean | undefined },
): Promise<void> {
  const parts = await tx.outboundMessage.findMany({ where: { replyId: reply.id }, orderBy: { seq: "asc" } });
  const again = choice.regenerate
    ? []
    : choice.text !== undefined
      ? splitForWhatsApp(choice.text).map((text) => ({ text }))
      : parts.filter((p) => !delivered(p)).map((p) => ({ text: p.text, template: p.template }));
  await tx.outboundMessage.updateMany({ where: { replyId: reply.id, sendState: "sending" }, data: { sendState: "unconfirmed" } });
  await tx.outboundMessage.deleteMany({ where: { replyId: reply.id, sendState: "pending" } });
  await appendParts(tx, reply.id, again);
  // Regenerating drops the draft: the reply job then asks Claude again (an explicit, paid choice).
  const text = choice.regenerate ? null : (choice.text ?? reply.text);
  await tx.reply.update({ where: { id: reply.id }, data: { text, state: text ? "ready" : "generating" } });
}

/**
 * A person answered from the WhatsApp Business app on the same number (an echo, WHATSAPP.md
 * §10): the business's side of the conversation, already delivered, so Claude's history shows
 * it. False when this echo was recorded before (a redelivery).
 */
export async function recordBusinessReply(db: Db, conversationId: string, echo: { wamid: string; text: string; at: Date }): Promise<boolean> {
  try {
    await db.reply.create({
      data: {
        conversationId,
        kind: "human",
        state: "sent",
        text: echo.text,
        sentAt: echo.at,
        parts: { create: [{ seq: 0, text: echo.text, sendState: "accepted", wamid: echo.wamid, acceptedAt: echo.at }] },
      },
    });
    return true;
  } catch (error) {
    if (isUniqueViolation(error)) return false;
    throw error;
  }
}
