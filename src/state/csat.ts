import { type Db, Prisma } from "../db/client.ts";
import { queryRows } from "../db/sql.ts";
import type { CsatRating } from "../messages/csat.ts";
import { splitForWhatsApp } from "../whatsapp/split.ts";
import { windowOpen } from "../whatsapp/window.ts";
import type { Lease } from "./fence.ts";

/**
 * A CSAT ask (issue 33.3; README.md in this folder has the whole machine):
 *
 *   (scheduleCsatAsk, the bot answered) pending ─askCsat─▶ sent, with its reply of kind "csat"
 *   pending ─askCsat─▶ cancelled (the customer wrote) | skipped (opted out, paused, an open item,
 *                      asked recently, the window closed), with the reason
 *   pending ─recordInbound (a new customer message)─▶ cancelled
 *   sent ─rateCsat─▶ sent, rated (a later tap replaces the rating; thanked once)
 *   sent ─dropUnsentCsat─▶ skipped (the window closed before its reply went out)
 *   sent ─deadLetterReply─▶ skipped (not delivered: no item, no holding reply; dead-letters.ts)
 *
 * The ask's message is a reply like any other: the reply job sends it (law 5), status
 * webhooks price it.
 */

type Tx = Prisma.TransactionClient;

/** The bot answered: an ask waits until `dueAt`; one already waiting moves there (the quiet counts from the last answer). */
export async function scheduleCsatAsk(db: Db, conversationId: string, answeredAt: Date, dueAt: Date): Promise<{ id: string; dueAt: Date }> {
  const [row] = await queryRows<{ id: string; dueAt: Date }>(
    db,
    Prisma.sql`
    INSERT INTO csat_asks (id, conversation_id, answered_at, due_at, updated_at)
    VALUES (gen_random_uuid(), ${conversationId}::uuid, ${answeredAt}::timestamptz, ${dueAt}::timestamptz, ${answeredAt}::timestamptz)
    ON CONFLICT (conversation_id) WHERE state = 'pending' DO UPDATE SET
      answered_at = GREATEST(csat_asks.answered_at, EXCLUDED.answered_at),
      due_at = GREATEST(csat_asks.due_at, EXCLUDED.due_at),
      updated_at = EXCLUDED.updated_at
    RETURNING id, due_at AS "dueAt"`,
  );
  return row!;
}

export interface AskSettings {
  everyDays: number;
  question: string;
  interactive: Record<string, unknown>;
}

export type Asked =
  | { outcome: "sent"; conversationId: string; replyId: string }
  | { outcome: "not_due"; dueAt: Date }
  | { outcome: "cancelled" | "skipped"; conversationId: string; reason: string }
  /** No longer pending: sent, cancelled or skipped before (a second job, the reconciler). */
  | { outcome: "settled" };

/**
 * pending → sent, once due, in one transaction that holds the ask: its reply (kind "csat",
 * ready, one part carrying the buttons) made for the reply job to send. Or cancelled, when the
 * customer wrote since the answer it follows, or skipped, with why, when the customer is not
 * to be asked now.
 */
