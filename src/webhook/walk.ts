import type { z } from "zod";
import type { BusinessEvent, InboundJobData, StatusJobData, WebhookJob } from "../queue/catalog.ts";
import {
  changeSchema,
  contactSchema,
  echoSchema,
  entrySchema,
  envelopeSchema,
  inboundMessageSchema,
  isPhoneNumberId,
  preferenceSchema,
  type Sender,
  statusSchema,
  userIdUpdateSchema,
  valueSchema,
} from "../whatsapp/webhook-payload.ts";

/**
 * Every entry × change × item of a delivery (law 9), each parsed on its own so one bad item
 * never sinks the others, into the jobs it becomes (src/queue/catalog.ts) or a reason to
 * ignore it.
 */

/** A customer's message: its inbound job's data, and its place among the messages of this delivery (Meta lists them in the order they were written). */
export type InboundItem = { kind: "message"; position: number; sender: Sender } & Omit<InboundJobData, "sender" | "contactName" | "arrival">;

export type StatusItem = { kind: "status" } & StatusJobData;

/** Something in the body we deliberately do not act on, with the reason for the log (law 6). */
export interface IgnoredItem {
  kind: "ignored";
  reason: string;
  where: string;
}

export interface EventItem {
  kind: "event";
  event: BusinessEvent;
}

/**
 * An item for a business number this deployment does not serve (PHONE_NUMBERS_FILE): it is
 * acknowledged and counted as what it would have been, and nothing else happens.
 */
export interface NotOursItem {
  kind: "not_ours";
  of: "message" | "status" | "event" | "ignored";
  phoneNumberId: string;
}

export type WebhookItem = InboundItem | StatusItem | EventItem | IgnoredItem | NotOursItem;
/** An item that becomes a job. */
export type QueuedItem = Exclude<WebhookItem, { kind: "ignored" | "not_ours" }>;
/** What one change's items are before anyone asks whose number it is. */
type ChangeItem = QueuedItem | IgnoredItem;

/** The job an item becomes; a message's arrival is when the delivery was received (ms), in µs, plus its place in it. */
export function jobFor(item: QueuedItem, receivedAtMs: number): WebhookJob {
  switch (item.kind) {
    case "message": {
      const { kind: _kind, position, ...rest } = item;
      return { queue: "inbound", data: { ...rest, arrival: receivedAtMs * 1000 + position } };
    }
    case "status": {
      const { kind: _kind, ...data } = item;
      return { queue: "status", data };
    }
    case "event":
      return { queue: "events", data: item.event };
  }
}

/**
 * Fields a WhatsApp Business Account can subscribe to that carry nothing for the replies:
 * acknowledged with 200 and logged with what they are (law 11), never an error.
 */
const NOTHING_TO_DO: Record<string, string> = {
  account_update: "account update (bans, restrictions, reviews): for operators",
  account_review_update: "account review update: for operators",
  account_alerts: "account alert: for operators",
  business_capability_update: "business capability update: for operators",
  phone_number_name_update: "display name review: for operators",
  phone_number_quality_update: "phone number quality or messaging limit update: for operators",
  message_template_status_update: "template status update: templates are managed in WhatsApp Manager",
  message_template_quality_update: "template quality update: templates are managed in WhatsApp Manager",
  message_template_components_update: "template components update: templates are managed in WhatsApp Manager",
  template_category_update: "template category update: templates are managed in WhatsApp Manager",
  calls: "a call event: the bot answers messages, not calls",
  history: "chat history synced from the WhatsApp Business app at onboarding: not answered",
  smb_app_state_sync: "contacts synced from the WhatsApp Business app: not needed to answer",
  security: "security notification: for operators",
  flows: "Flow status update: for operators",
};

/**
 * Every entry × change × item of a delivery, in order. Never throws on shape. `serves` says
 * whether a business number (`metadata.phone_number_id`, digits by then) is ours.
 */
export function walkWebhook(body: unknown, serves: (phoneNumberId: string) => boolean): WebhookItem[] {
  const items: WebhookItem[] = [];
  const root = envelopeSchema.safeParse(body);
  if (!root.success) return [{ kind: "ignored", reason: "not a WhatsApp webhook envelope", where: "body" }];
  if (root.data.object !== "whatsapp_business_account") {
    return [{ kind: "ignored", reason: `object "${root.data.object}" is not whatsapp_business_account`, where: "body" }];
  }
  root.data.entry.forEach((entry, e) => {
    const changes = entrySchema.safeParse(entry);
    if (!changes.success) {
      items.push({ kind: "ignored", reason: "entry without changes", where: `entry[${e}]` });
      return;
    }
    changes.data.changes.forEach((change, c) => {
      const where = `entry[${e}].changes[${c}]`;
      const parsed = changeSchema.safeParse(change);
      if (!parsed.success) {
        items.push({ kind: "ignored", reason: "change without field/value", where });
        return;
      }
      const { field } = parsed.data;
      if (field !== "messages" && field !== "smb_message_echoes" && field !== "user_preferences" && field !== "user_id_update") {
        items.push({ kind: "ignored", reason: NOTHING_TO_DO[field] ?? `field "${field}" is not handled`, where });
        return;
      }
      const value = valueSchema.safeParse(parsed.data.value);
      if (!value.success) {
        items.push({ kind: "ignored", reason: `${field} change without metadata.phone_number_id`, where });
        return;
      }
      const phoneNumberId = value.data.metadata.phone_number_id;
      if (!isPhoneNumberId(phoneNumberId)) {
        // Quoted and cut short: a log line says what came, within reason.
        items.push({ kind: "ignored", reason: `metadata.phone_number_id ${JSON.stringify(phoneNumberId.slice(0, 40))} is not digits`, where });
        return;
      }
      const walked = field === "messages" ? walkValue(value.data, where) : walkEvents(field, value.data, where);
      if (serves(phoneNumberId)) items.push(...walked);
      else for (const item of walked) items.push({ kind: "not_ours", of: item.kind, phoneNumberId });
    });
  });
  let position = 0;
  for (const item of items) if (item.kind === "message") item.position = position++;
  return items;
}

