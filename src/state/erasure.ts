import type { Db, Prisma } from "../db/client.ts";
import { recordDataRequest } from "./data-requests.ts";

/**
 * A customer erased on request (issue 35.2; GDPR article 17), in one transaction: every
 * conversation of theirs fenced off first (a reply being written for them is never sent: its run
 * no longer holds the conversation), then every word and identifier emptied, row by row, kept
 * as rows so that counts, costs and ratings stay, linked to nobody:
 *
 *   contact        phone, BSUIDs, @username, name emptied; erased_at set (gone to every route)
 *   messages       text, transcript, Meta's payload (captions, media ids), wamid, what it refers to
 *   replies        text, citations; their parts' text, wamid, template values; their copies' wamids
 *   Claude's steps content (tool inputs included); tool calls' input, answer and request
 *   items          detail, note, dedup key (a wamid); their history's details (words staff wrote)
 *
 * A wamid is emptied too: Meta's encode the phone number. What stays: the kinds, states, times,
 * tokens, prices and ratings. Returns how many rows of each kind were emptied and what the
 * caller must look for in Redis (the jobs that carried them), or null for a contact unknown or
 * erased before. The audit row (data_requests) is written in the same transaction.
 */

type Tx = Prisma.TransactionClient;

export interface Erased {
  /** The audit row: it keeps `needles` until Redis is clean (data-requests.ts, finishErasure). */
  requestId: string;
  counts: Record<string, number>;
  /** What the jobs of this customer may carry: their identifiers, wamids and the conversations' and replies' ids. */
  needles: string[];
  /** The identity as it was: its keyed hash is the audit's. */
  identity: { waId: string | null; userId: string | null };
}

export async function eraseContact(
  db: Db,
  contactId: string,
  audit: { actor: string; hashOf(identity: Erased["identity"]): string },
  now: Date,
): Promise<Erased | null> {
  return db.$transaction(async (tx) => {
    const contact = await lockContact(tx, contactId);
    if (!contact) return null;
    // First: whatever run holds one of these conversations loses it, so it sends nothing more.
    const conversations = await fenceConversations(tx, contactId, now);
    const { replies, wamids } = await repliesAndWamidsOf(tx, conversations);
    // One statement after another on the transaction's connection, in the order they always ran;
    // the counts keep that order, and the answer and the log show them in it.
    const counts: Record<string, number> = {
      ...(await emptyMessages(tx, conversations)),
      ...(await emptyReplies(tx, replies)),
      ...(await emptyItems(tx, conversations)),
      ...(await settleUnfinishedWork(tx, conversations, now)),
      contacts: await emptyContact(tx, contactId, now),
      conversations: conversations.length,
    };
    const identity = { waId: contact.waId, userId: contact.userId };
    const found = [contact.waId, contact.userId, contact.parentUserId, contact.username, ...conversations, ...replies, ...wamids];
    const needles = found.filter((n): n is string => typeof n === "string" && n.length > 0);
    // In the same transaction: no erase without its record, nor a record without the erase; and
    // the record keeps what finds the customer in Redis until Redis is clean of them.
    const request = await recordDataRequest(
      tx,
      { kind: "erase", actor: audit.actor, contactId, identityHash: audit.hashOf(identity), counts, redisNeedles: needles },
      now,
    );
    return { requestId: request.id, counts, needles, identity };
  });
}

/** The contact's identifiers as they were, locked so that a second erase at the same time waits and then finds it erased. */
async function lockContact(tx: Tx, contactId: string) {
  const [contact] = await tx.$queryRaw<{ waId: string | null; userId: string | null; parentUserId: string | null; username: string | null }[]>`
    SELECT wa_id AS "waId", user_id AS "userId", parent_user_id AS "parentUserId", username
    FROM contacts WHERE id = ${contactId}::uuid AND erased_at IS NULL FOR UPDATE`;
  return contact;
}

/** Raises every conversation's fence (law 8), so no run that took one before the erase can write or send for it; returns their ids. */
async function fenceConversations(tx: Tx, contactId: string, now: Date): Promise<string[]> {
  const fenced = await tx.$queryRaw<{ id: string }[]>`
    UPDATE conversations SET reply_fence = reply_fence + 1, updated_at = ${now}::timestamptz
    WHERE contact_id = ${contactId}::uuid RETURNING id::text AS id`;
  return fenced.map((c) => c.id);
}

