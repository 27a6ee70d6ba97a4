import type { GeneratedReply } from "../ai/claude.ts";
import { type Db, isUniqueViolation, Prisma } from "../db/client.ts";
import { execute, queryRows } from "../db/sql.ts";
import { FencedOut } from "../errors.ts";

import { splitForWhatsApp } from "../whatsapp/split.ts";
import type { Lease } from "./fence.ts";
import { delivered, type Outbox, type OutboxJson, outboxOf, partJson, quoteOf } from "./parts.ts";

/**
 * A reply: the answer to one or more of the customer's messages (README.md in this folder has
 * the whole machine).
 *
 *   (bindAnswer) generating ─storeDraft─▶ ready ─markAccepted of its last part, or markReplySent─▶ sent
 *   (bindAnswer, a configured answer) ready
 *   generating ─replaceUnsentWithTemplate─▶ ready   (the window closed: a template instead)
 *   any ─deadLetterReply─▶ dead ─reopenForResend (a person)─▶ ready | generating (regenerate: its next round)
 *   (writeStaffReply: a person answering a customer handed to them) ready
 *
 * While generating, `generation_deadline` says until when a Claude call started for it may
 * still answer (law 4): a run that takes the conversation over waits for it, and the answer is
 * stored whichever run receives it. The run that starts a call does so only well before the
 * deadline (its own clock), and the Claude client's timeout ends the call by then.
 */

type Tx = Prisma.TransactionClient;

/**
 * generating → ready: Claude's answer and its parts, stored before anything is sent (law 4),
 * in one statement that also reads what sending needs. The answer is stored whoever asked for
 * it, as long as the reply is still generating: a run overtaken while Claude wrote (it froze,
 * another took the conversation over and waited for this call) stores what it was paid for,
 * and then stops (`held` false) while the holder sends it. Without a lease (the reconciler
 * salvaging a draft a failed job kept) it is the same. Returns the conversation's latest
 * inbound time, for the 24-hour window, and the outbox (undefined when the reply was no
 * longer generating).
 */
export async function storeDraft(
  db: Db | Tx,
  lease: Lease | null,
  replyId: string,
  draft: GeneratedReply,
  now: Date,
): Promise<{ held: boolean; lastInboundAt: Date | null; outbox: Outbox | undefined }> {
  const fence = lease?.fence ?? null;
  const [row] = await queryRows<OutboxJson & { held: boolean; stored: boolean; lastInboundAt: Date | null; firstBefore: number | null }>(
    db,
    Prisma.sql`
    WITH conversation AS (
      SELECT c.last_inbound_at, c.reply_fence = ${fence}::bigint AS held
      FROM conversations c JOIN replies r ON r.conversation_id = c.id WHERE r.id = ${replyId}::uuid
    ),
    stored AS (
      UPDATE replies SET state = 'ready', text = ${draft.text}, model = ${draft.model}, input_tokens = ${draft.inputTokens}::int,
        output_tokens = ${draft.outputTokens}::int, cache_read_tokens = ${draft.cacheReadTokens ?? null}::int,
        cache_creation_tokens = ${draft.cacheCreationTokens ?? null}::int,
        cache_creation_1h_tokens = ${draft.cacheCreation1hTokens ?? null}::int, claude_cost_usd = ${draft.costUsd ?? null}::double precision, citations = ${draft.citations ? JSON.stringify(draft.citations) : null}::jsonb,
        generation_deadline = NULL, updated_at = ${now}::timestamptz
      WHERE id = ${replyId}::uuid AND state = 'generating'
      RETURNING id
    ),
    before AS (SELECT min(seq) AS first, max(seq) AS last FROM outbound_messages WHERE reply_id = ${replyId}::uuid),
    p AS (
      -- After any part the reply already has: a part Meta accepted and later reported failed
      -- stays as history, so new parts never reuse its number.
      INSERT INTO outbound_messages (id, reply_id, seq, text)
      SELECT gen_random_uuid(), stored.id, COALESCE(before.last, -1) + t.n, t.text
      FROM stored, before, unnest(${partsOf(draft.text)}::text[]) WITH ORDINALITY AS t(text, n)
      RETURNING id, seq, text, template, template_language, template_parameters, interactive, send_state, resend_after
    )
    SELECT COALESCE((SELECT held FROM conversation), false) AS held, (SELECT last_inbound_at FROM conversation) AS "lastInboundAt",
           EXISTS (SELECT 1 FROM stored) AS stored,
           (SELECT jsonb_agg(${partJson} ORDER BY p.seq) FROM p) AS parts, (SELECT first FROM before) AS "firstBefore", ${quoteOf(replyId)}`,
  );
  if (!row) throw new Error(`storeDraft of reply ${replyId} returned no row`);
  const held = lease === null || row.held;
  if (!row.stored) return { held, lastInboundAt: row.lastInboundAt, outbox: undefined };
  const outbox = outboxOf(row);
  return { held, lastInboundAt: row.lastInboundAt, outbox: { ...outbox, firstSeq: row.firstBefore ?? outbox.parts[0]?.seq } };
}

