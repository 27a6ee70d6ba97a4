import { context, isSpanContextValid, trace } from "@opentelemetry/api";
import pino, { type Logger } from "pino";

export type { Logger };

/**
 * Law 10: secrets and people stay out of logs. A field with one of these names is censored
 * wherever it sits in a line's first three levels (`{ config: { notify: { smtpUrl } } }`):
 * the secrets of our settings, a request's credentials, and a customer's words and number
 * under the names Meta and our own records give them. (The verify token rides in the verify
 * GET's query string, so request URLs are logged without their query.)
 */
const SECRET_KEYS = new Set([
  "authorization",
  "cookie",
  "x-hub-signature-256",
  "accessToken",
  "appSecret",
  "apiKey",
  "verifyToken",
  "adminToken",
  // Staff notifications: the webhook's path is its token, SMTP_URL holds a password.
  "webhookUrl",
  "smtpUrl",
  "text",
  "body",
  "wa_id",
  "waId",
  "recipient_id",
  "phone",
]);
const SCRUBBED_LEVELS = 3;
const CENSOR = "[redacted]";

/**
 * `fields` with every SECRET_KEYS field censored, copied only where something is: a line
 * with nothing to hide (most, and every webhook's) costs a look at each field. This is
 * pino's `redact` made cheap: with wildcard paths, pino ran every field of every line through
 * its redactor, a clone and a JSON.stringify each, a tenth of a webhook's CPU. An error
 * under `err` is left to serializeError, which scrubs it at any depth.
 */
function scrubbed(fields: Record<string, unknown>, level: number): Record<string, unknown> {
  let copy: Record<string, unknown> | undefined;
  for (const key in fields) {
    if (!Object.hasOwn(fields, key)) continue;
    const value = fields[key];
    const clean = SECRET_KEYS.has(key) && value !== undefined ? CENSOR : level === 0 && key === "err" ? value : scrubbedValue(value, level + 1);
    if (clean === value) continue;
    copy ??= { ...fields };
    copy[key] = clean;
  }
  return copy ?? fields;
}

function scrubbedValue(value: unknown, level: number): unknown {
  if (level >= SCRUBBED_LEVELS || value === null || typeof value !== "object") return value;
  // Dates, Buffers and the like say how they are written themselves.
  if (typeof (value as { toJSON?: unknown }).toJSON === "function") return value;
  if (!Array.isArray(value)) return scrubbed(value as Record<string, unknown>, level);
  let copy: unknown[] | undefined;
  for (const [i, item] of value.entries()) {
    const clean = scrubbedValue(item, level + 1);
    if (clean === item) continue;
    copy ??= [...value];
    copy[i] = clean;
  }
  return copy ?? value;
}

/**
 * Within an error these are scrubbed at any depth, beside SECRET_KEYS: an error carries
 * whatever its thrower put on it (a response body, a request, a row), and pino's error
 * serializer copies every property.
 * Meta names the customer's phone number `wa_id`, `input` (a send's answer), `recipient_id`
 * (statuses), `from` (messages) or `to` (a send); bodies and texts may hold any of them.
 */
const PERSONAL_KEYS = new Set([...SECRET_KEYS, "input", "from", "to"]);
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
  const logger = pino(
    {
      level: options.level,
      ...(options.traceIds ? { mixin: traceIds } : {}),
      formatters: { log: (fields) => scrubbed(fields, 0) },
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
  // A child's bindings are written into each of its lines, and pino's formatters never see
  // them: they are scrubbed as the child is made. Every child inherits this (pino makes each
  // with Object.create(parent)), Fastify's per-request loggers included.
  const child = logger.child;
  // (Through unknown: pino types child as generic in its custom levels, which we have none of.)
  logger.child = function scrubbedChild(this: Logger, bindings: pino.Bindings, childOptions?: pino.ChildLoggerOptions) {
    return Reflect.apply(child, this, [scrubbed(bindings, 0), childOptions]) as Logger;
  } as unknown as Logger["child"];
  return logger;
}
