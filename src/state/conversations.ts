import { randomUUID } from "node:crypto";
import { type Db, Prisma } from "../db/client.ts";
import { execute, queryRows } from "../db/sql.ts";
import { FencedOut } from "../errors.ts";
import type { ReplyState } from "../generated/prisma/client.ts";
import { BUSINESS_APP, type Control, PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { type PendingMessage, type Plan, type PlanSettings, planNextAnswer } from "../messages/plan.ts";
import { splitForWhatsApp } from "../whatsapp/split.ts";
import type { Lease } from "./fence.ts";
import { type HistoryJson, type HistoryRows, historyColumns, historyOf } from "./history.ts";
import { AWAITING_WORDS } from "./messages.ts";

/**
 * A conversation (one customer on one business number) is the unit of ordering (law 8). Its
 * control columns change here only (README.md in this folder has the whole machine):
 *
 *   reply_fence    raised by each reply job run that takes the conversation (takeConversation),
 *                  and by changes made outside the reply job (fence.ts): a run whose fence is no
 *                  longer current was overtaken and may neither bind, write nor send
 *   opted_out_at   set and cleared by the customer's control words, in message order (bindAnswer)
 *   paused_until   set by a handoff word (bindAnswer), by staff (staff-actions.ts:
 *   paused_by      pauseConversation, resumeConversation, through resumeIn here) and by a
 *                  person answering from the WhatsApp Business app (pauseForPerson)
 *
 * and its messages' binding: waiting ─bindAnswer─▶ bound to a reply | skipped with a reason.
 */

type Tx = Prisma.TransactionClient;

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
  /** While generating: a Claude call for it may still answer until then (law 4; replies.ts). */
  generationDeadline: Date | null;
}

