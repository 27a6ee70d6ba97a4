import { z } from "zod";

/**
 * Meta's webhook body (WHATSAPP.md §3). Schemas are lenient where Meta adds fields, strict
 * where we depend on one; each item is parsed on its own so one bad item never sinks the
 * others (law 9).
 */

export const metaErrorSchema = z
  .object({
    code: z.coerce.number(),
    title: z.string().optional(),
    message: z.string().optional(),
    error_data: z.object({ details: z.string().optional() }).passthrough().optional(),
    href: z.string().optional(),
  })
  .passthrough();
export type MetaError = z.infer<typeof metaErrorSchema>;

/**
 * Since 31 March 2026 a customer may be known by a business-scoped user id (BSUID) only:
 * `from` (the phone) comes only when it may be shared, `from_user_id` always (WHATSAPP.md §9).
 */
export const inboundMessageSchema = z
  .object({
    id: z.string().min(1),
    from: z.string().min(1).optional(),
    from_user_id: z.string().min(1).optional(),
    from_parent_user_id: z.string().min(1).optional(),
    timestamp: z.string().regex(/^\d+$/),
    type: z.string().min(1),
    text: z.object({ body: z.string() }).optional(),
  })
  .passthrough()
  .refine((m) => m.from !== undefined || m.from_user_id !== undefined);
export type InboundMessagePayload = z.infer<typeof inboundMessageSchema>;

export const statusSchema = z
  .object({
    id: z.string().min(1),
    status: z.enum(["sent", "delivered", "read", "failed", "played"]),
    timestamp: z.string().regex(/^\d+$/),
    recipient_id: z.string().optional(),
    recipient_user_id: z.string().optional(),
    biz_opaque_callback_data: z.string().optional(),
    errors: z.array(metaErrorSchema).optional(),
  })
  .passthrough();
export type StatusPayload = z.infer<typeof statusSchema>;

const contactSchema = z
  .object({
    wa_id: z.string().optional(),
    user_id: z.string().optional(),
    parent_user_id: z.string().optional(),
    profile: z.object({ name: z.string().optional(), username: z.string().optional() }).passthrough().optional(),
  })
  .passthrough();

/** Who wrote: every identifier Meta gave for the customer (a phone, a BSUID, or both) and how they show. */
export interface Sender {
  waId?: string | undefined;
  userId?: string | undefined;
  parentUserId?: string | undefined;
  name?: string | undefined;
  username?: string | undefined;
}

const valueSchema = z
  .object({
    metadata: z.object({ phone_number_id: z.string().min(1), display_phone_number: z.string().optional() }),
    contacts: z.array(z.unknown()).optional(),
    messages: z.array(z.unknown()).optional(),
    statuses: z.array(z.unknown()).optional(),
    errors: z.array(z.unknown()).optional(),
  })
  .passthrough();

// Built once: zod compiles a schema on its first parse, which costs far more than parsing.
const envelopeSchema = z.object({ object: z.string(), entry: z.array(z.unknown()) });
const entrySchema = z.object({ changes: z.array(z.unknown()) });
const changeSchema = z.object({ field: z.string(), value: z.unknown() });

export interface InboundItem {
  kind: "message";
  /** Its place among the messages of this delivery: Meta lists them in the order they were written. */
  position: number;
  phoneNumberId: string;
  sender: Sender;
  message: InboundMessagePayload;
}

export interface StatusItem {
  kind: "status";
  phoneNumberId: string;
  status: StatusPayload;
}

/** Something in the body we deliberately do not act on, with the reason for the log (law 6). */
export interface IgnoredItem {
  kind: "ignored";
  reason: string;
  where: string;
}

export type WebhookItem = InboundItem | StatusItem | IgnoredItem;

/** Every entry × change × item of a delivery, in order. Never throws on shape. */
export function walkWebhook(body: unknown): WebhookItem[] {
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
      if (parsed.data.field !== "messages") {
        items.push({ kind: "ignored", reason: `field "${parsed.data.field}" is not handled`, where });
        return;
      }
      const value = valueSchema.safeParse(parsed.data.value);
      if (!value.success) {
        items.push({ kind: "ignored", reason: "messages change without metadata.phone_number_id", where });
        return;
      }
      items.push(...walkValue(value.data, where));
    });
  });
  let position = 0;
  for (const item of items) if (item.kind === "message") item.position = position++;
  return items;
}

function walkValue(value: z.infer<typeof valueSchema>, where: string): WebhookItem[] {
  const items: WebhookItem[] = [];
  const phoneNumberId = value.metadata.phone_number_id;
  const contacts = (value.contacts ?? []).flatMap((raw) => {
    const contact = contactSchema.safeParse(raw);
    return contact.success ? [contact.data] : [];
  });
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