/** A reply's WhatsApp messages: none for no words (an empty HANDOFF_REPLY says nothing). */
const partsOf = (text: string): string[] => (text.trim() ? splitForWhatsApp(text) : []);

export type Armed = { ok: true; deadline: Date } | { ok: false; refused: "fenced_out" | "not_generating" } | { ok: false; refused: "in_flight"; until: Date };

/**
 * Before a run calls Claude for a reply it did not bind now (a retry, a takeover): the reply's
 * generation deadline is set anew, but only when no call may still answer (none started, or
 * the last one's deadline has passed) and only for the lease holder.
 */
export async function armGeneration(db: Db, lease: Lease, replyId: string, budgetMs: number, now: Date): Promise<Armed> {
  const deadline = new Date(now.getTime() + budgetMs);
  const [row] = await queryRows<{ armed: boolean; held: boolean; state: string | null; until: Date | null }>(
    db,
    Prisma.sql`
    WITH held AS (SELECT 1 FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE),
    before AS (SELECT state, generation_deadline FROM replies WHERE id = ${replyId}::uuid),
    armed AS (
      UPDATE replies SET generation_deadline = ${deadline}::timestamptz
      WHERE id = ${replyId}::uuid AND state = 'generating' AND EXISTS (SELECT 1 FROM held)
        AND (generation_deadline IS NULL OR generation_deadline <= ${now}::timestamptz)
      RETURNING id
    )
    SELECT EXISTS (SELECT 1 FROM armed) AS armed, EXISTS (SELECT 1 FROM held) AS held,
           (SELECT state::text FROM before) AS state, (SELECT generation_deadline FROM before) AS until`,
  );
  if (row?.armed) return { ok: true, deadline };
  if (!row?.held) return { ok: false, refused: "fenced_out" };
  if (row.state !== "generating") return { ok: false, refused: "not_generating" };
  return { ok: false, refused: "in_flight", until: row.until ?? now };
}

/**
 * The call this run armed the deadline for ended without an answer (Claude refused, failed or
 * timed out): nothing can answer it any more, so the next run need not wait for it. Only that
 * deadline is released: one armed since by another run stays.
 */
export async function releaseGeneration(db: Db, replyId: string, deadline: Date): Promise<void> {
  await execute(
    db,
    Prisma.sql`
    UPDATE replies SET generation_deadline = NULL
    WHERE id = ${replyId}::uuid AND state = 'generating' AND generation_deadline = ${deadline}::timestamptz`,
  );
}