/** A message as it waits for its answer. */
export interface WaitingMessage extends PendingMessage {
  payload: unknown;
  createdAt: Date;
  /** A voice note whose words are not known yet (messages.ts, AWAITING_WORDS). */
  awaitingWords?: boolean;
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
  /** Voice notes to hear before the answer is planned: the run transcribes them, then begins again. */
  | { kind: "transcribe"; voiceNotes: { id: string; payload: unknown }[] }
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
  /** How long a Claude call for a reply bound now may take to start and answer (replies.ts, `generationDeadline`). */
  generationBudgetMs: number;
  /**
   * Opens the staff item of a customer waiting for a person, inside the same transaction: they
   * asked for one (`asked`), or wrote while the bot was paused for one (`waiting`: only when
   * the conversation has no open item, and not while a person answers from the Business app).
   */
  openHandoff: (tx: Tx, conversationId: string, wamid: string, why: "asked" | "waiting") => Promise<void>;
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
export async function beginReply(db: Db, conversationId: string, settings: BeginSettings, now: Date): Promise<Begun> {
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
    if (quietAt > now.getTime()) return { kind: "debounce", untilMs: quietAt };
    // Planned only once every voice note among them has its words, or its honest answer: the
    // plan then sees what each one is, and the bind checks each text as it was read.
    const voiceNotes = pending.filter((m) => m.awaitingWords).map((m) => ({ id: m.id, payload: m.payload }));
    if (voiceNotes.length > 0) return { kind: "transcribe", voiceNotes };

    const plan = planNextAnswer(
      pending,
      { optedOut: taken.optedOut, paused: taken.pausedUntil !== null && taken.pausedUntil.getTime() > now.getTime() },
      settings,
    );
    const bind = (tx: Db | Tx) => bindAnswer(tx, lease, plan, pending, settings, now);
    const { handoffWamid } = plan.effects;
    const waitingWamid = taken.pausedBy === BUSINESS_APP ? undefined : plan.effects.waitingWamid;
    const bound =
      handoffWamid || waitingWamid
        ? await db.$transaction(async (tx) => {
            const made = await bind(tx);
            if (made.held && handoffWamid) await settings.openHandoff(tx, conversationId, handoffWamid, "asked");
            if (made.held && waitingWamid) await settings.openHandoff(tx, conversationId, waitingWamid, "waiting");
            return made;
          })
        : await bind(db);
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
  pausedBy: string | null;
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
  const [row] = await queryRows<
    ConversationView & {
      fence: bigint;
      optedOut: boolean;
      pausedUntil: Date | null;
      pausedBy: string | null;
      unfinished: ReplyJson[] | null;
      pending: WaitingJson[] | null;
    }
  >(
    db,
    Prisma.sql`
    WITH taken AS (
      UPDATE conversations SET reply_fence = reply_fence + 1 WHERE id = ${conversationId}::uuid
      RETURNING id, reply_fence, phone_number_id, contact_id, last_inbound_at, opted_out_at, paused_until, paused_by
    )
    SELECT t.id, t.reply_fence AS fence, t.phone_number_id AS "phoneNumberId", ct.wa_id AS "waId",
           COALESCE(ct.user_id, ct.parent_user_id) AS "userId", t.last_inbound_at AS "lastInboundAt",
           t.opted_out_at IS NOT NULL AS "optedOut", t.paused_until AS "pausedUntil",
           t.paused_by AS "pausedBy",
           (SELECT jsonb_agg(to_jsonb(r) ORDER BY r.created_at) FROM (
              SELECT id, conversation_id, state, kind, text, generation_deadline, created_at FROM replies
              WHERE conversation_id = t.id AND state IN ('generating', 'ready') ORDER BY created_at LIMIT 2) r) AS unfinished,
           -- Meta's timestamps have one-second resolution; the order the webhook received them in
           -- breaks the ties (inbound jobs store them concurrently, so storage order would not).
           (SELECT jsonb_agg(jsonb_build_object('id', m.id, 'wamid', m.wamid, 'text', m.text, 'cannedText', m.canned_text,
                     'control', m.control, 'payload', m.payload, 'createdAt', m.created_at, 'awaitingWords', ${AWAITING_WORDS})
                   ORDER BY m.sent_at, m.arrival NULLS FIRST, m.created_at)
              FROM inbound_messages m WHERE m.conversation_id = t.id AND m.reply_id IS NULL AND m.skip_reason IS NULL) AS pending
    FROM taken t JOIN contacts ct ON ct.id = t.contact_id`,
  );
  if (!row) return undefined;
  return {
    lease: { conversationId, fence: row.fence },
    conversation: { id: row.id, phoneNumberId: row.phoneNumberId, waId: row.waId, userId: row.userId, lastInboundAt: row.lastInboundAt },
    optedOut: row.optedOut,
    pausedUntil: row.pausedUntil,
    pausedBy: row.pausedBy,
    unfinished: (row.unfinished ?? []).map(replyOf),
    pending: (row.pending ?? []).map((m) => ({ ...m, control: m.control as Control | null, createdAt: new Date(m.createdAt) })),
  };
}

type ReplyJson = {
  id: string;
  conversation_id: string;
  state: ReplyState;
  kind: string;
  text: string | null;
  generation_deadline?: string | null;
};
type WaitingJson = Omit<WaitingMessage, "createdAt" | "control"> & { createdAt: string; control: string | null };
const replyOf = (r: ReplyJson): ReplyView => ({
  id: r.id,
  conversationId: r.conversation_id,
  state: r.state,
  kind: r.kind,
  text: r.text,
  generationDeadline: r.generation_deadline ? new Date(r.generation_deadline) : null,
});

/**
 * Applies a plan, in one statement and only for the fence's holder (the conversation row is
 * locked until it commits): the skips with their reasons, what the controls change, and the
 * new reply with the messages it answers, all or none of them, each still as it was read (a
 * message another job skipped or edited meanwhile, a deletion or an edit, means planning
 * again). A configured answer is ready at once, with its parts; Claude's is generating, with
 * the deadline of the call this run makes next, and the history it will be shown is read in
 * the same statement.
 */
async function bindAnswer(db: Db | Tx, lease: Lease, plan: Plan, pending: WaitingMessage[], settings: BeginSettings, now: Date) {
  const answer = plan.answer;
  const ids = answer?.messageIds ?? [];
  const texts = ids.map((id) => pending.find((m) => m.id === id)?.text ?? null);
  const replyId = randomUUID();
  const canned = answer?.kind === "canned" ? answer.text : null;
  const parts = canned === null ? [] : splitForWhatsApp(canned);
  const deadline = answer?.kind === "ai" ? new Date(now.getTime() + settings.generationBudgetMs) : null;
  const newest = new Date(Math.max(0, ...pending.filter((m) => ids.includes(m.id)).map((m) => m.createdAt.getTime())));
  const optedOut = plan.effects.optedOut ?? null;
  const handoff = plan.effects.handoffWamid !== undefined;
  const history =
    answer?.kind === "ai"
      ? historyColumns(lease.conversationId, Prisma.sql`${newest}::timestamptz`, Prisma.sql`NOT (id = ANY(${ids}::uuid[]))`, settings.historyMessages)
      : Prisma.sql`NULL AS earlier, NULL AS replies`;
  const [row] = await queryRows<{ held: boolean; made: ReplyJson | null; earlier: HistoryJson["earlier"]; replies: HistoryJson["replies"] }>(
    db,
    Prisma.sql`
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
        opted_out_at = CASE ${optedOut}::boolean WHEN TRUE THEN ${now}::timestamptz WHEN FALSE THEN NULL ELSE c.opted_out_at END,
        paused_until = CASE WHEN ${handoff} THEN ${PAUSED_INDEFINITELY}::timestamptz ELSE c.paused_until END,
        paused_by = CASE WHEN ${handoff} THEN 'customer' ELSE c.paused_by END,
        updated_at = ${now}::timestamptz
      FROM fenced WHERE c.id = fenced.id AND (${optedOut}::boolean IS NOT NULL OR ${handoff})
      RETURNING c.id
    ),
    answerable AS (
      SELECT m.id FROM inbound_messages m, fenced, unnest(${ids}::uuid[], ${texts}::text[]) AS read(id, text)
      WHERE m.id = read.id AND m.reply_id IS NULL AND m.skip_reason IS NULL AND m.text IS NOT DISTINCT FROM read.text
      FOR UPDATE OF m
    ),
    made AS (
      INSERT INTO replies (id, conversation_id, kind, state, text, generation_deadline, updated_at)
      SELECT ${replyId}::uuid, fenced.id, ${answer?.kind ?? "ai"}, ${canned === null ? "generating" : "ready"}::reply_state, ${canned},
             ${deadline}::timestamptz, ${now}::timestamptz
      FROM fenced WHERE ${ids.length} > 0 AND (SELECT count(*) FROM answerable) = ${ids.length}
      RETURNING id, conversation_id, state, kind, text, generation_deadline
    ),
    parts AS (
      INSERT INTO outbound_messages (id, reply_id, seq, text)
      SELECT gen_random_uuid(), made.id, p.n - 1, p.text FROM made, unnest(${parts}::text[]) WITH ORDINALITY AS p(text, n)
    ),
    bound AS (
      UPDATE inbound_messages m SET reply_id = made.id FROM made, answerable a WHERE m.id = a.id RETURNING m.id
    )
    SELECT EXISTS (SELECT 1 FROM fenced) AS held, (SELECT to_jsonb(made) FROM made) AS made, ${history}`,
  );
  if (!row) throw new Error("bindAnswer returned no row");
  return { held: row.held, reply: row.made ? replyOf(row.made) : undefined, history: row.made && answer?.kind === "ai" ? historyOf(row) : undefined };
}

/**
 * A person is talking to the customer (an echo of the WhatsApp Business app, WHATSAPP.md §10):
 * the bot keeps out until `until`, then comes back by itself. Never shortens a longer pause.
 */
export async function pauseForPerson(db: Db, conversationId: string, until: Date, by: string, now: Date): Promise<boolean> {
  const paused = await execute(
    db,
    Prisma.sql`
    UPDATE conversations SET paused_until = ${until}::timestamptz, paused_by = ${by}, updated_at = ${now}::timestamptz
    WHERE id = ${conversationId}::uuid AND (paused_until IS NULL OR paused_until < ${until}::timestamptz)`,
  );
  return paused > 0;
}

/**
 * One person known as two contacts (their phone's and their BSUID's, contacts.ts):
 * `gone`'s conversations become `keep`'s. Where `keep` already has a conversation with the same
 * business number, the twin takes its messages, replies and dead letters, so the history reads
 * as one, and the stricter of their controls (the later window and pause, an opt-out); the
 * emptied conversation is deleted, so a run holding it is fenced off for good. Inside the
 * merge's transaction.
 */
export async function moveConversations(tx: Tx, gone: { contactId: string }, keep: { contactId: string }): Promise<void> {
  await tx.$executeRaw`
    WITH pairs AS (
      SELECT g.id AS gone, k.id AS twin
      FROM conversations g JOIN conversations k ON k.phone_number_id = g.phone_number_id AND k.contact_id = ${keep.contactId}::uuid
      WHERE g.contact_id = ${gone.contactId}::uuid
      FOR UPDATE OF g, k
    ),
    messages AS (UPDATE inbound_messages m SET conversation_id = p.twin FROM pairs p WHERE m.conversation_id = p.gone),
    replies AS (UPDATE replies r SET conversation_id = p.twin FROM pairs p WHERE r.conversation_id = p.gone),
    letters AS (UPDATE dead_letters d SET conversation_id = p.twin FROM pairs p WHERE d.conversation_id = p.gone)
    UPDATE conversations k SET
      last_inbound_at = GREATEST(k.last_inbound_at, g.last_inbound_at),
      last_message_at = GREATEST(k.last_message_at, g.last_message_at),
      opted_out_at = COALESCE(k.opted_out_at, g.opted_out_at),
      paused_until = GREATEST(k.paused_until, g.paused_until),
      paused_by = CASE WHEN g.paused_until > k.paused_until OR k.paused_until IS NULL THEN g.paused_by ELSE k.paused_by END
    FROM pairs p JOIN conversations g ON g.id = p.gone
    WHERE k.id = p.twin`;
  // The rows moved above are gone from these conversations once the statement has run.
  await tx.$executeRaw`
    DELETE FROM conversations g USING conversations k
    WHERE g.contact_id = ${gone.contactId}::uuid AND k.contact_id = ${keep.contactId}::uuid AND k.phone_number_id = g.phone_number_id`;
  await tx.$executeRaw`UPDATE conversations SET contact_id = ${keep.contactId}::uuid WHERE contact_id = ${gone.contactId}::uuid`;
}

/**
 * The bot answers the conversation again, inside the caller's transaction: the pause is lifted,
 * the conversation's failed replies note it in their history, and its customers-waiting items
 * are resolved (nobody waits for a person any more), in the actor's name. False when there is
 * no such conversation.
 */
export async function resumeIn(tx: Tx, conversationId: string, actor: string, now: Date): Promise<boolean> {
  const resumed = await tx.$executeRaw`
    UPDATE conversations SET paused_until = NULL, paused_by = NULL, updated_at = ${now}::timestamptz WHERE id = ${conversationId}::uuid`;
  if (resumed === 0) return false;
  const open = await tx.deadLetter.findMany({ where: { conversationId, state: "open" }, select: { id: true, replyId: true } });
  await tx.deadLetter.updateMany({
    where: { id: { in: open.filter((letter) => !letter.replyId).map((letter) => letter.id) } },
    data: { state: "resolved", actedBy: actor, actedAt: now },
  });
  await tx.deadLetterAction.createMany({
    data: open.map((letter) => ({ deadLetterId: letter.id, actor, action: letter.replyId ? "resume_bot" : "give_back", createdAt: now })),
  });
  return true;
}

/** A staff action on a whole conversation (pausing the bot) shows in the history of its open items, inside the action's transaction. */
export async function auditOpenItems(
  tx: Tx,
  conversationId: string,
  entry: { actor: string; action: string; detail?: Record<string, unknown> },
  now: Date,
): Promise<void> {
  const open = await tx.deadLetter.findMany({ where: { conversationId, state: "open" }, select: { id: true } });
  await tx.deadLetterAction.createMany({
    data: open.map((letter) => ({
      deadLetterId: letter.id,
      actor: entry.actor,
      action: entry.action,
      createdAt: now,
      ...(entry.detail ? { detail: entry.detail as Prisma.InputJsonValue } : {}),
    })),
  });
}
