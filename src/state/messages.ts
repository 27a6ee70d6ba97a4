import { type Db, Prisma } from "../db/client.ts";
import { execute } from "../db/sql.ts";

/**
 * The customer's messages once stored (inbound.ts stores them): what changes them
 * after, besides the reply job's bind (conversations.ts). README.md in this folder has the
 * whole machine.
 *
 *   waiting ─applyEdit─▶ waiting, with the edited words     (not answered yet: Claude reads the new words)
 *   any ─recordDeletion─▶ erased (and skipped, if it was waiting)
 *   waiting ─bindStranded─▶ bound to a dead reply           (the reconciler gave up on it)
 *   waiting for its words ─storeTranscript─▶ waiting, with the voice note's words
 *   waiting for its words ─voiceNoteUnheard─▶ waiting for MEDIA_REPLY | skipped (MEDIA_REPLY empty)
 */

type Tx = Prisma.TransactionClient;

/**
 * An edit of a message not answered yet (WHATSAPP.md §11): its words are replaced, so Claude
 * reads the edited ones and answers once. Only the customer's own message, with this business
 * number, and only while it waits: a reply job that read the old words and has not bound them
 * yet plans again (its bind checks the words it read). False when there was nothing to edit.
 */
export async function applyEdit(db: Db, edit: { wamid: string; contactId: string; phoneNumberId: string; text: string }): Promise<boolean> {
  const applied = await execute(
    db,
    Prisma.sql`
    UPDATE inbound_messages m SET text = ${edit.text}
    FROM conversations c
    WHERE m.wamid = ${edit.wamid} AND c.id = m.conversation_id AND c.contact_id = ${edit.contactId}::uuid
      AND c.phone_number_id = ${edit.phoneNumberId} AND m.reply_id IS NULL AND m.skip_reason IS NULL`,
  );
  return applied > 0;
}

/**
 * The customer took a message back (`revoke`, WHATSAPP.md §11): its words are erased and, if it
 * was not answered yet, it never is. When the deletion is stored before the message itself (the
 * two jobs run in either order), it leaves the wamid taken by an erased row, so the message,
 * arriving later, is a known duplicate: never stored with its words, never answered. The
 * unique wamid decides, with no window between two jobs. True when it erased or took the wamid.
 */
export async function recordDeletion(db: Db, conversationId: string, wamid: string, deletedAt: Date, now: Date): Promise<boolean> {
  const changed = await execute(
    db,
    Prisma.sql`
    INSERT INTO inbound_messages AS m (id, wamid, conversation_id, type, skip_reason, sent_at, payload, deleted_at)
    VALUES (gen_random_uuid(), ${wamid}, ${conversationId}::uuid, 'deleted', 'deleted by the customer', ${deletedAt}, '{"deleted":true}'::jsonb, ${now}::timestamptz)
    ON CONFLICT (wamid) DO UPDATE SET
      text = NULL, canned_text = NULL, transcript = NULL, payload = '{"deleted":true}'::jsonb, deleted_at = ${now}::timestamptz,
      skip_reason = CASE WHEN m.reply_id IS NULL AND m.skip_reason IS NULL THEN 'deleted by the customer' ELSE m.skip_reason END
    WHERE m.conversation_id = ${conversationId}::uuid AND m.deleted_at IS NULL`,
  );
  return changed > 0;
}

/**
 * A voice note waiting for its words: an audio message, not answered, skipped or deleted, with
 * its "[Voice note]" text and neither a transcript nor a configured answer yet
 * (src/replies/voice-notes.ts). Read by the take (conversations.ts) and checked by the two
 * transitions below.
 */
export const AWAITING_WORDS = Prisma.sql`(m.type = 'audio' AND m.transcript IS NULL AND m.canned_text IS NULL AND m.text IS NOT NULL
  AND m.reply_id IS NULL AND m.skip_reason IS NULL AND m.deleted_at IS NULL)`;

/**
 * The voice note's words, once: stored with the message and joined to its text (which history,
 * staff and Claude read), so they are never asked of the transcriber again. Not fenced: the
 * words are paid for and true whoever holds the conversation, as a draft stored for the new
 * holder is (replies.ts); only a message still waiting for them takes them. False when it was
 * not (deleted, or heard by another run meanwhile).
 */
export async function storeTranscript(db: Db, messageId: string, words: string): Promise<boolean> {
  const stored = await execute(
    db,
    Prisma.sql`
    UPDATE inbound_messages m SET transcript = ${words}, text = m.text || ' ' || ${words}
    WHERE m.id = ${messageId}::uuid AND ${AWAITING_WORDS}`,
  );
  return stored > 0;
}

/**
 * A voice note that cannot be heard (no transcriber, a permanent failure, retries spent) gets
 * today's honest answer instead of Claude's: `cannedText`, or a skip with `skipReason` when
 * MEDIA_REPLY is empty. Not fenced, as storeTranscript: only a message still waiting changes.
 */
export async function voiceNoteUnheard(db: Db, messageId: string, outcome: { cannedText: string } | { skipReason: string }): Promise<boolean> {
  const cannedText = "cannedText" in outcome ? outcome.cannedText : null;
  const skipReason = "skipReason" in outcome ? outcome.skipReason : null;
  const changed = await execute(
    db,
    Prisma.sql`
    UPDATE inbound_messages m SET text = NULL, canned_text = ${cannedText}, skip_reason = ${skipReason}
    WHERE m.id = ${messageId}::uuid AND ${AWAITING_WORDS}`,
  );
  return changed > 0;
}

/**
 * Nobody will answer these messages by themselves (law 6): the reconciler gave up on a
 * conversation's unanswered messages, or one message could never be read. They are bound to
 * one new reply, dead from the start and without a draft (staff write it, or regenerate),
 * inside the transaction that dead-letters it: all of the conversation's waiting messages, or
 * only `messageId` when given. Null when none was waiting (a reply job bound it first).
 */
export async function bindStranded(tx: Tx, conversationId: string, now: Date, messageId?: string): Promise<string | null> {
  const only = messageId ?? null;
  const [row] = await tx.$queryRaw<{ id: string }[]>`
    WITH waiting AS (
      SELECT id FROM inbound_messages
      WHERE conversation_id = ${conversationId}::uuid AND reply_id IS NULL AND skip_reason IS NULL AND (${only}::uuid IS NULL OR id = ${only}::uuid)
      FOR UPDATE
    ),
    made AS (
      INSERT INTO replies (id, conversation_id, state, updated_at)
      SELECT gen_random_uuid(), ${conversationId}::uuid, 'dead', ${now}::timestamptz WHERE EXISTS (SELECT 1 FROM waiting)
      RETURNING id
    ),
    bound AS (UPDATE inbound_messages m SET reply_id = made.id FROM made, waiting w WHERE m.id = w.id)
    SELECT id FROM made`;
  return row?.id ?? null;
}
