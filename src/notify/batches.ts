import type { Db } from "../db/client.ts";

/**
 * The notifications' own rows (staff_notifications, staff_notified_items): nothing else writes
 * them, and they never write a dead letter (law 13: those are src/state/'s).
 *
 *   makeBatch: open dead letters nobody was told of ─▶ one new notification (pending); of a
 *              number's budget stops, the day's first only
 *   recordChannelSent: a channel took it ─▶ its time; all of them ─▶ delivered
 *   recordFailure: an attempt failed ─▶ attempts + 1, last error (still pending)
 */

export type Channel = "webhook" | "email";

/** Lists at most this many items; more wait for the next notification. */
const MAX_ITEMS = 100;

/**
 * A new notification of the open dead letters nobody was told of, or null when it is not yet
 * time: none are waiting, the oldest of them has waited less than `batchMs` (the batch's
 * window opens with its first item, so what comes in meanwhile joins it), or the last
 * notification is less than `batchMs` old. One transaction, serialised across worker
 * processes by an advisory lock (the clock's check would race without it); the items'
 * primary key is the guarantee that no dead letter is in two notifications.
 */
export async function makeBatch(db: Db, channels: readonly Channel[], batchMs: number, now: Date): Promise<{ id: string; items: number } | null> {
  return db.$transaction(async (tx) => {
    await tx.$queryRaw`SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.staff_notifications'))::text`;
    const since = new Date(now.getTime() - batchMs);
    const last = await tx.staffNotification.findFirst({ orderBy: { createdAt: "desc" }, select: { createdAt: true } });
    if (last && last.createdAt > since) return null;
    // A number whose daily budget is spent is told of once that UTC day: its later budget items
    // wait on the page, unannounced.
    const found = await tx.$queryRaw<{ id: string; createdAt: Date; budgetDay: string | null }[]>`
      SELECT d.id, d.created_at AS "createdAt",
             CASE WHEN d.source = 'budget' THEN c.phone_number_id || ' ' || to_char(d.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') END AS "budgetDay"
      FROM dead_letters d JOIN conversations c ON c.id = d.conversation_id
      WHERE d.state = 'open' AND NOT EXISTS (SELECT 1 FROM staff_notified_items n WHERE n.dead_letter_id = d.id)
        AND NOT (d.source = 'budget' AND EXISTS (
          SELECT 1 FROM staff_notified_items n JOIN dead_letters b ON b.id = n.dead_letter_id JOIN conversations bc ON bc.id = b.conversation_id
          WHERE b.source = 'budget' AND bc.phone_number_id = c.phone_number_id
            AND (b.created_at AT TIME ZONE 'UTC')::date = (d.created_at AT TIME ZONE 'UTC')::date))
      ORDER BY d.created_at, d.id LIMIT ${MAX_ITEMS}`;
    const budgetDays = new Set<string>();
    const waiting = found.filter((item) => !item.budgetDay || (!budgetDays.has(item.budgetDay) && budgetDays.add(item.budgetDay)));
    if (waiting.length === 0 || waiting[0]!.createdAt > since) return null;
    const batch = await tx.staffNotification.create({ data: { channels: [...channels], createdAt: now }, select: { id: true } });
    await tx.staffNotifiedItem.createMany({ data: waiting.map((item) => ({ deadLetterId: item.id, notificationId: batch.id })) });
    return { id: batch.id, items: waiting.length };
  });
}

export interface PendingBatch {
  id: string;
  channels: Channel[];
  webhookSentAt: Date | null;
  emailSentAt: Date | null;
  deliveredAt: Date | null;
  createdAt: Date;
}

export async function findBatch(db: Db, id: string): Promise<PendingBatch | null> {
  const row = await db.staffNotification.findUnique({
    where: { id },
    select: { id: true, channels: true, webhookSentAt: true, emailSentAt: true, deliveredAt: true, createdAt: true },
  });
  return row ? { ...row, channels: row.channels.filter(isChannel) } : null;
}

const isChannel = (value: string): value is Channel => value === "webhook" || value === "email";

/** Notifications not yet delivered to every channel, oldest first: the notifier drives them again. */
export async function undeliveredBatches(db: Db, limit: number): Promise<{ id: string; createdAt: Date }[]> {
  return db.staffNotification.findMany({ where: { deliveredAt: null }, orderBy: { createdAt: "asc" }, take: limit, select: { id: true, createdAt: true } });
}

/** A channel took the notification: recorded at once, so no retry sends it there again. Delivered once every channel has. */
export async function recordChannelSent(db: Db, id: string, channel: Channel, now: Date): Promise<void> {
  const row = await db.staffNotification.update({
    where: { id },
    data: channel === "webhook" ? { webhookSentAt: now } : { emailSentAt: now },
    select: { channels: true, webhookSentAt: true, emailSentAt: true },
  });
  const done = row.channels.every((c) => (c === "webhook" ? row.webhookSentAt : c === "email" ? row.emailSentAt : true));
  if (done) await db.staffNotification.updateMany({ where: { id, deliveredAt: null }, data: { deliveredAt: now } });
}

export async function recordFailure(db: Db, id: string, error: string): Promise<void> {
  await db.staffNotification.update({ where: { id }, data: { attempts: { increment: 1 }, lastError: error.slice(0, 500) } });
}

/** What a notification lists: each item's reason and customer, never the messages themselves. */
export interface BatchItem {
  id: string;
  state: string;
  source: string;
  code: string | null;
  createdAt: Date;
  phoneNumberId: string;
  contact: { name: string | null; username: string | null; waId: string | null };
}

export async function batchItems(db: Db, id: string): Promise<BatchItem[]> {
  const rows = await db.staffNotifiedItem.findMany({
    where: { notificationId: id },
    select: {
      deadLetter: {
        select: {
          id: true,
          state: true,
          source: true,
          code: true,
          createdAt: true,
          conversation: { select: { phoneNumberId: true, contact: { select: { name: true, username: true, waId: true } } } },
        },
      },
    },
  });
  return rows
    .map(({ deadLetter: d }) => ({
      id: d.id,
      state: d.state,
      source: d.source,
      code: d.code,
      createdAt: d.createdAt,
      phoneNumberId: d.conversation.phoneNumberId,
      contact: d.conversation.contact,
    }))
    .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime());
}
