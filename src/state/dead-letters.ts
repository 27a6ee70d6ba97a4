import type { GeneratedReply } from "../ai/claude.ts";
import type { Db, Prisma } from "../db/client.ts";
import type { Failure } from "../errors.ts";
import { PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { splitForWhatsApp } from "../whatsapp/split.ts";
import { SERVICE_WINDOW_MS } from "../whatsapp/window.ts";
import { assertLease, fenceOff, type Lease } from "./fence.ts";
import { bindStranded } from "./messages.ts";
import { storeDraft } from "./replies.ts";

/**
 * A dead letter is a reply that could not be made or delivered (law 6), or a customer waiting
 * for a person: it keeps the failure's code and a reason a person can read, until staff
 * resend or discard it (staff-actions.ts). README.md in this folder has the whole machine.
 *
 *   (deadLetterReply, deadLetterConversation, deadLetterMessage) a reply's item, open
 *   (openHandoffItem, handOff) a customer waiting for a person, open
 *   (openToolUnknownItem) a business action nobody can confirm, open: a person checks it
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
 * dedupKey: a redelivered status webhook). "csat_dropped" for a CSAT ask or its thanks: it
 * dies quietly (dropFailedCsat). Throws FencedOut when the run's lease is lost.
 */
export async function deadLetterReply(
  db: Db,
  input: DeadLetterInput,
  holder: DeadLetterHolder,
  now: Date,
): Promise<RecordedDeadLetter | "csat_dropped" | null> {
  return db.$transaction((tx) => deadLetterIn(tx, input, holder, now));
}

async function deadLetterIn(tx: Tx, input: DeadLetterInput, holder: DeadLetterHolder, now: Date): Promise<RecordedDeadLetter | "csat_dropped" | null> {
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
  if (dead.kind === "csat" || dead.kind === "csat_thanks") {
    await dropFailedCsat(tx, input.replyId, input.failure.reason, now);
    return "csat_dropped";
  }
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
  const holding =
    dead.kind !== "holding" && input.holdingReply
      ? await sayHolding(tx, input.conversationId, letter.id, input.holdingReply, { onceToday: failure.source === "budget" }, now)
      : false;
  return { id: letter.id, created: true, holding };
}

/**
 * A CSAT message that could not be delivered (the ask, or the thanks for a rating) is a
 * courtesy that did not arrive, not a customer left without an answer: no item for staff, no
 * holding reply, nothing sent again. Its ask, never seen by the customer, is skipped with why
 * (an ask Meta took and later reported failed included), so insights do not count it as asked.
 */
async function dropFailedCsat(tx: Tx, replyId: string, reason: string, now: Date): Promise<void> {
  await tx.$executeRaw`
    UPDATE csat_asks SET state = 'skipped', reason = ${`not delivered: ${reason}`}, asked_at = NULL, updated_at = ${now}::timestamptz
    WHERE reply_id = ${replyId}::uuid AND state = 'sent' AND rating IS NULL`;
}

/**
 * The holding reply of a new item, when the customer can still be written to and nobody else
 * speaks to them; true when it was made. Its words are in the item's history. `onceToday`
 * (a spent daily budget, which stops every new answer until the next UTC day): only when no
 * earlier budget item of the conversation said it that day, so a customer writing on hears it once.
 */
async function sayHolding(tx: Tx, conversationId: string, deadLetterId: string, text: string, options: { onceToday: boolean }, now: Date): Promise<boolean> {
  const windowFrom = new Date(now.getTime() - SERVICE_WINDOW_MS);
  const today = new Date(`${now.toISOString().slice(0, 10)}T00:00:00.000Z`);
  const [made] = await tx.$queryRaw<{ id: string }[]>`
    WITH reachable AS (
      SELECT id FROM conversations
      WHERE id = ${conversationId}::uuid AND opted_out_at IS NULL AND last_inbound_at > ${windowFrom}::timestamptz
        AND (paused_until IS NULL OR paused_until <= ${now}::timestamptz)
        -- One holding message waiting to go out says it for every item opened meanwhile.
        AND NOT EXISTS (SELECT 1 FROM replies r WHERE r.conversation_id = conversations.id AND r.kind = 'holding' AND r.state = 'ready')
        AND NOT (${options.onceToday} AND EXISTS (
          SELECT 1 FROM dead_letters d WHERE d.conversation_id = conversations.id AND d.source = 'budget'
            AND d.holding_reply_id IS NOT NULL AND d.created_at >= ${today}::timestamptz))
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
      if (letter && letter !== "csat_dropped") letters.push(letter);
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
    const letter = await deadLetterIn(tx, input, "unanswered", now);
    return letter === "csat_dropped" ? null : letter; // a bound message's reply is never a CSAT one
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
 * A business action whose outcome nobody knows (state/steps.ts, leaveToolCallUnknown): an item
 * of the conversation, not of the reply, which is answered as usual; at most one per tool call.
 */
export async function openToolUnknownItem(
  tx: Tx,
  call: { id: string; name: string; conversationId: string; replyId: string },
  lastAnswer: string,
  now: Date,
): Promise<void> {
  await tx.deadLetter.create({
    data: {
      conversationId: call.conversationId,
      dedupKey: `tool.${call.id}`,
      source: "tool",
      code: "tool_unknown",
      reason: `The business's ${call.name} never confirmed whether it acted: ${lastAnswer}`,
      detail: { toolCallId: call.id, tool: call.name, replyId: call.replyId },
      createdAt: now,
    },
  });
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