function contactsOf(value: z.infer<typeof valueSchema>) {
  return (value.contacts ?? []).flatMap((raw) => {
    const contact = contactSchema.safeParse(raw);
    return contact.success ? [contact.data] : [];
  });
}

function walkEvents(field: "smb_message_echoes" | "user_preferences" | "user_id_update", value: z.infer<typeof valueSchema>, where: string): ChangeItem[] {
  const phoneNumberId = value.metadata.phone_number_id;
  const contacts = contactsOf(value);
  const named = (waId: string | undefined, userId: string | undefined): Sender => {
    const contact = contacts.find((c) => (waId && c.wa_id === waId) || (userId && c.user_id === userId));
    return { waId: waId ?? contact?.wa_id, userId: userId ?? contact?.user_id, name: contact?.profile?.name, username: contact?.profile?.username };
  };
  const list = field === "smb_message_echoes" ? value.message_echoes : field === "user_preferences" ? value.user_preferences : value.user_id_update;
  return (Array.isArray(list) ? list : []).map((raw, i): ChangeItem => {
    const here = `${where}.${field === "smb_message_echoes" ? "message_echoes" : field}[${i}]`;
    if (field === "smb_message_echoes") {
      const echo = echoSchema.safeParse(raw);
      if (!echo.success) return { kind: "ignored", reason: "echo without id, recipient (to or to_user_id), timestamp or type", where: here };
      return { kind: "event", event: { type: "echo", phoneNumberId, echo: echo.data, recipient: named(echo.data.to, echo.data.to_user_id) } };
    }
    if (field === "user_preferences") {
      const p = preferenceSchema.safeParse(raw);
      if (!p.success) return { kind: "ignored", reason: "user preference without a user, category, value or timestamp", where: here };
      return {
        kind: "event",
        event: {
          type: "preferences",
          sender: named(p.data.wa_id, p.data.user_id),
          category: p.data.category,
          value: p.data.value,
          timestamp: p.data.timestamp,
        },
      };
    }
    const u = userIdUpdateSchema.safeParse(raw);
    if (!u.success) return { kind: "ignored", reason: "user id update without previous and current ids", where: here };
    return { kind: "event", event: { type: "user_id", previous: u.data.user_id.previous, current: u.data.user_id.current } };
  });
}

function walkValue(value: z.infer<typeof valueSchema>, where: string): ChangeItem[] {
  const items: ChangeItem[] = [];
  const phoneNumberId = value.metadata.phone_number_id;
  const contacts = contactsOf(value);
  (value.messages ?? []).forEach((raw, i) => {
    const message = inboundMessageSchema.safeParse(raw);
    if (message.success) {
      const m = message.data;
      // The contacts entry of this message's sender: by phone, else by BSUID.
      const contact = contacts.find((c) => (m.from && c.wa_id === m.from) || (m.from_user_id && c.user_id === m.from_user_id));
      const sender: Sender = {
        waId: m.from ?? contact?.wa_id,
        userId: m.from_user_id ?? contact?.user_id,
        parentUserId: m.from_parent_user_id ?? contact?.parent_user_id,
        name: contact?.profile?.name,
        username: contact?.profile?.username,
      };
      items.push({ kind: "message", position: 0, phoneNumberId, sender, message: m });
    } else {
      items.push({ kind: "ignored", reason: "message without id, sender (from or from_user_id), timestamp or type", where: `${where}.messages[${i}]` });
    }
  });
  (value.statuses ?? []).forEach((raw, i) => {
    const status = statusSchema.safeParse(raw);
    if (status.success) items.push({ kind: "status", phoneNumberId, status: status.data });
    else items.push({ kind: "ignored", reason: "status without id, known status or timestamp", where: `${where}.statuses[${i}]` });
  });
  if (value.errors?.length) {
    items.push({ kind: "ignored", reason: `account-level errors reported: ${JSON.stringify(value.errors)}`, where: `${where}.errors` });
  }
  return items;
}