/** ready → sent, once every part is accepted (a "failed" status may have dead-lettered it meanwhile). */
export async function markReplySent(db: Db, replyId: string, now: Date): Promise<boolean> {
  const changed = await execute(
    db,
    Prisma.sql`
    UPDATE replies SET state = 'sent', sent_at = ${now}::timestamptz, updated_at = ${now}::timestamptz
    WHERE id = ${replyId}::uuid AND state = 'ready'
      AND NOT EXISTS (SELECT 1 FROM outbound_messages WHERE reply_id = ${replyId}::uuid AND send_state IN ('pending', 'sending'))`,
  );
  return changed > 0;
}

/**
 * Past the 24-hour window only an approved template reaches the customer: it replaces what was
 * never sent (pending free-form parts). A maybe-sent free-form part is never deleted (law 5):
 * once its wait for a status is over it becomes `unconfirmed`, since it can no longer be sent
 * as free text; until then it stays `sending`, and the template waits behind it. Once in place
 * the template is not added again. Only for the lease holder, and only while the reply is
 * still being answered (generating or ready).
 */
export async function replaceUnsentWithTemplate(db: Db, lease: Lease, replyId: string, template: { name: string; language: string }, now: Date): Promise<void> {
  const text = `[Template "${template.name}" (${template.language}): the 24-hour window had closed]`;
  const [row] = await queryRows<{ held: boolean; open: boolean }>(
    db,
    Prisma.sql`
    WITH held AS (SELECT 1 FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE),
    r AS (SELECT id FROM replies WHERE id = ${replyId}::uuid AND state IN ('generating', 'ready') AND EXISTS (SELECT 1 FROM held) FOR UPDATE),
    dropped AS (
      DELETE FROM outbound_messages p USING r
      WHERE p.reply_id = r.id AND p.send_state = 'pending' AND p.template IS DISTINCT FROM ${template.name}
    ),
    parked AS (
      UPDATE outbound_messages p SET send_state = 'unconfirmed' FROM r
      WHERE p.reply_id = r.id AND p.send_state = 'sending' AND p.template IS NULL AND p.wamid IS NULL AND p.resend_after <= ${now}::timestamptz
    ),
    live AS (
      SELECT 1 FROM outbound_messages p, r
      WHERE p.reply_id = r.id AND p.template = ${template.name} AND p.send_state <> 'unconfirmed' AND p.status IS DISTINCT FROM 'failed'
    ),
    added AS (
      -- After every part the reply has or had (those dropped above included): numbers are never reused.
      INSERT INTO outbound_messages (id, reply_id, seq, text, template)
      SELECT gen_random_uuid(), r.id, COALESCE((SELECT max(seq) FROM outbound_messages WHERE reply_id = r.id), -1) + 1, ${text}, ${template.name}
      FROM r WHERE NOT EXISTS (SELECT 1 FROM live)
    ),
    readied AS (UPDATE replies SET state = 'ready', text = ${text}, generation_deadline = NULL, updated_at = ${now}::timestamptz FROM r WHERE replies.id = r.id)
    SELECT EXISTS (SELECT 1 FROM held) AS held, EXISTS (SELECT 1 FROM r) AS open`,
  );
  if (!row?.held) throw new FencedOut(`conversation ${lease.conversationId} was taken over before the template replaced reply ${replyId}`);
}

/**
 * Adds parts after any the reply already has: a part Meta accepted and later reported failed
 * stays as history, so new parts never reuse its number.
 */
type NewPart = { text: string; template?: string | null; templateLanguage?: string | null; templateParameters?: Prisma.JsonValue | null };

async function appendParts(tx: Tx, replyId: string, parts: NewPart[]): Promise<void> {
  if (parts.length === 0) return;
  const last = await tx.outboundMessage.aggregate({ where: { replyId }, _max: { seq: true } });
  const first = (last._max.seq ?? -1) + 1;
  await tx.outboundMessage.createMany({
    data: parts.map((part, i) => ({
      replyId,
      seq: first + i,
      text: part.text,
      template: part.template ?? null,
      templateLanguage: part.templateLanguage ?? null,
      ...(part.templateParameters ? { templateParameters: part.templateParameters as Prisma.InputJsonValue } : {}),
    })),
  });
}