export async function askCsat(db: Db, askId: string, settings: AskSettings, now: Date): Promise<Asked> {
  return db.$transaction(async (tx) => {
    const [ask] = await tx.$queryRaw<
      {
        conversationId: string;
        state: string;
        dueAt: Date;
        wrote: boolean;
        optedOut: boolean;
        paused: boolean;
        openItem: boolean;
        lastInboundAt: Date | null;
        askedRecently: boolean;
      }[]
    >`
      SELECT a.conversation_id AS "conversationId", a.state, a.due_at AS "dueAt",
             EXISTS (SELECT 1 FROM inbound_messages m WHERE m.conversation_id = a.conversation_id
                       AND (m.created_at > a.answered_at OR (m.reply_id IS NULL AND m.skip_reason IS NULL))) AS wrote,
             c.opted_out_at IS NOT NULL AS "optedOut",
             COALESCE(c.paused_until > ${now}::timestamptz, false) AS paused,
             EXISTS (SELECT 1 FROM dead_letters d WHERE d.conversation_id = a.conversation_id AND d.state = 'open') AS "openItem",
             c.last_inbound_at AS "lastInboundAt",
             EXISTS (SELECT 1 FROM csat_asks o WHERE o.conversation_id = a.conversation_id AND o.id <> a.id
                       AND o.asked_at > ${now}::timestamptz - make_interval(days => ${settings.everyDays}::int)) AS "askedRecently"
      FROM csat_asks a JOIN conversations c ON c.id = a.conversation_id
      WHERE a.id = ${askId}::uuid
      FOR UPDATE OF a`;
    if (ask?.state !== "pending") return { outcome: "settled" };
    if (ask.dueAt.getTime() > now.getTime()) return { outcome: "not_due", dueAt: ask.dueAt };
    const [state, reason] = ask.wrote
      ? (["cancelled", "the customer wrote"] as const)
      : ask.optedOut
        ? (["skipped", "opted out"] as const)
        : ask.paused
          ? (["skipped", "the bot is paused for a person"] as const)
          : ask.openItem
            ? (["skipped", "an open item waits for staff"] as const)
            : !windowOpen(ask.lastInboundAt, now)
              ? (["skipped", "the 24-hour window had closed"] as const)
              : ask.askedRecently
                ? (["skipped", "asked recently"] as const)
                : [undefined, undefined];
    if (state) {
      await tx.$executeRaw`UPDATE csat_asks SET state = ${state}, reason = ${reason}, updated_at = ${now}::timestamptz WHERE id = ${askId}::uuid`;
      return { outcome: state, conversationId: ask.conversationId, reason };
    }
    const [reply] = await tx.$queryRaw<{ id: string }[]>`
      INSERT INTO replies (id, conversation_id, kind, state, text, updated_at)
      VALUES (gen_random_uuid(), ${ask.conversationId}::uuid, 'csat', 'ready', ${settings.question}, ${now}::timestamptz)
      RETURNING id`;
    await tx.$executeRaw`
      INSERT INTO outbound_messages (id, reply_id, seq, text, interactive)
      VALUES (gen_random_uuid(), ${reply!.id}::uuid, 0, ${settings.question}, ${JSON.stringify(settings.interactive)}::jsonb)`;
    await tx.$executeRaw`
      UPDATE csat_asks SET state = 'sent', reply_id = ${reply!.id}::uuid, asked_at = ${now}::timestamptz, updated_at = ${now}::timestamptz
      WHERE id = ${askId}::uuid`;
    return { outcome: "sent", conversationId: ask.conversationId, replyId: reply!.id };
  });
}

export type Rated = { recorded: false } | { recorded: true; askId: string; rating: CsatRating; thanksReplyId: string | undefined };

/**
 * A tap on a CSAT button: the rating of the conversation's latest ask sent. A later tap
 * replaces it (by the tap's own time: a redelivered older tap does not); the thanks is made
 * once per ask (a reply of kind "csat_thanks", ready for the reply job), and never to a
 * customer who opted out. In one transaction that holds the ask.
 */
