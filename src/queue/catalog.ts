import { z } from "zod";
import type { ClaudeAnswer, GeneratedReply } from "../ai/claude.ts";
import {
  type EchoPayload,
  echoSchema,
  type InboundMessagePayload,
  inboundMessageSchema,
  type Sender,
  type StatusPayload,
  statusSchema,
} from "../whatsapp/webhook-payload.ts";

/**
 * The job catalog: each queue's name, the data its jobs carry, and the schema that data is
 * checked against when a worker takes the job (`readJob`). The webhook writes these
 * (src/webhook/walk.ts turns a delivery into them), the workers read them (src/jobs/).
 */

export const QUEUE_NAMES = { inbound: "inbound", reply: "reply", status: "status", events: "events", reconcile: "reconcile", notify: "notify" } as const;

/** A customer's message, as the webhook queued it. */
export interface InboundJobData {
  phoneNumberId: string;
  /** Absent on jobs queued before BSUIDs were read: their sender is `message.from` and `contactName`. */
  sender?: Sender;
  contactName?: string;
  message: InboundMessagePayload;
  /**
   * When the webhook received it, in microseconds, plus its position in the delivery: the
   * order of a burst within one of Meta's one-second timestamps (absent on older jobs).
   */
  arrival?: number;
}

/** A delivery receipt for one of our messages. */
export interface StatusJobData {
  phoneNumberId: string;
  status: StatusPayload;
}

/**
 * What the business side tells us beside the customers' messages: a message a person sent
 * from the WhatsApp Business app on the same number (coexistence, WHATSAPP.md §10), a
 * customer's marketing preference, a BSUID that changed.
 */
export type BusinessEvent =
  | { type: "echo"; phoneNumberId: string; echo: EchoPayload; recipient: Sender }
  | { type: "preferences"; sender: Sender; category: string; value: string; timestamp: number }
  | { type: "user_id"; previous: string; current: string };
export type EventJobData = BusinessEvent;

/** One conversation's next answer (src/jobs/reply.ts). */
export interface ReplyJobData {
  conversationId: string;
  /**
   * Claude's answer, kept in the job itself when Postgres could not take it: paid for once,
   * stored when the database is back, never asked for again (law 4).
   */
  draft?: KeptDraft;
  /**
   * A Claude call of a tool loop (a step asking for tools), kept the same way when Postgres could
   * not record it: recorded before anything it asks for runs, never asked for again (law 4).
   */
  step?: KeptStep;
  /** Parts Meta took (part id → wamid) while Postgres could not record it: recorded first when it can (law 5). */
  accepted?: Record<string, string>;
}

/** Claude's answer for one reply, as the job keeps it. */
export type KeptDraft = GeneratedReply & { replyId: string };

/** Step `step` of a reply's tool loop: Claude's answer, whole, as the job keeps it. */
export type KeptStep = { replyId: string; step: number } & Pick<ClaudeAnswer, "content" | "stopReason" | "usage">;

/** Staff notifications (src/notify/): a "collect" job (no data) or a "deliver" job of one notification. */
export interface NotifyJobData {
  notificationId?: string;
}

/** What an item of a webhook delivery becomes (src/webhook/walk.ts). */
export type WebhookJob = { queue: "inbound"; data: InboundJobData } | { queue: "status"; data: StatusJobData } | { queue: "events"; data: EventJobData };

/** Who wrote a queued message, for jobs of either shape. */
export function senderOf(data: InboundJobData): Sender {
  return data.sender ?? { waId: data.message.from, name: data.contactName };
}

// ---------------------------------------------------------------------------------------------
// Reading a job: its data is checked when it is taken (law 11). Jobs outlive deployments (a
// job queued by an older version, a day in the delayed set) and carry whatever Meta sent, so
// what can be cleaned is cleaned, and what can never succeed is said at once, never retried.

const digits = z.string().regex(/^\d+$/);
const senderSchema = z
  .object({
    waId: z.string().min(1).optional(),
    userId: z.string().min(1).optional(),
    parentUserId: z.string().min(1).optional(),
    name: z.string().optional(),
    username: z.string().optional(),
  })
  .refine((s) => s.waId !== undefined || s.userId !== undefined, { message: "a sender needs a phone number or a BSUID" });
const tokens = z.number().int().nonnegative();
// Postgres's uuid: any 32 hex digits in the 8-4-4-4-12 shape (zod's z.uuid() asks for RFC 9562's version bits, which rows made otherwise lack).
const uuid = z.guid();
/** What a Claude call cost, as the client reports it. */
const usage = z.object({ model: z.string(), inputTokens: tokens, outputTokens: tokens, cacheReadTokens: tokens, cacheCreationTokens: tokens });

const JOB_SCHEMAS = {
  inbound: z
    .object({
      phoneNumberId: digits,
      sender: senderSchema.optional(),
      contactName: z.string().optional(),
      message: inboundMessageSchema,
      arrival: z.number().int().nonnegative().optional(),
    })
    .refine((d) => d.sender !== undefined || d.message.from !== undefined, { message: "a message needs a sender" }),
  status: z.object({ phoneNumberId: digits, status: statusSchema }),
  events: z.discriminatedUnion("type", [
    z.object({ type: z.literal("echo"), phoneNumberId: digits, echo: echoSchema, recipient: senderSchema }),
    z.object({ type: z.literal("preferences"), sender: senderSchema, category: z.string(), value: z.string(), timestamp: z.number() }),
    z.object({ type: z.literal("user_id"), previous: z.string().min(1), current: z.string().min(1) }),
  ]),
  reply: z.object({
    conversationId: uuid,
    draft: z
      .object({
        replyId: uuid,
        text: z.string(),
        ...usage.shape,
        cacheCreation1hTokens: tokens.optional(),
        // Its price as Claude answered (issue 20), so a draft kept through an outage is priced as any other.
        costUsd: z.number().nonnegative().optional(),
        citations: z.array(z.object({ source: z.string(), title: z.string().nullable(), citedText: z.string(), location: z.string().nullable() })).optional(),
      })
      .optional(),
    step: z
      .object({
        replyId: uuid,
        step: z.number().int().nonnegative(),
        // Claude's blocks go back to it unchanged (a thinking block's signature included).
        content: z.array(z.looseObject({ type: z.string() })),
        stopReason: z.string(),
        usage: usage.extend({ cacheCreation1hTokens: tokens }),
      })
      .optional(),
    accepted: z.record(uuid, z.string().min(1)).optional(),
  }),
  reconcile: z.object({}).passthrough(),
  notify: z.object({ notificationId: uuid.optional() }),
} as const;

