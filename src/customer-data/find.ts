import type { Db } from "../db/client.ts";
import { contactFoundBy, contactLabel } from "../state/contacts.ts";

/**
 * A customer's data, found (issue 35.1): the contacts whose name, phone, @username or BSUID
 * holds what a person typed (the trigram index of contacts), with how many conversations each
 * has and when they last moved.
 */

export const CONTACTS_PAGE = 50;

export async function findContacts(db: Db, q: string) {
  const rows = await db.$queryRaw<
    {
      id: string;
      waId: string | null;
      userId: string | null;
      username: string | null;
      name: string | null;
      conversations: number;
      lastMessageAt: Date | null;
    }[]
  >`
    SELECT ct.id::text AS id, ct.wa_id AS "waId", ct.user_id AS "userId", ct.username, ct.name,
           (SELECT count(*) FROM conversations c WHERE c.contact_id = ct.id)::int AS conversations,
           (SELECT max(c.last_message_at) FROM conversations c WHERE c.contact_id = ct.id) AS "lastMessageAt"
    FROM contacts ct
    WHERE ${contactFoundBy("ct", q)}
    ORDER BY "lastMessageAt" DESC NULLS LAST, ct.id
    LIMIT ${CONTACTS_PAGE}`;
  return rows.map((row) => ({
    id: row.id,
    label: contactLabel(row),
    name: row.name,
    phone: row.waId,
    bsuid: row.userId,
    username: row.username,
    conversations: row.conversations,
    lastMessageAt: row.lastMessageAt,
  }));
}

/** The live contact a phone (as people write it), an @username or a BSUID names exactly; null when none does. */
export async function findContactByIdentity(db: Db, identity: string) {
  const text = identity.trim();
  const where = text.startsWith("@")
    ? { username: text }
    : /^[+\d\s().-]+$/.test(text)
      ? { waId: text.replace(/\D/g, "") }
      : { OR: [{ userId: text }, { parentUserId: text }] };
  return db.contact.findFirst({ where: { ...where, erasedAt: null } });
}
