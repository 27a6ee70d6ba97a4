import { z } from "zod";

/**
 * Meta's webhook body, as Meta sends it (WHATSAPP.md §3, §9, §10): one schema per shape, which
 * both validates and types it. Lenient where Meta adds fields, strict where we depend on one.
 * The webhook walks a delivery with them (src/webhook/walk.ts); the job catalog carries the
 * items they describe (src/queue/catalog.ts).
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
 * Meta's `timestamp` (seconds since the epoch, as a string), taken whatever it says: one no
 * clock could have written ("-5", "99999999999999", a number) is read as the time the webhook
 * received it when its job is taken (src/queue/catalog.ts, readJob), never a reason to drop
 * the message (issue 32.5).
 */
const metaTimestamp = z.union([z.string(), z.number()]).transform(String);

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
    timestamp: metaTimestamp,
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
    timestamp: metaTimestamp,
    recipient_id: z.string().optional(),
    recipient_user_id: z.string().optional(),
    biz_opaque_callback_data: z.string().optional(),
    errors: z.array(metaErrorSchema).optional(),
  })
  .passthrough();
export type StatusPayload = z.infer<typeof statusSchema>;

export const contactSchema = z
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

/**
 * A business number's id as Meta writes it: digits. It becomes a path segment of the Graph API
 * (`/{phone_number_id}/messages`), so anything else must never get that far.
 */
export const isPhoneNumberId = (id: string): boolean => /^\d+$/.test(id);

export const valueSchema = z
  .object({
    metadata: z.object({ phone_number_id: z.string().min(1), display_phone_number: z.string().optional() }),
    contacts: z.array(z.unknown()).optional(),
    messages: z.array(z.unknown()).optional(),
    statuses: z.array(z.unknown()).optional(),
    errors: z.array(z.unknown()).optional(),
  })
  .passthrough();

// Built once: zod compiles a schema on its first parse, which costs far more than parsing.
export const envelopeSchema = z.object({ object: z.string(), entry: z.array(z.unknown()) });
export const entrySchema = z.object({ changes: z.array(z.unknown()) });
export const changeSchema = z.object({ field: z.string(), value: z.unknown() });

/** `message_echoes[]`: `from` is the business, `to` / `to_user_id` the customer (WHATSAPP.md §10). */
export const echoSchema = z
  .object({
    id: z.string().min(1),
    to: z.string().min(1).optional(),
    to_user_id: z.string().min(1).optional(),
    timestamp: metaTimestamp,
    type: z.string().min(1),
    text: z.object({ body: z.string() }).optional(),
  })
  .passthrough()
  .refine((m) => m.to !== undefined || m.to_user_id !== undefined);
export type EchoPayload = z.infer<typeof echoSchema>;

export const preferenceSchema = z
  .object({
    wa_id: z.string().optional(),
    user_id: z.string().optional(),
    category: z.string(),
    value: z.string(),
    timestamp: z.coerce.number(),
  })
  .passthrough()
  .refine((p) => p.wa_id !== undefined || p.user_id !== undefined);
export const userIdUpdateSchema = z.object({ user_id: z.object({ previous: z.string().min(1), current: z.string().min(1) }) }).passthrough();
