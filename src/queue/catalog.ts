import { createHash } from "node:crypto";
import type { KeepJobs } from "bullmq";
import { z } from "zod";
import type { Config } from "../config/config.ts";
import { echoSchema, inboundMessageSchema, type Sender, statusSchema } from "../whatsapp/webhook-payload.ts";

/**
 * The job catalog, one definition per job as Trigger.dev defines a task: its queue's name, the
 * schema its data is checked against when a worker takes it (readJob; the payload types are
 * z.infer of it), its attempts, concurrency, limiter and retention, the id it is added under,
 * what data that can never succeed becomes, and the module whose processor runs it. The
 * webhook writes these jobs (src/webhook/walk.ts), the queues are made from this
 * (src/queue/queues.ts), and the workers loop over it (src/jobs/workers.ts).
 */

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

const SCHEMAS = {
  inbound: z
    .object({
      phoneNumberId: digits,
      // Absent on jobs queued before BSUIDs were read: their sender is `message.from` and `contactName`.
      sender: senderSchema.optional(),
      contactName: z.string().optional(),
      message: inboundMessageSchema,
      // When the webhook received it, in microseconds, plus its position in the delivery: the
      // order of a burst within one of Meta's one-second timestamps (absent on older jobs).
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
    // Claude's answer, kept in the job itself when Postgres could not take it: paid for once,
    // stored when the database is back, never asked for again (law 4).
    draft: z
      .object({
        replyId: uuid,
        text: z.string(),
        ...usage.shape,
        cacheCreation1hTokens: tokens.optional(),
        // Its price as Claude answered (issue 20), so a draft kept through an outage is priced as any other.
        costUsd: z.number().nonnegative().optional(),
        citations: z.array(z.object({ source: z.string(), title: z.string().nullable(), citedText: z.string(), location: z.string().nullable() })).optional(),
        // The call that wrote it, to settle its row in the ledger when the draft is stored.
        lastCall: z.object({ callId: uuid, usage: usage.extend({ cacheCreation1hTokens: tokens }) }).optional(),
      })
      .optional(),
    // A Claude call of a tool loop (a step asking for tools), kept the same way when Postgres
    // could not record it: recorded before anything it asks for runs, never asked for again.
    step: z
      .object({
        replyId: uuid,
        step: z.number().int().nonnegative(),
        // Claude's blocks go back to it unchanged (a thinking block's signature included).
        content: z.array(z.looseObject({ type: z.string() })),
        stopReason: z.string(),
        usage: usage.extend({ cacheCreation1hTokens: tokens }),
        // Its row in the ledger, settled when the step is stored.
        callId: uuid.optional(),
      })
      .optional(),
    // Parts Meta took (part id → wamid) while Postgres could not record it: recorded first when it can (law 5).
    accepted: z.record(uuid, z.string().min(1)).optional(),
  }),
  reconcile: z.object({}).passthrough(),
  // A CSAT ask falling due (src/jobs/csat.ts): Postgres holds the ask; this only wakes it.
  csat: z.object({ askId: uuid }),
  notify: z.object({ notificationId: uuid.optional() }),
} as const;

/**
 * A job id from Meta's ids that nothing hostile can break or make collide: BullMQ refuses ":"
 * in ids, and a lone surrogate cannot round-trip through Redis's bytes. The hash runs over
 * the UTF-16 code units themselves, so "a:b", "a_b" and "\ud800" all stay apart.
 */
function stableId(kind: string, ...parts: string[]): string {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(Buffer.from(`${part.length}:${part}`, "utf16le"));
  return `${kind}.${hash.digest("hex").slice(0, 40)}`;
}

/** The job id derives from the wamid, so enqueueing the same message twice is harmless (law 3). */
export const inboundJobId = (wamid: string) => stableId("in", wamid);
export const statusJobId = (wamid: string, status: string) => stableId("st", wamid, status);
const eventJobId = (event: z.output<typeof SCHEMAS.events>) =>
  event.type === "echo"
    ? stableId("ec", event.echo.id)
    : event.type === "preferences"
      ? stableId("pr", event.sender.userId ?? "", event.sender.waId ?? "", event.category, event.value, String(event.timestamp))
      : stableId("id", event.previous, event.current);
