import { context, isSpanContextValid, trace } from "@opentelemetry/api";
import pino, { type Logger } from "pino";

export type { Logger };

/**
 * Law 10: secrets and people stay out of logs. The verify token rides in the verify GET's
 * query string, so request URLs are logged without their query.
 */
const REDACT_PATHS = [
  "req.headers.authorization",
  "req.headers.cookie",
  'req.headers["x-hub-signature-256"]',
  "headers.authorization",
  "authorization",
  "accessToken",
  "appSecret",
  "apiKey",
  "verifyToken",
  "adminToken",
  "*.accessToken",
  "*.appSecret",
  "*.apiKey",
  "*.verifyToken",
  "*.adminToken",
  // Staff notifications: the webhook's path is its token, SMTP_URL holds a password.
  "webhookUrl",
  "smtpUrl",
  "*.webhookUrl",
  "*.smtpUrl",
  "*.*.smtpUrl",
  "text",
  "*.text",
  "body",
  // A customer's phone number, under the names Meta and our own records give it.
  "wa_id",
  "*.wa_id",
  "waId",
  "*.waId",
  "recipient_id",
  "*.recipient_id",
  "phone",
  "*.phone",
];

/**
 * Within an error these are scrubbed at any depth: an error carries whatever its thrower put on
 * it (a response body, a request, a row), and pino's error serializer copies every property.
 * Meta names the customer's phone number `wa_id`, `input` (a send's answer), `recipient_id`
 * (statuses), `from` (messages) or `to` (a send); bodies and texts may hold any of them.
 */
const PERSONAL_KEYS = new Set(["wa_id", "waId", "input", "recipient_id", "from", "to", "phone", "text", "body"]);
const CENSOR = "[redacted]";
const MAX_DEPTH = 8;

/** A copy of `value` without what PERSONAL_KEYS name; the error's own objects are never changed (they are still to be stored). */
function withoutPeople(value: unknown, depth: number, seen: WeakSet<object>): unknown {
  if (value === null || typeof value !== "object") return value;
  // Dates, Buffers and the like say how they are written themselves.
  if (typeof (value as { toJSON?: unknown }).toJSON === "function") return value;
  if (depth >= MAX_DEPTH) return "[too deep]";
  // Only the objects above this one: the same object twice side by side is not a cycle.
  if (seen.has(value)) return "[circular]";
  seen.add(value);
  let copy: unknown;
  if (Array.isArray(value)) copy = value.map((item) => withoutPeople(item, depth + 1, seen));
  else copy = Object.fromEntries(Object.entries(value).map(([key, item]) => [key, PERSONAL_KEYS.has(key) ? CENSOR : withoutPeople(item, depth + 1, seen)]));
  seen.delete(value);
  return copy;
}

/** pino's own error serializer (message, stack, causes, every property), then scrubbed. */
function serializeError(error: unknown): unknown {
  const serialized: unknown = pino.stdSerializers.err(error as Error);
  // Not an error: the serializer handed back the caller's own value, which must not be changed.
  if (serialized === error) return withoutPeople(error, 0, new WeakSet());
  if (serialized === null || typeof serialized !== "object") return serialized;
  const fields = serialized as Record<string, unknown>;
  const seen = new WeakSet<object>([serialized]);
  // In place on the serializer's fresh object, keeping its prototype (`raw`); nested values are copied.
  for (const [key, item] of Object.entries(fields)) fields[key] = PERSONAL_KEYS.has(key) ? CENSOR : withoutPeople(item, 1, seen);
  return serialized;
}

/** With traces on, each line names the trace and span it was written in, to find one from the other. */
function traceIds(): Record<string, string> {
  const span = trace.getSpan(context.active())?.spanContext();
  return span && isSpanContextValid(span) ? { trace_id: span.traceId, span_id: span.spanId } : {};
}

/**
 * Lines go to stdout as they are written (`sync`), not through pino's default asynchronous
 * writer: with a write in flight, the lines a process writes as it exits skip ahead of it or
 * are cut off, so the last words of a shutdown or a crash come out of order or not at all.
 */
export function createLogger(options: { level: string; destination?: pino.DestinationStream; traceIds?: boolean }): Logger {
  return pino(
    {
      level: options.level,
      ...(options.traceIds ? { mixin: traceIds } : {}),
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      serializers: {
        err: serializeError,
        req: (req: { method: string; url: string; id: string }) => ({
          id: req.id,
          method: req.method,
          url: req.url.split("?")[0],
        }),
      },
    },
    options.destination ?? pino.destination({ dest: 1, sync: true }),
  );
}
