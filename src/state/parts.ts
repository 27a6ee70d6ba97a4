import { type Db, Prisma } from "../db/client.ts";
import { execute, queryRows } from "../db/sql.ts";
import type { Lease } from "./fence.ts";

/**
 * A part is one WhatsApp message of a reply (a reply over 4096 characters has several). Its
 * transitions (README.md in this folder has the whole machine):
 *
 *   pending ─markSending─▶ sending ─markAccepted─▶ accepted
 *   sending ─markRefused─▶ pending                    (Graph's error body: Meta did not take it)
 *   sending ─markSending, after resend_after─▶ sending (law 5's window: no status came)
 *   sending ─reopenForResend─▶ unconfirmed            (a person chose not to wait; kept for its status)
 *
 * A part that is sending or unconfirmed is never deleted or renumbered: a late status webhook
 * must still find it by the id we sent in biz_opaque_callback_data.
 */

/** A part as the send loop reads it. */
export interface PartView {
  id: string;
  seq: number;
  text: string;
  template: string | null;
  /** Set when a person chose the template (issue 21): its language and body parameters; null: the number's windowClosedTemplate. */
  templateLanguage: string | null;
  templateParameters: string[] | null;
  /** Set when it goes out as an interactive message (a CSAT ask's buttons): Graph's `interactive` object. */
  interactive: Record<string, unknown> | null;
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

export type OutboxJson = { parts: (Omit<PartView, "resendAfter"> & { resendAfter: string | null })[] | null; firstSeq: number | null; quote: string | null };
export const outboxOf = (row: OutboxJson): Outbox => ({
  parts: (row.parts ?? []).map((p) => ({ ...p, resendAfter: p.resendAfter === null ? null : new Date(p.resendAfter) })),
  firstSeq: row.firstSeq ?? undefined,
  quote: row.quote ?? undefined,
});

export const partJson = Prisma.sql`jsonb_build_object('id', p.id, 'seq', p.seq, 'text', p.text, 'template', p.template, 'templateLanguage', p.template_language, 'templateParameters', p.template_parameters, 'interactive', p.interactive, 'sendState', p.send_state, 'resendAfter', p.resend_after)`;

/** By storage order: Meta's timestamps have one-second resolution, too coarse for a burst. */
export const quoteOf = (replyId: string) => Prisma.sql`(
  SELECT a.wamid FROM (SELECT wamid, created_at, conversation_id FROM inbound_messages WHERE reply_id = ${replyId}::uuid ORDER BY created_at DESC LIMIT 1) a
  WHERE EXISTS (SELECT 1 FROM inbound_messages n WHERE n.conversation_id = a.conversation_id AND n.created_at > a.created_at)) AS quote`;

/** The reply's outbox as it stands, for a run that did not just write it. */
export async function unsentParts(db: Db, replyId: string): Promise<Outbox> {
  const [row] = await queryRows<OutboxJson>(
    db,
    Prisma.sql`
    SELECT (SELECT jsonb_agg(${partJson} ORDER BY p.seq) FROM outbound_messages p WHERE p.reply_id = ${replyId}::uuid AND p.send_state IN ('pending', 'sending')) AS parts,
           (SELECT min(seq) FROM outbound_messages WHERE reply_id = ${replyId}::uuid) AS "firstSeq", ${quoteOf(replyId)}`,
  );
  return outboxOf(row!);
}

/** Whether the reply's unsent part is a template a person chose (issue 21): it goes out as it is, whatever the window. */
export async function awaitsChosenTemplate(db: Db, replyId: string): Promise<boolean> {
  const [row] = await queryRows<{ chosen: boolean }>(
    db,
    Prisma.sql`
    SELECT EXISTS (SELECT 1 FROM outbound_messages WHERE reply_id = ${replyId}::uuid AND send_state IN ('pending', 'sending') AND template_language IS NOT NULL) AS chosen`,
  );
  return row?.chosen ?? false;
}

export type MarkSending =
  | { ok: true; attempt: number }
  /** Another run holds the conversation now (law 8). */
  | { ok: false; refused: "fenced_out" }
  /** The reply left `ready`: dead-lettered meanwhile (a failed status), or reopened by a person. */
  | { ok: false; refused: "reply_not_ready" }
  /** Its status came meanwhile (accepted), a person chose to send it anew (unconfirmed), or it was replaced (gone). */
  | { ok: false; refused: "accepted" | "unconfirmed" | "gone" }
  /** A send of it may have reached Meta: nobody sends it again before then (law 5). */
  | { ok: false; refused: "waiting_for_status"; resendAfter: Date };

/**
 * pending → sending, or a maybe-sent part whose wait is over → sending again (law 5's window):
 * only for the lease holder, and only while the reply is `ready`. From now until
 * `resendAfterMs` has passed nobody sends it again, so that a send Meta took is confirmed by
 * its status webhook first. The part's state as this statement found it says why it refused.
 */
export async function markSending(db: Db, lease: Lease, partId: string, resendAfterMs: number, now: Date): Promise<MarkSending> {
  const [row] = await queryRows<{
    attempt: number | null;
    sendState: PartView["sendState"] | null;
    replyState: string | null;
    held: boolean;
    resendAfter: Date | null;
  }>(
    db,
    Prisma.sql`
    WITH found AS (
      SELECT p.send_state, p.resend_after, r.state AS reply_state
      FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
      WHERE p.id = ${partId}::uuid AND r.conversation_id = ${lease.conversationId}::uuid
    ),
    held AS (SELECT 1 FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE),
    marked AS (
      UPDATE outbound_messages p
      SET send_state = 'sending', send_attempt = send_attempt + 1,
          resend_after = ${now}::timestamptz + (${resendAfterMs}::double precision * interval '1 millisecond')
      WHERE p.id = ${partId}::uuid
        AND (p.send_state = 'pending' OR (p.send_state = 'sending' AND p.wamid IS NULL AND p.resend_after <= ${now}::timestamptz))
        AND EXISTS (SELECT 1 FROM held)
        -- Locked, so a dead-lettering or a resend of the reply in flight is waited for, then seen.
        AND EXISTS (SELECT 1 FROM replies r WHERE r.id = p.reply_id AND r.state = 'ready' FOR SHARE)
      RETURNING p.send_attempt
    )
    SELECT (SELECT send_attempt FROM marked) AS attempt, EXISTS (SELECT 1 FROM held) AS held,
           (SELECT send_state FROM found) AS "sendState", (SELECT reply_state::text FROM found) AS "replyState",
           (SELECT resend_after FROM found) AS "resendAfter"`,
  );
  if (!row) throw new Error(`markSending of part ${partId} returned no row`);
  if (row.attempt !== null) return { ok: true, attempt: row.attempt };
  if (!row.held) return { ok: false, refused: "fenced_out" };
  if (row.sendState === null) return { ok: false, refused: "gone" };
  if (row.replyState !== "ready") return { ok: false, refused: "reply_not_ready" };
  if (row.sendState === "accepted" || row.sendState === "unconfirmed") return { ok: false, refused: row.sendState };
  // Still sending, its wait not over (or a pending part another run took between our read and this statement).
  return { ok: false, refused: "waiting_for_status", resendAfter: row.resendAfter ?? now };
}

/**
 * → accepted with Meta's wamid: Meta's answer to our send. A fact, so it needs no lease: it
 * records what happened even when the run that sent it has been overtaken. When it was the
 * reply's last part not yet accepted, the reply is sent (ready → sent) in the same statement,
 * which also reads when the webhook received the newest message it answers (epoch ms; for the
 * metrics).
 */
export async function markAccepted(
  db: Db,
  partId: string,
  wamid: string,
  now: Date,
): Promise<{ accepted: boolean; replySent: boolean; answersSinceMs: number | null }> {
  const [row] = await queryRows<{ accepted: boolean; replySent: boolean; answersSinceMs: number | null }>(
    db,
    Prisma.sql`
    WITH accepted AS (
      UPDATE outbound_messages SET send_state = 'accepted', wamid = ${wamid}, accepted_at = ${now}::timestamptz
      WHERE id = ${partId}::uuid AND wamid IS NULL
      RETURNING id, reply_id
    ),
    ${replySentWhenLast(Prisma.sql`accepted`, now)}
    SELECT EXISTS (SELECT 1 FROM accepted) AS accepted, EXISTS (SELECT 1 FROM sent) AS "replySent",
           -- arrival is the webhook's receipt in µs (absent on older rows: then when it was stored)
           (SELECT max(COALESCE(m.arrival / 1000.0, extract(epoch FROM m.created_at) * 1000))::float8
              FROM sent JOIN inbound_messages m ON m.reply_id = sent.id) AS "answersSinceMs"`,
  );
  if (row!.accepted) await conversationMoved(db, partId, now);
  return row!;
}

/**
 * Meta took one of our messages: the conversation moved (its place in GET /admin/conversations).
 * A statement of its own, after the part's: taking the conversation's row inside the part's
 * statement would lock the two in the opposite order to a person's resend, which could deadlock.
 */
async function conversationMoved(db: Db, partId: string, at: Date): Promise<void> {
  await execute(
    db,
    Prisma.sql`
    UPDATE conversations c SET last_message_at = ${at}::timestamptz
    FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
    WHERE p.id = ${partId}::uuid AND c.id = r.conversation_id AND c.last_message_at < ${at}::timestamptz`,
  );
}

/** ready → sent, in the statement that accepted `accepted`'s part, when it was the reply's last one outstanding. */
const replySentWhenLast = (accepted: Prisma.Sql, now: Date) => Prisma.sql`
    sent AS (
      UPDATE replies r SET state = 'sent', sent_at = ${now}::timestamptz, updated_at = ${now}::timestamptz
      FROM ${accepted} a
      WHERE r.id = a.reply_id AND r.state = 'ready'
        AND NOT EXISTS (SELECT 1 FROM outbound_messages o WHERE o.reply_id = a.reply_id AND o.id <> a.id AND o.send_state IN ('pending', 'sending'))
      RETURNING r.id
    )`;

/** sending → pending: Meta refused this attempt with Graph's error body, so it is safe to send again. */
export async function markRefused(db: Db, partId: string, attempt: number): Promise<void> {
  await execute(
    db,
    Prisma.sql`
    UPDATE outbound_messages SET send_state = 'pending'
    WHERE id = ${partId}::uuid AND send_state = 'sending' AND send_attempt = ${attempt} AND wamid IS NULL`,
  );
}

/** The delivery states Meta reports, in the order they only ever move (failed is terminal). */
const STATUS_RANK = { sent: 1, delivered: 2, read: 3, played: 3, failed: 4 } as const;
export type DeliveryStatus = keyof typeof STATUS_RANK;

export type StatusOutcome =
  /** No part of ours has this wamid or carried this callback id. */
  | { outcome: "unknown" }
  /**
   * A copy of a part that was sent again (law 5's window): the part is known by the other
   * copy's wamid, so this one's receipts say nothing about the reply.
   */
  | { outcome: "superseded"; partId: string; replyId: string }
  /** Not newer than what the part has (statuses come out of order and more than once). */
  | { outcome: "stale"; partId: string; replyId: string; reconciled: boolean; replySent: boolean }
  | { outcome: "recorded" | "failed"; partId: string; replyId: string; reconciled: boolean; replySent: boolean };

/**
 * A status webhook, in one statement. The part is found by its wamid, else by our part id in
 * biz_opaque_callback_data: a send whose answer we never saw is then accepted with this wamid
 * (law 5's reconciliation), its reply sent when it was the last part outstanding. The status
 * only moves forward: sent < delivered < read; failed is terminal.
 */
export async function recordDeliveryStatus(
  db: Db,
  status: { wamid: string; callbackPartId: string | undefined; status: DeliveryStatus; at: Date },
  now: Date,
): Promise<StatusOutcome> {
  const rank = STATUS_RANK[status.status];
  const byCallback = status.callbackPartId ?? null;
  const [row] = await queryRows<{
    partId: string | null;
    replyId: string | null;
    knownAs: string | null;
    changed: boolean;
    reconciled: boolean;
    advanced: boolean;
    replySent: boolean;
  }>(
    db,
    Prisma.sql`
    WITH found AS (
      SELECT id, reply_id, wamid, status_rank FROM (
        SELECT id, reply_id, wamid, status_rank, 0 AS pick FROM outbound_messages WHERE wamid = ${status.wamid}
        UNION ALL
        SELECT id, reply_id, wamid, status_rank, 1 FROM outbound_messages WHERE id = ${byCallback}::uuid
      ) f ORDER BY pick LIMIT 1
    ),
    changed AS (
      UPDATE outbound_messages p SET
        send_state = CASE WHEN p.wamid IS NULL THEN 'accepted' ELSE p.send_state END,
        accepted_at = CASE WHEN p.wamid IS NULL THEN ${now}::timestamptz ELSE p.accepted_at END,
        wamid = COALESCE(p.wamid, ${status.wamid}),
        status = CASE WHEN p.status_rank < ${rank} THEN ${status.status} ELSE p.status END,
        status_at = CASE WHEN p.status_rank < ${rank} THEN ${status.at}::timestamptz ELSE p.status_at END,
        status_rank = GREATEST(p.status_rank, ${rank})
      FROM found
      WHERE p.id = found.id AND (p.wamid IS NULL OR p.wamid = ${status.wamid}) AND (p.wamid IS NULL OR p.status_rank < ${rank})
      RETURNING p.id, p.reply_id, found.wamid IS NULL AS reconciled
    ),
    accepted AS (SELECT id, reply_id FROM changed WHERE reconciled),
    ${replySentWhenLast(Prisma.sql`accepted`, now)}
    SELECT (SELECT id FROM found) AS "partId", (SELECT reply_id FROM found) AS "replyId", (SELECT wamid FROM found) AS "knownAs",
           EXISTS (SELECT 1 FROM changed) AS changed, EXISTS (SELECT 1 FROM accepted) AS reconciled,
           -- found holds the part as it was before this statement changed it
           EXISTS (SELECT 1 FROM changed) AND COALESCE((SELECT status_rank FROM found) < ${rank}, false) AS advanced,
           EXISTS (SELECT 1 FROM sent) AS "replySent"`,
  );
  if (!row?.partId || !row.replyId) return { outcome: "unknown" };
  const part = { partId: row.partId, replyId: row.replyId };
  if (row.knownAs !== null && row.knownAs !== status.wamid) return { outcome: "superseded", ...part };
  if (row.reconciled) await conversationMoved(db, part.partId, now);
  const facts = { ...part, reconciled: row.reconciled, replySent: row.replySent };
  if (!row.advanced) return { outcome: "stale", ...facts };
  return { outcome: status.status === "failed" ? "failed" : "recorded", ...facts };
}

/** The part a status webhook is about, by its wamid, else by our part id in biz_opaque_callback_data (a read, for the reconciler). */
export async function findPartOfStatus(db: Db, wamid: string, callback: string | undefined): Promise<{ id: string; replyId: string } | null> {
  const byCallback = callback && UUID.test(callback) ? callback : null;
  const [row] = await queryRows<{ id: string; replyId: string }>(
    db,
    Prisma.sql`
    SELECT id, reply_id AS "replyId" FROM outbound_messages WHERE wamid = ${wamid} OR id = ${byCallback}::uuid ORDER BY wamid = ${wamid} DESC LIMIT 1`,
  );
  return row ?? null;
}

/** Our part ids are UUIDs: anything else in biz_opaque_callback_data is not ours to look up. */
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

type PartRow = { sendState: string; status: string | null; wamid: string | null };

/** Meta may have delivered it: we sent it and never learned the outcome (law 5). */
export const maybeSent = (part: PartRow) => (part.sendState === "sending" || part.sendState === "unconfirmed") && part.wamid === null;
/** Meta took it and has not reported it failed. */
export const delivered = (part: PartRow) => part.sendState === "accepted" && part.status !== "failed";

/** Meta's `pricing` of a sent message as recorded: what it is, and what it costs by the rate card. */
export interface PartPricing {
  category: string;
  type: string | null;
  pricingModel: string | null;
  billable: boolean;
  market: string;
  /** 0 when free; undefined when billed and the rate card has no price for it. */
  amount: number | undefined;
}

/**
 * unpriced → priced: the first status webhook carrying a `pricing` object records it (sent,
 * delivered and read may each carry one, in any order, any number of times). Later ones change
 * nothing, so a message is counted once. A fact about a message Meta took: no lease needed.
 * Returns whether this call recorded it, with the part's business number, for the counters.
 */
export async function recordPartPricing(
  db: Db,
  partId: string,
  pricing: PartPricing,
  now: Date,
): Promise<{ recorded: true; phoneNumberId: string } | { recorded: false }> {
  const [row] = await queryRows<{ phoneNumberId: string }>(
    db,
    Prisma.sql`
    UPDATE outbound_messages p SET pricing_category = ${pricing.category}, pricing_type = ${pricing.type}, pricing_model = ${pricing.pricingModel},
      billable = ${pricing.billable}, market = ${pricing.market}, meta_amount = ${pricing.amount ?? null}::double precision, priced_at = ${now}::timestamptz
    FROM replies r JOIN conversations c ON c.id = r.conversation_id
    WHERE p.id = ${partId}::uuid AND p.priced_at IS NULL AND r.id = p.reply_id
    RETURNING c.phone_number_id AS "phoneNumberId"`,
  );
  return row ? { recorded: true, phoneNumberId: row.phoneNumberId } : { recorded: false };
}

/**
 * The other copy of a part sent again (law 5's window), priced from its own status: Meta bills
 * each copy it took, so each is counted, once per wamid however many statuses carry its pricing.
 */
export async function recordCopyPricing(
  db: Db,
  copy: { partId: string; wamid: string },
  pricing: PartPricing,
  now: Date,
): Promise<{ recorded: true; phoneNumberId: string } | { recorded: false }> {
  const [row] = await queryRows<{ phoneNumberId: string }>(
    db,
    Prisma.sql`
    WITH made AS (
      INSERT INTO outbound_copies (wamid, part_id, pricing_category, pricing_type, pricing_model, billable, market, meta_amount, priced_at)
      VALUES (${copy.wamid}, ${copy.partId}::uuid, ${pricing.category}, ${pricing.type}, ${pricing.pricingModel}, ${pricing.billable}, ${pricing.market},
        ${pricing.amount ?? null}::double precision, ${now}::timestamptz)
      ON CONFLICT (wamid) DO NOTHING
      RETURNING part_id
    )
    SELECT c.phone_number_id AS "phoneNumberId" FROM made JOIN outbound_messages p ON p.id = made.part_id
      JOIN replies r ON r.id = p.reply_id JOIN conversations c ON c.id = r.conversation_id`,
  );
  return row ? { recorded: true, phoneNumberId: row.phoneNumberId } : { recorded: false };
}
