import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import type { Metrics } from "../http/metrics.ts";
import type { Redis } from "ioredis";
import { jobOf, type Queues } from "../queue/queues.ts";
import { claimAndEnqueue, type ClaimSettings } from "./claim.ts";
import { walkWebhook } from "./payload.ts";
import { safeEqual, verifyMetaSignature } from "./signature.ts";

export interface WebhookDeps {
  redis: Redis;
  queues: Queues;
  verifyToken: string;
  appSecret: string;
  claim: ClaimSettings;
  keyPrefix: string;
  metrics: Metrics;
}

/** Meta's payloads are up to 3 MB (WHATSAPP.md §4); a little headroom, then 413. */
export const WEBHOOK_BODY_LIMIT = 4 * 1024 * 1024;

export function webhookRoutes(deps: WebhookDeps): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    // Scoped to this plugin: the body stays raw bytes, because the signature covers exactly
    // those bytes (law 1). Any content type is accepted and verified the same way.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: WEBHOOK_BODY_LIMIT }, (_req, body, done) => {
      done(null, body);
    });

    app.get<{ Querystring: Record<string, string | undefined> }>("/webhook", async (request, reply) => {
      const mode = request.query["hub.mode"];
      const token = request.query["hub.verify_token"];
      const challenge = request.query["hub.challenge"];
      if (mode === "subscribe" && typeof token === "string" && safeEqual(token, deps.verifyToken) && challenge) {
        request.log.info({ event: "webhook.verified" }, "verify challenge answered");
        // Meta compares the body byte for byte: the raw challenge, never JSON.
        return reply.code(200).type("text/plain").send(challenge);
      }
      request.log.warn({ event: "webhook.verify_refused" }, "verify challenge refused");
      return reply.code(403).type("text/plain").send("Forbidden");
    });

    app.post("/webhook", { bodyLimit: WEBHOOK_BODY_LIMIT }, async (request, reply) => {
      const raw = request.body;
      const signature = request.headers["x-hub-signature-256"];
      if (!Buffer.isBuffer(raw) || !verifyMetaSignature(raw, typeof signature === "string" ? signature : undefined, deps.appSecret)) {
        request.log.warn({ event: "webhook.bad_signature" }, "signature missing or wrong; nothing stored");
        return reply.code(401).send({ error: "invalid signature" });
      }
      let body: unknown;
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        request.log.warn({ event: "webhook.malformed_json" }, "signed body is not JSON");
        return reply.code(400).send({ error: "malformed JSON" });
      }

      const receivedAt = Date.now();
      const items = walkWebhook(body);
      // Every item is claimed and enqueued; 200 only when all are safe (law 2). One failing
      // item does not stop the others: they are enqueued, and the redelivery finds them done.
      const results = await Promise.allSettled(
        items.map(async (item) => {
          if (item.kind === "ignored") {
            deps.metrics.webhookItems.inc({ kind: "ignored", outcome: "ignored" });
            request.log.info({ event: "webhook.ignored", reason: item.reason, where: item.where }, "item ignored");
            return;
          }
          // The claim is named after the job it guards: one hashed id, safe from hostile wamids.
          const job = jobOf(deps.queues, item, receivedAt);
          const outcome = await claimAndEnqueue(deps.redis, `${deps.keyPrefix}:claim:${job.id}`, deps.claim, job.enqueue).catch((error: unknown) => {
            deps.metrics.webhookItems.inc({ kind: item.kind, outcome: "failed" });
            throw error;
          });
          deps.metrics.webhookItems.inc({ kind: item.kind, outcome });
          const id = item.kind === "message" ? item.message.id : item.kind === "status" ? item.status.id : job.id;
          request.log.info({ event: outcome === "duplicate" ? "webhook.duplicate" : "webhook.enqueued", kind: item.kind, wamid: id }, outcome);
        }),
      );
      const failed = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed.length > 0) {
        request.log.error(
          { event: "webhook.enqueue_failed", failed: failed.length, of: items.length, err: failed[0]?.reason },
          "could not enqueue every item; Meta will deliver again",
        );
        return reply.code(503).send({ error: "temporarily unable to accept; retry" });
      }
      return reply.code(200).send({ ok: true });
    });
  };
}