/** One reply job per conversation at a time (law 8): BullMQ's deduplication id of its reply jobs. */
export const replyDeduplicationId = (conversationId: string) => `conv.${conversationId}`;
/** One job per ask and due time: scheduling the same ask again is harmless, and a moved ask gets a job of its own. */
export const csatJobId = (askId: string, dueAtMs: number) => `csat.${askId}.${dueAtMs}`;
export const deliverJobId = (notificationId: string) => `notify.${notificationId}`;

/** Kept briefly for operators to inspect; the durable record is Postgres. */
const KEEP_FOR_INSPECTION = { removeOnComplete: { age: 3600, count: 1000 }, removeOnFail: { age: 7 * 24 * 3600 } } as const;
/** Housekeeping's last runs, for an operator to look at. */
const KEEP_LAST_RUNS = { removeOnComplete: { count: 100 }, removeOnFail: { count: 100 } } as const;

export interface JobDefinition<S extends z.ZodType = z.ZodType> {
  readonly schema: S;
  /** Runs before it has failed for good: JOB_ATTEMPTS for a customer's work (with the policy's backoff), else its own number. */
  readonly attempts: "JOB_ATTEMPTS" | number;
  /** Jobs of it one worker process runs at once. */
  readonly concurrency: (jobs: Config["jobs"]) => number;
  /** BullMQ's worker limiter, when it has one. */
  readonly limiter?: { readonly max: number; readonly duration: number };
  readonly retention: { readonly removeOnComplete: KeepJobs; readonly removeOnFail: KeepJobs };
  /** The id it is added under, derived from what it carries (adding the same work twice is harmless); undefined: BullMQ's own. */
  readonly jobId?: (data: z.output<S>) => string | undefined;
  /** Data that can never succeed is settled at once (law 11): kept for staff as a dead letter (a customer's message), or logged. */
  readonly invalid: "dead_letter" | "logged";
  /** Whether its jobs carry their message's trace across Redis (housekeeping is untraced). */
  readonly traced: boolean;
  /** The module whose processor runs it (src/jobs/processors.ts holds them by job name). */
  readonly processor: string;
}

/** A definition, its own fields' types kept (a job id it has is known to be there). */
const job = <S extends z.ZodType, D extends Omit<JobDefinition<S>, "schema">>(schema: S, definition: D): { schema: S } & D => ({ schema, ...definition });

export const JOBS = {
  /** A customer's message, as the webhook queued it. */
  inbound: job(SCHEMAS.inbound, {
    attempts: "JOB_ATTEMPTS",
    concurrency: (jobs) => jobs.inboundConcurrency,
    retention: KEEP_FOR_INSPECTION,
    jobId: (data) => inboundJobId(data.message.id),
    invalid: "dead_letter",
    traced: true,
    processor: "src/jobs/inbound.ts",
  }),
  /** One conversation's next answer. */
  reply: job(SCHEMAS.reply, {
    attempts: "JOB_ATTEMPTS",
    // Replies wait on Claude for seconds: many run at once, one per conversation (law 8).
    concurrency: (jobs) => jobs.replyConcurrency,
    // BullMQ honours a manual queue.rateLimit() (Meta's sender-wide limits, src/jobs/reply.ts)
    // only for workers with a limiter; this one is far above any real rate.
    limiter: { max: 10_000, duration: 1000 },
    retention: KEEP_FOR_INSPECTION,
    invalid: "logged",
    traced: true,
    processor: "src/jobs/reply.ts",
  }),
  /** A delivery receipt for one of our messages. */
  status: job(SCHEMAS.status, {
    attempts: "JOB_ATTEMPTS",
    concurrency: (jobs) => jobs.inboundConcurrency,
    retention: KEEP_FOR_INSPECTION,
    jobId: (data) => statusJobId(data.status.id, data.status.status),
    invalid: "logged",
    traced: true,
    processor: "src/jobs/status.ts",
  }),
  /**
   * What the business side tells us beside the customers' messages: a message a person sent
   * from the WhatsApp Business app on the same number (coexistence, WHATSAPP.md §10), a
   * customer's marketing preference, a BSUID that changed.
   */
  events: job(SCHEMAS.events, {
    attempts: "JOB_ATTEMPTS",
    concurrency: (jobs) => jobs.inboundConcurrency,
    retention: KEEP_FOR_INSPECTION,
    jobId: eventJobId,
    invalid: "logged",
    traced: true,
    processor: "src/jobs/events.ts",
  }),
  /** The reconciler's sweep, at start-up and every RECONCILE_INTERVAL_MS. */
  reconcile: job(SCHEMAS.reconcile, {
    attempts: 1,
    concurrency: () => 1,
    retention: KEEP_LAST_RUNS,
    invalid: "logged",
    traced: false,
    processor: "src/jobs/reconcile.ts",
  }),
  /** A CSAT ask falling due (issue 33.3); the reconciler sends one whose job was lost. */
  csat: job(SCHEMAS.csat, {
    attempts: "JOB_ATTEMPTS",
    concurrency: () => 2,
    retention: KEEP_FOR_INSPECTION,
    invalid: "logged",
    traced: false,
    processor: "src/jobs/csat.ts",
  }),
  /** Staff notifications (src/notify/): a "collect" job (no data) or a "deliver" job of one notification. */
  notify: job(SCHEMAS.notify, {
    attempts: 1,
    concurrency: () => 2,
    retention: KEEP_FOR_INSPECTION,
    jobId: (data) => (data.notificationId ? deliverJobId(data.notificationId) : undefined),
    invalid: "logged",
    traced: false,
    processor: "src/jobs/notify.ts",
  }),
};