export async function rateCsat(db: Db, conversationId: string, tap: { rating: CsatRating; at: Date }, thanks: string, now: Date): Promise<Rated> {
  return db.$transaction(async (tx) => {
    const [ask] = await tx.$queryRaw<{ id: string; thanked: boolean; optedOut: boolean }[]>`
      SELECT a.id, a.thanked, c.opted_out_at IS NOT NULL AS "optedOut"
      FROM csat_asks a JOIN conversations c ON c.id = a.conversation_id
      WHERE a.conversation_id = ${conversationId}::uuid AND a.state = 'sent'
      ORDER BY a.asked_at DESC LIMIT 1
      FOR UPDATE OF a`;
    if (!ask) return { recorded: false };
    await tx.$executeRaw`
      UPDATE csat_asks SET rating = ${tap.rating}, rated_at = ${tap.at}::timestamptz, updated_at = ${now}::timestamptz
      WHERE id = ${ask.id}::uuid AND (rated_at IS NULL OR rated_at <= ${tap.at}::timestamptz)`;
    const thanksReplyId = !ask.thanked && thanks && !ask.optedOut ? await writeThanks(tx, conversationId, thanks, now) : undefined;
    if (thanksReplyId) await tx.$executeRaw`UPDATE csat_asks SET thanked = true WHERE id = ${ask.id}::uuid`;
    return { recorded: true, askId: ask.id, rating: tap.rating, thanksReplyId };
  });
}

async function writeThanks(tx: Tx, conversationId: string, thanks: string, now: Date): Promise<string> {
  const [reply] = await tx.$queryRaw<{ id: string }[]>`
    INSERT INTO replies (id, conversation_id, kind, state, text, updated_at)
    VALUES (gen_random_uuid(), ${conversationId}::uuid, 'csat_thanks', 'ready', ${thanks}, ${now}::timestamptz)
    RETURNING id`;
  await tx.$executeRaw`
    INSERT INTO outbound_messages (id, reply_id, seq, text)
    SELECT gen_random_uuid(), ${reply!.id}::uuid, t.n - 1, t.text FROM unnest(${splitForWhatsApp(thanks)}::text[]) WITH ORDINALITY AS t(text, n)`;
  return reply!.id;
}

/**
 * The 24-hour window closed before a CSAT reply (the ask, or its thanks) went out: nothing of
 * it is sent (a template in its place would ask nothing). Its unsent parts are dropped, the
 * reply settles as sent with nothing more to send, and its ask, never seen, is skipped. A
 * maybe-sent part stays (law 5). Only for the lease holder.
 */
export async function dropUnsentCsat(db: Db, lease: Lease, replyId: string, now: Date): Promise<boolean> {
  const [row] = await queryRows<{ dropped: boolean }>(
    db,
    Prisma.sql`
    WITH held AS (SELECT 1 FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE),
    r AS (SELECT id FROM replies WHERE id = ${replyId}::uuid AND kind IN ('csat', 'csat_thanks') AND state = 'ready' AND EXISTS (SELECT 1 FROM held) FOR UPDATE),
    dropped AS (DELETE FROM outbound_messages p USING r WHERE p.reply_id = r.id AND p.send_state = 'pending' RETURNING p.id),
    settled AS (
      UPDATE replies SET state = 'sent', updated_at = ${now}::timestamptz FROM r
      WHERE replies.id = r.id AND NOT EXISTS (SELECT 1 FROM outbound_messages p WHERE p.reply_id = r.id AND p.send_state = 'sending')
      RETURNING replies.id
    ),
    unasked AS (
      UPDATE csat_asks a SET state = 'skipped', reason = 'the 24-hour window had closed before it was sent', asked_at = NULL, updated_at = ${now}::timestamptz
      FROM settled WHERE a.reply_id = settled.id AND NOT EXISTS (SELECT 1 FROM outbound_messages p WHERE p.reply_id = settled.id AND p.send_state = 'accepted')
    )
    SELECT EXISTS (SELECT 1 FROM settled) AS dropped`,
  );
  return row?.dropped ?? false;
}

/** Asks due and still pending (their delayed job lost, or the workers down when it was due): the reconciler's read. */
export async function dueCsatAsks(db: Db, now: Date, limit: number): Promise<{ id: string; conversationId: string }[]> {
  return queryRows(
    db,
    Prisma.sql`
    SELECT id, conversation_id AS "conversationId" FROM csat_asks
    WHERE state = 'pending' AND due_at <= ${now}::timestamptz ORDER BY due_at LIMIT ${limit}`,
  );
}
