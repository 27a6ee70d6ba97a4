import { type Db, isUniqueViolation, Prisma } from "../db/client.ts";
import { queryRows } from "../db/sql.ts";
import type { Sender } from "../whatsapp/webhook-payload.ts";
import { resolveContact } from "./contacts.ts";

/**
 * An inbound message's home: the one statement that stores it, with its contact and its
 * conversation (created on first contact, the 24-hour window extended to its time). What
 * changes it afterwards (its binding to a reply, an edit, a deletion) is a transition of
 * this folder's.
 */

/** What is stored of a message, decided before (src/jobs/inbound.ts `whatItAsks`). */
export interface InboundRecord {
  wamid: string;
  type: string;
  text: string | null;
  cannedText: string | null;
  control: string | null;
  skipReason: string | null;
  refersTo: string | null;
  arrival: bigint | null;
  sentAt: Date;
  payload: unknown;
}

export interface Recorded {
  conversationId: string;
  /** False when the wamid was stored before: a redelivery, or a deletion that came first. */
  inserted: boolean;
  /** The row this call inserted (none when `inserted` is false). */
  messageId: string | null;
  /** Why the stored row is not to be answered (for a redelivery, the earlier row's reason). */
  skipReason: string | null;
}

/**
 * Stores the message in one statement: upserts the contact by the one identifier it is known
 * by, upserts the conversation (which extends the window: the newest of Meta's timestamps
 * wins), inserts the message unless its wamid is there already, and cancels a CSAT ask waiting
 * for the customer's quiet. A sender whose phone and BSUID
 * belong to two contacts (they must be merged) is resolved first, then stored the same way.
 */
export async function recordInbound(db: Db, who: { sender: Sender } | { contactId: string }, phoneNumberId: string, message: InboundRecord): Promise<Recorded> {
  let recorded: Recorded | undefined;
  try {
    recorded = await storeOnce(db, "contactId" in who ? Prisma.sql`SELECT ${who.contactId}::uuid AS id` : contactUpsert(who.sender), phoneNumberId, message);
  } catch (error) {
    // Two rows for one person (the phone's and the BSUID's), or a new customer's first two
    // deliveries at once: the slow path merges or finds the row, then the same statement.
    if (!("sender" in who) || !isUniqueViolation(error)) throw error;
  }
  // No row also when the number came with another person's BSUID (a recycled number): the
  // slow path tells the two apart.
  if (!recorded) {
    if (!("sender" in who)) throw new Error(`message ${message.wamid}: no conversation was stored for contact ${who.contactId}`);
    const contact = await resolveContact(db, who.sender);
    recorded = await storeOnce(db, Prisma.sql`SELECT ${contact.id}::uuid AS id`, phoneNumberId, message);
    if (!recorded) throw new Error(`message ${message.wamid}: no conversation was stored`);
  }
  if (recorded.inserted) return recorded;
  // Stored before: its own reason counts (a deletion stored first left a tombstone).
  const [earlier] = await queryRows<{ skipReason: string | null }>(
    db,
    Prisma.sql`SELECT skip_reason AS "skipReason" FROM inbound_messages WHERE wamid = ${message.wamid}`,
  );
  return { ...recorded, skipReason: earlier?.skipReason ?? null };
}

/**
 * The contact, by its phone number when Meta gives one (else its BSUID), created or
 * completed. When the sender also brings a BSUID another contact holds, the insert or update
 * violates contacts_user_id_key: the caller merges the two (resolveContact).
 */
function contactUpsert(sender: Sender): Prisma.Sql {
  if (!sender.waId && !sender.userId) throw new Error("a sender needs a phone number or a BSUID");
  const arbiter = sender.waId ? Prisma.sql`(wa_id)` : Prisma.sql`(user_id)`;
  return Prisma.sql`
    INSERT INTO contacts AS ct (id, wa_id, user_id, parent_user_id, username, name, updated_at)
    VALUES (gen_random_uuid(), ${sender.waId ?? null}, ${sender.userId ?? null}, ${sender.parentUserId ?? null}, ${sender.username ?? null}, ${sender.name ?? null}, now())
    ON CONFLICT ${arbiter} DO UPDATE SET
      user_id = COALESCE(EXCLUDED.user_id, ct.user_id),
      parent_user_id = COALESCE(EXCLUDED.parent_user_id, ct.parent_user_id),
      username = COALESCE(EXCLUDED.username, ct.username),
      name = COALESCE(EXCLUDED.name, ct.name),
      updated_at = now()
    -- Another BSUID on this number is another person (identity.ts, recycled): no row, the slow path.
    WHERE ct.user_id IS NULL OR EXCLUDED.user_id IS NULL OR ct.user_id = EXCLUDED.user_id
    RETURNING ct.id`;
}

async function storeOnce(db: Db, contact: Prisma.Sql, phoneNumberId: string, m: InboundRecord): Promise<Recorded | undefined> {
  const [row] = await queryRows<Recorded>(
    db,
    Prisma.sql`
    WITH contact AS (${contact}),
    conversation AS (
      INSERT INTO conversations AS c (id, phone_number_id, contact_id, last_inbound_at, last_message_at, updated_at)
      SELECT gen_random_uuid(), ${phoneNumberId}, contact.id, ${m.sentAt}, now(), now() FROM contact
      ON CONFLICT (phone_number_id, contact_id) DO UPDATE SET last_inbound_at = GREATEST(c.last_inbound_at, EXCLUDED.last_inbound_at),
        -- The list's order (GET /admin/conversations): when it reached us, as the message's created_at.
        last_message_at = GREATEST(c.last_message_at, EXCLUDED.last_message_at)
      RETURNING c.id
    ),
    message AS (
      INSERT INTO inbound_messages (id, wamid, conversation_id, type, text, canned_text, control, skip_reason, refers_to, arrival, sent_at, payload)
      SELECT gen_random_uuid(), ${m.wamid}, conversation.id, ${m.type}, ${m.text}, ${m.cannedText}, ${m.control}, ${m.skipReason}, ${m.refersTo},
             ${m.arrival}::bigint, ${m.sentAt}, ${JSON.stringify(m.payload)}::jsonb
      FROM conversation
      ON CONFLICT (wamid) DO NOTHING
      RETURNING id, skip_reason
    ),
    -- The customer wrote: a CSAT ask waiting for their quiet is cancelled (state/csat.ts).
    cancelled AS (
      UPDATE csat_asks a SET state = 'cancelled', reason = 'the customer wrote', updated_at = now()
      FROM conversation, message WHERE a.conversation_id = conversation.id AND a.state = 'pending'
    )
    SELECT conversation.id AS "conversationId", EXISTS (SELECT 1 FROM message) AS inserted, (SELECT id FROM message) AS "messageId",
           (SELECT skip_reason FROM message) AS "skipReason"
    FROM conversation`,
  );
  return row;
}