/** An approved template a person chose to send (issue 21), its parameters checked against Meta's list; `text` is its filled body. */
export interface ChosenTemplate {
  name: string;
  language: string;
  parameters: readonly string[];
  text: string;
}

/**
 * dead → ready (or generating, to ask Claude again): a person's resend, inside the resend's
 * transaction, which has locked the reply (state/dead-letters.ts). What never reached the
 * customer is sent anew, as it was (a template stays a template), as the person's text or as
 * the approved template they chose (its one part, whatever the window); a
 * maybe-sent part becomes `unconfirmed`, kept so its late status still finds it.
 */
export async function reopenForResend(
  tx: Tx,
  reply: { id: string; text: string | null },
  choice: { text?: string | undefined; regenerate?: boolean | undefined; template?: ChosenTemplate | undefined },
  now: Date,
): Promise<void> {
  const parts = await tx.outboundMessage.findMany({ where: { replyId: reply.id }, orderBy: { seq: "asc" } });
  const again: NewPart[] = choice.regenerate
    ? []
    : choice.template
      ? [
          {
            text: choice.template.text,
            template: choice.template.name,
            templateLanguage: choice.template.language,
            templateParameters: [...choice.template.parameters],
          },
        ]
      : choice.text !== undefined
        ? splitForWhatsApp(choice.text).map((text) => ({ text }))
        : parts
            .filter((p) => !delivered(p))
            .map((p) => ({ text: p.text, template: p.template, templateLanguage: p.templateLanguage, templateParameters: p.templateParameters }));
  await tx.outboundMessage.updateMany({ where: { replyId: reply.id, sendState: "sending" }, data: { sendState: "unconfirmed" } });
  await tx.outboundMessage.deleteMany({ where: { replyId: reply.id, sendState: "pending" } });
  await appendParts(tx, reply.id, again);
  // Regenerating drops the draft: the reply job then asks Claude again (an explicit, paid
  // choice), in a new round: a tool loop of its own, with fresh business data, new keys and its
  // own clock. The old round's steps stay as the record of what was done.
  const text = choice.regenerate ? null : (choice.template?.text ?? choice.text ?? reply.text);
  await tx.reply.update({
    where: { id: reply.id },
    data: { text, state: text ? "ready" : "generating", generationDeadline: null, updatedAt: now, ...(choice.regenerate ? { round: { increment: 1 } } : {}) },
  });
}

/**
 * (a person answering a customer handed to them, from the staff page) → ready: a reply of kind
 * "staff", their text in WhatsApp-sized parts or the approved template they chose, sent by the
 * reply job like any other (law 5) and, once sent, the business's side of the conversation in
 * Claude's history. Inside the answer's transaction (state/dead-letters.ts, answerHandedOff).
 */
export async function writeStaffReply(tx: Tx, conversationId: string, choice: { text: string } | { template: ChosenTemplate }, now: Date): Promise<string> {
  const text = "template" in choice ? choice.template.text : choice.text;
  const reply = await tx.reply.create({ data: { conversationId, kind: "staff", state: "ready", text, updatedAt: now }, select: { id: true } });
  await appendParts(
    tx,
    reply.id,
    "template" in choice
      ? [{ text, template: choice.template.name, templateLanguage: choice.template.language, templateParameters: [...choice.template.parameters] }]
      : splitForWhatsApp(text).map((part) => ({ text: part })),
  );
  return reply.id;
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
    // The conversation moved (its place in GET /admin/conversations).
    await execute(
      db,
      Prisma.sql`
      UPDATE conversations SET last_message_at = ${echo.at}::timestamptz WHERE id = ${conversationId}::uuid AND last_message_at < ${echo.at}::timestamptz`,
    );
    return true;
  } catch (error) {
    if (isUniqueViolation(error)) return false;
    throw error;
  }
}