export type QueueName = keyof typeof JOB_SCHEMAS;

export type JobRead<T> =
  /** `cleaned` names what was changed to make it storable (for the log), empty when nothing was. */
  | { ok: true; data: T; cleaned: string[] }
  /** It can never succeed: what is wrong, in words for the log and the dead letter. */
  | { ok: false; reason: string };

/** A clock may be off by this much: Meta's timestamp of a message is never later than its receipt by more. */
const CLOCK_SKEW_MS = 10 * 60 * 1000;
/** Meta gives up redelivering after 7 days (WHATSAPP.md §4): nothing it sends is older than that, and a day more. */
const OLDEST_DELIVERY_MS = 8 * 24 * 60 * 60 * 1000;

/**
 * A job's data as its worker may use it, or why it never can be. Cleaned first, so that
 * Postgres can store it: NUL characters are removed (text and jsonb refuse them), a lone UTF-16
 * surrogate becomes U+FFFD (jsonb refuses it; only a hostile body carries one), and a
 * timestamp Meta could not have written (not a date, later than the job's receipt, or older
 * than Meta's redeliveries last) is read as the time the webhook received it. `receivedAtMs` is that time when the data does not say
 * (BullMQ's job timestamp). The job id was derived from the original (src/queue/queues.ts).
 */
export function readJob(queue: "inbound", data: unknown, receivedAtMs: number): JobRead<InboundJobData>;
export function readJob(queue: "status", data: unknown, receivedAtMs: number): JobRead<StatusJobData>;
export function readJob(queue: "events", data: unknown, receivedAtMs: number): JobRead<EventJobData>;
export function readJob(queue: "reply", data: unknown, receivedAtMs: number): JobRead<ReplyJobData>;
export function readJob(queue: QueueName, data: unknown, receivedAtMs: number): JobRead<unknown>;
export function readJob(queue: QueueName, data: unknown, receivedAtMs: number): JobRead<unknown> {
  const { value: clean, cleaned } = storableCopy(data);
  const parsed = JOB_SCHEMAS[queue].safeParse(clean);
  if (!parsed.success) return { ok: false, reason: describeIssues(parsed.error) };
  const read = parsed.data as Record<string, unknown>;
  const arrivalMs = typeof read.arrival === "number" ? Math.floor(read.arrival / 1000) : receivedAtMs;
  for (const holder of timestamped(queue, read)) {
    if (!possibleTimestamp(holder.timestamp, arrivalMs)) {
      cleaned.push(`timestamp ${String(holder.timestamp).slice(0, 20)} is impossible; read as the time it was received`);
      holder.timestamp = typeof holder.timestamp === "number" ? Math.floor(arrivalMs / 1000) : String(Math.floor(arrivalMs / 1000));
    }
  }
  return { ok: true, data: read, cleaned: [...new Set(cleaned)] };
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, "g");

/** A deep copy whose strings Postgres can store (see readJob), and what had to change for it. */
export function storableCopy(value: unknown): { value: unknown; cleaned: string[] } {
  const cleaned: string[] = [];
  return { value: storable(value, cleaned), cleaned };
}

function storable(value: unknown, cleaned: string[]): unknown {
  if (typeof value === "string") {
    let out = value;
    if (out.includes("\u0000")) {
      out = out.replaceAll("\u0000", "");
      cleaned.push("NUL characters removed");
    }
    if (LONE_SURROGATE.test(out)) {
      out = out.replace(LONE_SURROGATES, "\ufffd");
      cleaned.push("lone surrogates replaced");
    }
    return out;
  }
  if (Array.isArray(value)) return value.map((v) => storable(v, cleaned));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) out[storable(key, cleaned) as string] = storable(v, cleaned);
    return out;
  }
  return value;
}

/** The objects whose `timestamp` a job's worker reads as a time. */
function timestamped(queue: QueueName, data: Record<string, unknown>): { timestamp: unknown }[] {
  const holders: unknown[] = [];
  if (queue === "inbound") holders.push(data.message);
  if (queue === "status") holders.push(data.status);
  if (queue === "events") holders.push(data.type === "echo" ? data.echo : data.type === "preferences" ? data : undefined);
  return holders.filter((h): h is { timestamp: unknown } => h !== undefined && h !== null && typeof h === "object" && "timestamp" in h);
}

/**
 * Seconds since the epoch that make a date Meta could have written for something it delivers
 * now: no later than the receipt (and its clock's skew), no earlier than its redeliveries last.
 */
function possibleTimestamp(timestamp: unknown, receivedAtMs: number): boolean {
  const ms = Number(timestamp) * 1000;
  return Number.isSafeInteger(ms) && ms >= receivedAtMs - OLDEST_DELIVERY_MS && ms <= receivedAtMs + CLOCK_SKEW_MS;
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((issue) => `${issue.path.join(".") || "(data)"}: ${issue.message}`)
    .join("; ");
}
