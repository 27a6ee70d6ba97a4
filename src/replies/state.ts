import { randomUUID } from "node:crypto";
import type { GeneratedReply } from "../ai/claude.ts";
import { type Db, isUniqueViolation, Prisma } from "../db/client.ts";
import { FencedOut } from "../errors.ts";
import type { Reply, ReplyState } from "../generated/prisma/client.ts";
import { type Control, PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { type PendingMessage, type Plan, type PlanSettings, planNextAnswer } from "../messages/plan.ts";
import { type HistoryJson, type HistoryRows, historyColumns, historyOf } from "./history.ts";
import { splitForWhatsApp } from "./split.ts";

/**
 * The reply's state machine, in one file: every change to a reply or to one of its parts
 * (the WhatsApp messages it is sent as) is one of these functions, each one statement or one
 * transaction, the way BullMQ keeps each atomic change of a job in one named script. A text
 * message's answer takes five of them (takeConversation, bindAnswer, storeDraft, markSending,
 * markAccepted), each a single statement that also reads what the next step needs.
 *
 *   conversation: taken by each reply job run (reply_fence + 1); a run whose fence is no
 *                 longer current was overtaken (it stalled past its lock) and may neither
 *                 write nor send (law 8)
 *   messages: waiting ─bindAnswer─▶ bound to a reply | skipped with a reason (law 6)
 *   reply:  (bindAnswer) generating ─storeDraft─▶ ready ─markAccepted of its last part, or markReplySent─▶ sent
 *           (bindAnswer, a configured answer) ready
 *           any ─(dead letter, src/dlq)─▶ dead ─reopenForResend─▶ ready | generating
 *   part:   pending ─markSending─▶ sending ─markAccepted─▶ accepted
 *           sending ─markRefused─▶ pending          (Graph's error body: Meta did not take it)
 *           sending ─markSending, after resend_after─▶ sending   (law 5's window: no status came)
 *           sending ─reopenForResend─▶ unconfirmed  (a person chose not to wait; kept for its status)
 *   A part that is sending or unconfirmed is never deleted or renumbered: a late status webhook
 *   must still find it by the id we sent in biz_opaque_callback_data.
 *
 * The raw statements find their tables through the search path (src/db/client.ts).
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

/** A reply as the reply path reads it. */
export interface ReplyView {
  id: string;
  conversationId: string;
  state: ReplyState;
  kind: string;
  text: string | null;
}

/** A message as it waits for its answer. */
export interface WaitingMessage extends PendingMessage {
  payload: unknown;
  createdAt: Date;
}

/** A reply planned in this run, with everything read for it on the way: nothing is read twice. */
export interface Planned {
  /** The messages it answers, in the customer's order. */
  messages: WaitingMessage[];
  /** For Claude's answer: the conversation before these messages (src/replies/history.ts). */
  history: HistoryRows | undefined;
}

export type Begun =
  | { kind: "no_conversation" }
  | { kind: "nothing_to_answer" }
  | { kind: "debounce"; untilMs: number }
  | {
      kind: "reply";
      lease: Lease;
      conversation: ConversationView;
      reply: ReplyView;
      /** Set when the reply was planned in this run (not a retry of an unfinished one). */
      planned: Planned | undefined;
      /** More work waits after this reply: another unfinished reply, or messages this one does not answer. */
      more: boolean;
    };

export interface BeginSettings extends PlanSettings {
  /** A burst is answered once: wait until the newest message is this old... */
  debounceMs: number;
  /** ...but never hold the oldest one longer than this. */
  debounceMaxMs: number;
  /** How much history Claude is shown (HISTORY_MESSAGES). */
  historyMessages: number;
  /** Opens the staff item of a customer's request for a person, inside the same transaction. */
  openHandoff: (tx: Tx, conversationId: string, wamid: string) => Promise<void>;
}

/** Another run bound or skipped a message between our read and our bind: plan again from what is there now. */
const PLAN_ATTEMPTS = 3;

/**
 * Starts every reply job run: takes the conversation (raising its fence), then works on the
 * oldest reply not finished, or plans the next answer from the unanswered messages in order
 * (skips, opt-out, pause and handoff included) and binds them to a new reply. Two statements
 * on the text path: the take, which reads everything the plan needs, and the bind, which
 * only the fence's holder can make.
 */
export async function beginReply(db: Db, conversationId: string, settings: BeginSettings, now = Date.now()): Promise<Begun> {
  for (let attempt = 1; ; attempt++) {
    const taken = await takeConversation(db, conversationId);
    if (!taken) return { kind: "no_conversation" };
    const { lease, conversation, unfinished, pending } = taken;
    const [current, next] = unfinished;
    if (current) return { kind: "reply", lease, conversation, reply: current, planned: undefined, more: next !== undefined || pending.length > 0 };
    if (pending.length === 0) return { kind: "nothing_to_answer" };

    const newest = Math.max(...pending.map((m) => m.createdAt.getTime()));
    const oldest = Math.min(...pending.map((m) => m.createdAt.getTime()));
    const quietAt = Math.min(newest + settings.debounceMs, oldest + settings.debounceMaxMs);
    if (quietAt > now) return { kind: "debounce", untilMs: quietAt };

    const plan = planNextAnswer(pending, { optedOut: taken.optedOut, paused: taken.pausedUntil !== null && taken.pausedUntil.getTime() > now }, settings);
    const bound = plan.effects.handoffWamid
      ? await db.$transaction(async (tx) => {
          const made = await bindAnswer(tx, lease, plan, pending, settings.historyMessages);
          if (made.held) await settings.openHandoff(tx, conversationId, plan.effects.handoffWamid!);
          return made;
        })
      : await bindAnswer(db, lease, plan, pending, settings.historyMessages);
    if (!bound.held) throw new FencedOut(`conversation ${conversationId} was taken over while its answer was planned`);
    const used = plan.skips.length + (plan.answer?.messageIds.length ?? 0);
    if (!plan.answer) return { kind: "nothing_to_answer" };
    if (bound.reply) {
      const answered = new Set(plan.answer.messageIds);
      return {
        kind: "reply",
        lease,
        conversation,
        reply: bound.reply,
        planned: { messages: pending.filter((m) => answered.has(m.id)), history: bound.history },
        more: pending.length > used,
      };
    }
    if (attempt >= PLAN_ATTEMPTS) throw new Error(`conversation ${conversationId}: its messages kept changing while their answer was planned`);
  }
}

interface Taken {
  lease: Lease;
  conversation: ConversationView;
  optedOut: boolean;
  pausedUntil: Date | null;
  /** The two oldest replies not finished, oldest first. */
  unfinished: ReplyView[];
  /** The messages not answered nor skipped, in the customer's order. */
  pending: WaitingMessage[];
}

/**
 * Raises the conversation's fence (law 8: from now on only this run may bind, store or send
 * for it) and reads, in the same statement, what the run decides from.
 */
async function takeConversation(db: Db, conversationId: string): Promise<Taken | undefined> {
  const [row] = await db.$queryRaw<
    (ConversationView & { fence: bigint; optedOut: boolean; pausedUntil: Date | null; unfinished: ReplyJson[] | null; pending: WaitingJson[] | null })[]
  >`
    WITH taken AS (
      UPDATE conversations SET reply_fence = reply_fence + 1 WHERE id = ${conversationId}::uuid
      RETURNING id, reply_fence, phone_number_id, contact_id, last_inbound_at, opted_out_at, paused_until
    )
    SELECT t.id, t.reply_fence AS fence, t.phone_number_id AS "phoneNumberId", ct.wa_id AS "waId",
           COALESCE(ct.user_id, ct.parent_user_id) AS "userId", t.last_inbound_at AS "lastInboundAt",
           t.opted_out_at IS NOT NULL AS "optedOut", t.paused_until AS "pausedUntil",
           (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.created_at) FROM (
              SELECT id, conversation_id, state, kind, text, created_at FROM replies
              WHERE conversation_id = t.id AND state IN ('generating', 'ready') ORDER BY created_at LIMIT 2) r) AS unfinished,
           -- Meta's timestamps have one-second resolution; the order the webhook received them in
           -- breaks the ties (inbound jobs store them concurrently, so storage order would not).
           (SELECT jsonb_agg(jsonb_build_object('id', m.id, 'wamid', m.wamid, 'text', m.text, 'cannedText', m.canned_text,
                     'control', m.control, 'payload', m.payload, 'createdAt', m.created_at)
                   ORDER BY m.sent_at, m.arrival NULLS FIRST, m.created_at)
              FROM inbound_messages m WHERE m.conversation_id = t.id AND m.reply_id IS NULL AND m.skip_reason IS NULL) AS pending
    FROM taken t JOIN contacts ct ON ct.id = t.contact_id`;
  if (!row) return undefined;
  return {
    lease: { conversationId, fence: row.fence },
    conversation: { id: row.id, phoneNumberId: row.phoneNumberId, waId: row.waId, userId: row.userId, lastInboundAt: row.lastInboundAt },
    optedOut: row.optedOut,
    pausedUntil: row.pausedUntil,
    unfinished: (row.unfinished ?? []).map(replyOf),
    pending: (row.pending ?? []).map((m) => ({ ...m, control: m.control as Control | null, createdAt: new Date(m.createdAt) })),
  };
}

type ReplyJson = { id: string; conversation_id: string; state: ReplyState; kind: string; text: string | null };
type WaitingJson = Omit<WaitingMessage, "createdAt" | "control"> & { createdAt: string; control: string | null };
const replyOf = (r: ReplyJson): ReplyView => ({ id: r.id, conversationId: r.conversation_id, state: r.state, kind: r.kind, text: r.text });

/**
 * Applies a plan, in one statement and only for the fence's holder (the conversation row is
 * locked until it commits): the skips with their reasons, what the controls change, and the
 * new reply with the messages it answers, all or none of them (a message another job skipped
 * meanwhile, such as a deletion, means planning again). A configured answer is ready at once,
 * with its parts; for Claude's, the history it will be shown is read in the same statement.
 */
async function bindAnswer(db: Db | Tx, lease: Lease, plan: Plan, pending: WaitingMessage[], historyMessages: number) {
  const answer = plan.answer;
  const ids = answer?.messageIds ?? [];
  const replyId = randomUUID();
  const canned = answer?.kind === "canned" ? answer.text : null;
  const parts = canned === null ? [] : splitForWhatsApp(canned);
  const newest = new Date(Math.max(0, ...pending.filter((m) => ids.includes(m.id)).map((m) => m.createdAt.getTime())));
  const optedOut = plan.effects.optedOut ?? null;
  const handoff = plan.effects.handoffWamid !== undefined;
  const history =
    answer?.kind === "ai"
      ? historyColumns(lease.conversationId, Prisma.sql`${newest}::timestamptz`, Prisma.sql`NOT (id = ANY(${ids}::uuid[]))`, historyMessages)
      : Prisma.sql`NULL AS earlier, NULL AS replies`;
  const [row] = await db.$queryRaw<{ held: boolean; made: ReplyJson | null; earlier: HistoryJson["earlier"]; replies: HistoryJson["replies"] }[]>`
    WITH fenced AS (
      SELECT id FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR UPDATE
    ),
    skipped AS (
      UPDATE inbound_messages m SET skip_reason = s.reason
      FROM fenced, unnest(${plan.skips.map((k) => k.id)}::uuid[], ${plan.skips.map((k) => k.reason)}::text[]) AS s(id, reason)
      WHERE m.id = s.id AND m.reply_id IS NULL AND m.skip_reason IS NULL
      RETURNING m.id
    ),
    controlled AS (
      UPDATE conversations c SET
        opted_out_at = CASE ${optedOut}::boolean WHEN TRUE THEN now() WHEN FALSE THEN NULL ELSE c.opted_out_at END,
        paused_until = CASE WHEN ${handoff} THEN ${PAUSED_INDEFINITELY}::timestamptz ELSE c.paused_until END,
        paused_by = CASE WHEN ${handoff} THEN 'customer' ELSE c.paused_by END,
        updated_at = now()
      FROM fenced WHERE c.id = fenced.id AND (${optedOut}::boolean IS NOT NULL OR ${handoff})
      RETURNING c.id
    ),
    answerable AS (
      SELECT m.id FROM inbound_messages m, fenced
      WHERE m.id = ANY(${ids}::uuid[]) AND m.reply_id IS NULL AND m.skip_reason IS NULL
      FOR UPDATE OF m
    ),
    made AS (
      INSERT INTO replies (id, conversation_id, kind, state, text, updated_at)
      SELECT ${replyId}::uuid, fenced.id, ${answer?.kind ?? "ai"}, ${canned === null ? "generating" : "ready"}::reply_state, ${canned}, now()
      FROM fenced WHERE ${ids.length} > 0 AND (SELECT count(*) FROM answerable) = ${ids.length}
      RETURNING id, conversation_id, state, kind, text
    ),
    parts AS (
      INSERT INTO outbound_messages (id, reply_id, seq, text)
      SELECT gen_random_uuid(), made.id, p.n - 1, p.text FROM made, unnest(${parts}::text[]) WITH ORDINALITY AS p(text, n)
    ),
    bound AS (
      UPDATE inbound_messages m SET reply_id = made.id FROM made, answerable a WHERE m.id = a.id RETURNING m.id
    )
    SELECT EXISTS (SELECT 1 FROM fenced) AS held, (SELECT to_jsonb(made) FROM made) AS made, ${history}`;
  if (!row) throw new Error("bindAnswer returned no row");
  return { held: row.held, reply: row.made ? replyOf(row.made) : undefined, history: row.made && answer?.kind === "ai" ? historyOf(row) : undefined };
}

/**
 * Inside a transaction: proves the lease still holds and keeps it until commit (FOR SHARE
 * waits for a takeover in flight, then sees it).
 */
export async function assertLease(tx: Tx, lease: Lease): Promise<void> {
  const [held] = await tx.$queryRaw<{ held: boolean }[]>`
    SELECT true AS held FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE`;
  if (!held) throw new FencedOut(`conversation ${lease.conversationId} was taken over by another worker`);
}

/** A part as the send loop reads it. */
export interface PartView {
  id: string;
  seq: number;
  text: string;
  template: string | null;
  sendState: "pending" | "sending" | "accepted" | "unconfirmed";
  resendAfter: Date | null;
}

/** What the send loop needs: the parts still to send, in order; the number of the reply's first part (only it may quote); what it quotes. */
export interface Outbox {
  parts: PartView[];
  firstSeq: number | undefined;
  /**
   * When the customer has written again since the messages this reply answers, the newest of
   * them, quoted so it is clear what the answer is about; otherwise nothing.
   */
  quote: string | undefined;
}

type OutboxJson = { parts: (Omit<PartView, "resendAfter"> & { resendAfter: string | null })[] | null; firstSeq: number | null; quote: string | null };
const outboxOf = (row: OutboxJson): Outbox => ({
  parts: (row.parts ?? []).map((p) => ({ ...p, resendAfter: p.resendAfter === null ? null : new Date(p.resendAfter) })),
  firstSeq: row.firstSeq ?? undefined,
  quote: row.quote ?? undefined,
});

const partJson = Prisma.sql`jsonb_build_object('id', p.id, 'seq', p.seq, 'text', p.text, 'template', p.template, 'sendState', p.send_state, 'resendAfter', p.resend_after)`;

/** By storage order: Meta's timestamps have one-second resolution, too coarse for a burst. */
const quoteOf = (replyId: string) => Prisma.sql`(
  SELECT a.wamid FROM (SELECT wamid, created_at, conversation_id FROM inbound_messages WHERE reply_id = ${replyId}::uuid ORDER BY created_at DESC LIMIT 1) a
  WHERE EXISTS (SELECT 1 FROM inbound_messages n WHERE n.conversation_id = a.conversation_id AND n.created_at > a.created_at)) AS quote`;

/**
 * generating → ready: Claude's answer and its parts, stored before anything is sent (law 4),
 * in one statement that also reads what sending needs. Without a lease (the reconciler
 * salvaging a draft a failed job kept) it still cannot clobber anything: only a reply still
 * generating takes it. Returns the conversation's latest inbound time, for the 24-hour window,
 * and the outbox (undefined when the reply was no longer generating).
 */
export async function storeDraft(
  db: Db,
  lease: Lease | null,
  replyId: string,
  draft: GeneratedReply,
): Promise<{ lastInboundAt: Date | null; outbox: Outbox | undefined }> {
  const held = lease
    ? Prisma.sql`SELECT last_inbound_at FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE`
    : Prisma.sql`SELECT c.last_inbound_at FROM conversations c JOIN replies r ON r.conversation_id = c.id WHERE r.id = ${replyId}::uuid`;
  const [row] = await db.$queryRaw<(OutboxJson & { held: boolean; stored: boolean; lastInboundAt: Date | null; firstBefore: number | null })[]>`
    WITH held AS (${held}),
    stored AS (
      UPDATE replies SET state = 'ready', text = ${draft.text}, model = ${draft.model}, input_tokens = ${draft.inputTokens}::int,
        output_tokens = ${draft.outputTokens}::int, cache_read_tokens = ${draft.cacheReadTokens ?? null}::int,
        cache_creation_tokens = ${draft.cacheCreationTokens ?? null}::int, updated_at = now()
      WHERE id = ${replyId}::uuid AND state = 'generating' AND EXISTS (SELECT 1 FROM held)
      RETURNING id
    ),
    before AS (SELECT min(seq) AS first, max(seq) AS last FROM outbound_messages WHERE reply_id = ${replyId}::uuid),
    p AS (
      -- After any part the reply already has: a part Meta accepted and later reported failed
      -- stays as history, so new parts never reuse its number.
      INSERT INTO outbound_messages (id, reply_id, seq, text)
      SELECT gen_random_uuid(), stored.id, COALESCE(before.last, -1) + t.n, t.text
      FROM stored, before, unnest(${splitForWhatsApp(draft.text)}::text[]) WITH ORDINALITY AS t(text, n)
      RETURNING id, seq, text, template, send_state, resend_after
    )
    SELECT EXISTS (SELECT 1 FROM held) AS held, (SELECT last_inbound_at FROM held) AS "lastInboundAt", EXISTS (SELECT 1 FROM stored) AS stored,
           (SELECT jsonb_agg(${partJson} ORDER BY p.seq) FROM p) AS parts, (SELECT first FROM before) AS "firstBefore", ${quoteOf(replyId)}`;
  if (!row?.held) throw new FencedOut(`conversation ${lease?.conversationId} was taken over by another worker`);
  if (!row.stored) return { lastInboundAt: row.lastInboundAt, outbox: undefined };
  const outbox = outboxOf(row);
  return { lastInboundAt: row.lastInboundAt, outbox: { ...outbox, firstSeq: row.firstBefore ?? outbox.parts[0]?.seq } };
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

/** The reply's outbox as it stands, for a run that did not just write it. */
export async function unsentParts(db: Db, replyId: string): Promise<Outbox> {
  const [row] = await db.$queryRaw<OutboxJson[]>`
    SELECT (SELECT jsonb_agg(${partJson} ORDER BY p.seq) FROM outbound_messages p WHERE p.reply_id = ${replyId}::uuid AND p.send_state IN ('pending', 'sending')) AS parts,
           (SELECT min(seq) FROM outbound_messages WHERE reply_id = ${replyId}::uuid) AS "firstSeq", ${quoteOf(replyId)}`;
  return outboxOf(row!);
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
 * happened even when the run that sent it has been overtaken. When it was the reply's last part
 * not yet accepted, the reply is sent (ready → sent) in the same statement, which also reads
 * when the webhook received the newest message it answers (epoch ms; for the metrics).
 */
export async function markAccepted(db: Db, partId: string, wamid: string): Promise<{ accepted: boolean; replySent: boolean; answersSinceMs: number | null }> {
  const [row] = await db.$queryRaw<{ accepted: boolean; replySent: boolean; answersSinceMs: number | null }[]>`
    WITH accepted AS (
      UPDATE outbound_messages SET send_state = 'accepted', wamid = ${wamid}, accepted_at = now()
      WHERE id = ${partId}::uuid AND wamid IS NULL
      RETURNING id, reply_id
    ),
    sent AS (
      UPDATE replies r SET state = 'sent', sent_at = now(), updated_at = now()
      FROM accepted a
      WHERE r.id = a.reply_id AND r.state = 'ready'
        AND NOT EXISTS (SELECT 1 FROM outbound_messages o WHERE o.reply_id = a.reply_id AND o.id <> a.id AND o.send_state IN ('pending', 'sending'))
      RETURNING r.id
    )
    SELECT EXISTS (SELECT 1 FROM accepted) AS accepted, EXISTS (SELECT 1 FROM sent) AS "replySent",
           -- arrival is the webhook's receipt in µs (absent on older rows: then when it was stored)
           (SELECT max(COALESCE(m.arrival / 1000.0, extract(epoch FROM m.created_at) * 1000))::float8
              FROM sent JOIN inbound_messages m ON m.reply_id = sent.id) AS "answersSinceMs"`;
  return row!;
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
