import { type Db, isUniqueViolation, Prisma } from "../db/client.ts";
import type { Contact } from "../generated/prisma/client.ts";
import type { Sender } from "../whatsapp/webhook-payload.ts";
import { moveConversations } from "./conversations.ts";

/**
 * Who a customer is: one person to one business portfolio (WHATSAPP.md §9). Meta names them
 * by phone number, by business-scoped user id (BSUID), or both; a contact holds whichever it
 * has been told, linked the first time one webhook carries both, so one conversation goes on
 * across phone-only → both → BSUID-only messages. A BSUID changes when the person changes
 * phone number (`user_changed_user_id`): the contact follows it.
 */

type Tx = Prisma.TransactionClient;

/** The contact for these identifiers, created, completed or merged as they require. */
export async function resolveContact(db: Db, sender: Sender): Promise<Contact> {
  if (!sender.waId && !sender.userId) throw new Error("a sender needs a phone number or a BSUID");
  for (let attempt = 1; ; attempt++) {
    try {
      return await db.$transaction((tx) => resolveIn(tx, sender));
    } catch (error) {
      // Two deliveries of a new customer at once: the second finds the first's row next time.
      if (!isUniqueViolation(error) || attempt >= 3) throw error;
    }
  }
}

async function resolveIn(tx: Tx, sender: Sender): Promise<Contact> {
  let byPhone = sender.waId ? await tx.contact.findUnique({ where: { waId: sender.waId } }) : null;
  const byUser = sender.userId ? await tx.contact.findUnique({ where: { userId: sender.userId } }) : null;
  if (byPhone && recycled(byPhone, sender)) {
    // The number now belongs to someone else: its earlier holder keeps their BSUID, their own
    // conversations and history, but no longer the number, which would now reach a stranger.
    await tx.contact.update({ where: { id: byPhone.id }, data: { waId: null } });
    byPhone = null;
  }
  // Known twice over (first by phone, then by BSUID alone, now by both): one person.
  const contact = byPhone && byUser && byPhone.id !== byUser.id ? await mergeContacts(tx, byPhone, byUser) : (byPhone ?? byUser);
  const seen = {
    ...(sender.name ? { name: sender.name } : {}),
    ...(sender.username ? { username: sender.username } : {}),
    ...(sender.parentUserId ? { parentUserId: sender.parentUserId } : {}),
  };
  if (!contact) return tx.contact.create({ data: { waId: sender.waId ?? null, userId: sender.userId ?? null, ...seen } });
  return tx.contact.update({
    where: { id: contact.id },
    data: { ...(sender.waId && contact.waId !== sender.waId ? { waId: sender.waId } : {}), ...(sender.userId ? { userId: sender.userId } : {}), ...seen },
  });
}

/**
 * A BSUID stays with a person for as long as they keep their number (WHATSAPP.md §9): a number
 * that comes with a BSUID other than the one its contact holds was given up and handed to
 * someone else (Meta recycles numbers). Two people, never one merged history.
 */
export const recycled = (holder: Pick<Contact, "userId">, sender: Sender): boolean =>
  holder.userId !== null && sender.userId !== undefined && holder.userId !== sender.userId;

/**
 * The person's BSUID changed (`user_changed_user_id`, `user_id_update`): their contact takes
 * the new one. If the new BSUID has already written (its own contact), the two become one.
 * Returns the contact, or null when we never heard of the old BSUID.
 */
export async function changeUserId(db: Db, change: { previous: string; current: string }): Promise<Contact | null> {
  return db.$transaction(async (tx) => {
    const before = await tx.contact.findUnique({ where: { userId: change.previous } });
    if (!before) return null;
    const after = await tx.contact.findUnique({ where: { userId: change.current } });
    const contact = after && after.id !== before.id ? await mergeContacts(tx, before, after) : before;
    return tx.contact.update({ where: { id: contact.id }, data: { userId: change.current } });
  });
}

/**
 * Folds `gone` into `keep`: its conversations become keep's, merged into keep's own where both
 * have one with the same business number (conversations.ts,
 * moveConversations). `gone`'s identifiers are handed over.
 */
async function mergeContacts(tx: Tx, keep: Contact, gone: Contact): Promise<Contact> {
  await moveConversations(tx, { contactId: gone.id }, { contactId: keep.id });
  await tx.contact.delete({ where: { id: gone.id } });
  return tx.contact.update({
    where: { id: keep.id },
    data: {
      waId: keep.waId ?? gone.waId,
      userId: keep.userId ?? gone.userId,
      parentUserId: keep.parentUserId ?? gone.parentUserId,
      username: keep.username ?? gone.username,
      name: keep.name ?? gone.name,
      marketingOptedOutAt: keep.marketingOptedOutAt ?? gone.marketingOptedOutAt,
    },
  });
}

/**
 * The customer's conversation with one business number, created on first contact, for the
 * business's own messages (echoes of the WhatsApp Business app), which never extend the
 * 24-hour window (WHATSAPP.md §7). A customer's message is stored with its conversation in
 * one statement instead (inbound.ts), which extends it.
 */
export async function conversationWith(db: Db, where: { phoneNumberId: string; contactId: string }) {
  return db.conversation.upsert({ where: { phoneNumberId_contactId: where }, create: where, update: {} });
}

/** How staff and logs name a contact: the phone, else @username, else the BSUID. */
export function contactLabel(contact: Pick<Contact, "waId" | "userId" | "username">): string {
  return contact.waId ? `+${contact.waId}` : (contact.username ?? contact.userId ?? "(unknown)");
}

/** LIKE's wildcards in what a person typed taken literally, for "any part of". */
const anyPart = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/**
 * Whether contact `alias` is the one a person's search names: any part of its name, phone,
 * @username or BSUID (the contacts' trigram index), a phone written as people write it
 * ("+44 7700-900 123" finds 447700900123).
 */
export function contactFoundBy(alias: string, q: string): Prisma.Sql {
  const part = anyPart(q.replace(/^[+@]/, ""));
  const digits = /^[+\d\s().-]+$/.test(q) && /\d/.test(q) ? anyPart(q.replace(/\D/g, "")) : null;
  const column = (name: string) => Prisma.raw(`${alias}.${name}`);
  return Prisma.sql`(${column("wa_id")} ILIKE ${part} OR ${column("wa_id")} LIKE ${digits}::text OR ${column("user_id")} ILIKE ${part}
    OR ${column("parent_user_id")} ILIKE ${part} OR ${column("username")} ILIKE ${part} OR ${column("name")} ILIKE ${part})`;
}