/** The replies' ids and every wamid, read before they are emptied: the jobs in Redis that carried them are looked for by them. */
async function repliesAndWamidsOf(tx: Tx, conversations: string[]): Promise<{ replies: string[]; wamids: string[] }> {
  const [ids] = await tx.$queryRaw<{ replies: string[] | null; wamids: string[] | null }[]>`
    SELECT (SELECT array_agg(r.id::text) FROM replies r WHERE r.conversation_id = ANY(${conversations}::uuid[])) AS replies,
           (SELECT array_agg(w) FROM (
              SELECT m.wamid AS w FROM inbound_messages m WHERE m.conversation_id = ANY(${conversations}::uuid[])
              UNION ALL SELECT p.wamid FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
                WHERE r.conversation_id = ANY(${conversations}::uuid[]) AND p.wamid IS NOT NULL
              UNION ALL SELECT o.wamid FROM outbound_copies o JOIN outbound_messages p ON p.id = o.part_id JOIN replies r ON r.id = p.reply_id
                WHERE r.conversation_id = ANY(${conversations}::uuid[])) w) AS wamids`;
  return { replies: ids?.replies ?? [], wamids: ids?.wamids ?? [] };
}

/** The customer's words: text, transcript, Meta's payload (captions, media ids) down to its type; a wamid encodes their phone. */
async function emptyMessages(tx: Tx, conversations: string[]) {
  return {
    messages: await tx.$executeRaw`
      UPDATE inbound_messages SET text = NULL, transcript = NULL, payload = jsonb_build_object('type', type),
        wamid = 'erased.' || id::text, refers_to = NULL
      WHERE conversation_id = ANY(${conversations}::uuid[])`,
  };
}

/** What the bot wrote to them and how it got there: each repeats or quotes the customer's words. Tokens and prices stay. */
async function emptyReplies(tx: Tx, replies: string[]) {
  return {
    replies: await tx.$executeRaw`UPDATE replies SET text = NULL, citations = NULL WHERE id = ANY(${replies}::uuid[])`,
    parts: await tx.$executeRaw`
      UPDATE outbound_messages SET text = '', template_parameters = NULL,
        wamid = CASE WHEN wamid IS NULL THEN NULL ELSE 'erased.' || id::text END
      WHERE reply_id = ANY(${replies}::uuid[])`,
    copies: await tx.$executeRaw`
      UPDATE outbound_copies o SET wamid = 'erased.' || o.part_id::text || '.' || md5(o.wamid)
      FROM outbound_messages p WHERE p.id = o.part_id AND p.reply_id = ANY(${replies}::uuid[])`,
    steps: await tx.$executeRaw`UPDATE claude_steps SET content = '[]'::jsonb WHERE reply_id = ANY(${replies}::uuid[])`,
    toolCalls: await tx.$executeRaw`UPDATE tool_calls SET input = '{}'::jsonb, answer = NULL, request = NULL WHERE reply_id = ANY(${replies}::uuid[])`,
  };
}

/** Staff's items about them: the words staff wrote, and the dedup key, which is a wamid. */
async function emptyItems(tx: Tx, conversations: string[]) {
  return {
    items: await tx.$executeRaw`
      UPDATE dead_letters SET detail = NULL, note = NULL, dedup_key = 'erased.' || id::text
      WHERE conversation_id = ANY(${conversations}::uuid[])`,
    itemHistory: await tx.$executeRaw`
      UPDATE dead_letter_actions a SET detail = NULL FROM dead_letters d
      WHERE d.id = a.dead_letter_id AND d.conversation_id = ANY(${conversations}::uuid[])`,
  };
}

/**
 * Nothing left to do for them: an answer being written is never stored or sent (its run is
 * fenced off, and no other takes it up), their unanswered words are settled, an ask how it went
 * is not made.
 */
async function settleUnfinishedWork(tx: Tx, conversations: string[], now: Date) {
  return {
    unfinishedReplies: await tx.$executeRaw`
      UPDATE replies SET state = 'dead', generation_deadline = NULL, updated_at = ${now}::timestamptz
      WHERE conversation_id = ANY(${conversations}::uuid[]) AND state IN ('generating', 'ready')`,
    unansweredMessages: await tx.$executeRaw`
      UPDATE inbound_messages SET skip_reason = 'the customer was erased'
      WHERE conversation_id = ANY(${conversations}::uuid[]) AND reply_id IS NULL AND skip_reason IS NULL`,
    pendingAsks: await tx.$executeRaw`
      UPDATE csat_asks SET state = 'cancelled', reason = 'the customer was erased', updated_at = ${now}::timestamptz
      WHERE conversation_id = ANY(${conversations}::uuid[]) AND state = 'pending'`,
  };
}

/** Last, the contact itself: once erased_at is set, every route treats it as gone. */
async function emptyContact(tx: Tx, contactId: string, now: Date): Promise<number> {
  return tx.$executeRaw`
    UPDATE contacts SET wa_id = NULL, user_id = NULL, parent_user_id = NULL, username = NULL, name = NULL,
      erased_at = ${now}::timestamptz, updated_at = ${now}::timestamptz
    WHERE id = ${contactId}::uuid`;
}
