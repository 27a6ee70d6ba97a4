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

export function createLogger(options: { level: string; destination?: pino.DestinationStream }): Logger {
  return pino(
    {
      level: options.level,
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      serializers: {
        req: (req: { method: string; url: string; id: string }) => ({
          id: req.id,
          method: req.method,
          url: req.url.split("?")[0],
        }),
      },
    },
    options.destination,
  );
}
