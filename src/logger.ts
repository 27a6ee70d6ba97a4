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
  "text",
  "*.text",
  "body",
];

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