export type JobName = keyof typeof JOBS;
export const JOB_NAMES = Object.keys(JOBS) as JobName[];
export type JobData<N extends JobName> = z.output<(typeof SCHEMAS)[N]>;

export type InboundJobData = JobData<"inbound">;
export type ReplyJobData = JobData<"reply">;
export type StatusJobData = JobData<"status">;
export type EventJobData = JobData<"events">;
export type NotifyJobData = JobData<"notify">;
export type CsatJobData = JobData<"csat">;
/** What the business side tells us (the events job). */
export type BusinessEvent = EventJobData;
/** Claude's answer for one reply, kept in its job while Postgres could not take it (law 4). */
export type KeptDraft = NonNullable<ReplyJobData["draft"]>;
/** Step `step` of a reply's tool loop: Claude's answer, whole, kept the same way. */
export type KeptStep = NonNullable<ReplyJobData["step"]>;

/** What an item of a webhook delivery becomes (src/webhook/walk.ts). */
export type WebhookJob = { queue: "inbound"; data: InboundJobData } | { queue: "status"; data: StatusJobData } | { queue: "events"; data: EventJobData };

/** Who wrote a queued message, for jobs of either shape. */
export function senderOf(data: InboundJobData): Sender {
  return data.sender ?? { waId: data.message.from, name: data.contactName };
}

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
export function readJob<N extends JobName>(queue: N, data: unknown, receivedAtMs: number): JobRead<JobData<N>> {
  const { value: clean, cleaned } = storableCopy(data);
  const parsed = JOBS[queue].schema.safeParse(clean);
  if (!parsed.success) return { ok: false, reason: describeIssues(parsed.error) };
  const read = parsed.data as Record<string, unknown>;
  const arrivalMs = typeof read.arrival === "number" ? Math.floor(read.arrival / 1000) : receivedAtMs;
  for (const holder of timestamped(queue, read)) {
    if (!possibleTimestamp(holder.timestamp, arrivalMs)) {
      cleaned.push(`timestamp ${String(holder.timestamp).slice(0, 20)} is impossible; read as the time it was received`);
      holder.timestamp = typeof holder.timestamp === "number" ? Math.floor(arrivalMs / 1000) : String(Math.floor(arrivalMs / 1000));
    }
  }
  return { ok: true, data: read as JobData<N>, cleaned: [...new Set(cleaned)] };
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
function timestamped(queue: JobName, data: Record<string, unknown>): { timestamp: unknown }[] {
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
