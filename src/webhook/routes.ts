import { SpanKind, type Tracer } from "@opentelemetry/api";
import { type FastifyBaseLogger, type FastifyInstance, type FastifyPluginAsync, type FastifyReply, type FastifyRequest, LogController } from "fastify";
import type { ServedNumbers } from "../config/numbers.ts";
import { safeEqual } from "../crypto/safe-equal.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { type Durability, type EnqueueOutcome, type Queues, webhookJobOf } from "../queue/queues.ts";
import { REDIS_READY_GRACE_MS, type RedisClient, watchReadiness } from "../queue/redis.ts";
import { watchReplicas } from "../queue/replicas.ts";
import { inSpan } from "../tracing/tracing.ts";
import { verifyMetaSignature } from "./signature.ts";
import { jobFor, type WebhookItem, walkWebhook } from "./walk.ts";

export interface WebhookDeps {
  /** The connection the queues use: its state says at once whether an enqueue can succeed. */
  redis: RedisClient;
  queues: Queues;
  verifyToken: string;
  appSecret: string;
  /** The business numbers answered; another number's items are acknowledged, counted and dropped. */
  servedNumbers: ServedNumbers;
  metrics: Metrics;
  /** How many Redis replicas must hold a job before its delivery is answered 200 (law 2), of those the master has. */
  durability: Durability;
  /** Traces on: each delivery is a span, the root of its messages' traces. Absent: the handler runs bare. */
  tracer?: Tracer | undefined;
  /** How long after the connection was lost a webhook still waits for it (default REDIS_READY_GRACE_MS). */
  redisGraceMs?: number | undefined;
}

/**
 * A master without a replica takes every webhook on its own, and a refused ROLE would fail
 * every reading: each is said in a log line at most this often per process (the metric
 * counts each item), not once per delivery.
 */
const REDIS_WARNING_EVERY_MS = 60_000;

/** Meta's payloads are up to 3 MB (WHATSAPP.md §4); a little headroom, then 413. */
export const WEBHOOK_BODY_LIMIT = 4 * 1024 * 1024;

type Kind = Exclude<WebhookItem["kind"], "ignored" | "not_ours">;

/**
 * How many other numbers a process names in its log. Only Meta's signed deliveries reach the
 * walk, so these are numbers of the WABAs subscribed to our app, a handful; the bound only
 * keeps the memory of them from growing without end. Past it, the counter alone says more came.
 */
const NOT_OURS_LOGGED_MAX = 1000;

const isDelivery = (request: FastifyRequest) => request.method === "POST" && request.url.split("?", 1)[0] === "/webhook";

/**
 * Fastify's request lines, except "incoming request" and "request completed" for Meta's
 * deliveries: each logs one line of its own (what it queued, its status, its time), and at
 * info the two lines more were most of a delivery's cost. Errors are logged as ever.
 */
export class WebhookLogController extends LogController {
  override incomingRequest(request: FastifyRequest, reply: FastifyReply, metadata?: Record<string, unknown>): void {
    if (!isDelivery(request)) super.incomingRequest(request, reply, metadata);
  }

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply, metadata?: Record<string, unknown>): void {
    if (error || !isDelivery(request)) super.requestCompleted(error, request, reply, metadata);
  }
}

class RedisNotReadyError extends Error {
  override readonly name = "RedisNotReadyError";
  constructor(status: string, graceMs: number) {
    super(`Redis connection is ${status}, away longer than the ${graceMs} ms a webhook waits for it`);
  }
}

export function webhookRoutes(deps: WebhookDeps): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    // Scoped to this plugin: the body stays raw bytes, because the signature covers exactly
    // those bytes (law 1). Any content type is accepted and verified the same way.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser("*", { parseAs: "buffer", bodyLimit: WEBHOOK_BODY_LIMIT }, (_req, body, done) => {
      done(null, body);
    });

    const graceMs = deps.redisGraceMs ?? REDIS_READY_GRACE_MS;
    const readiness = watchReadiness(deps.redis, graceMs);
    app.addHook("onClose", async () => readiness.stop());

    // Bound once: a labelled inc() hashes its labels on every call, and this is the hot path.
    const counted = (kind: Kind | "ignored", outcome: EnqueueOutcome | "ignored" | "failed" | "not_ours") =>
      deps.metrics.webhookItems.labels({ kind, outcome });
    const itemCounter = {
      message: { enqueued: counted("message", "enqueued"), duplicate: counted("message", "duplicate"), failed: counted("message", "failed") },
      status: { enqueued: counted("status", "enqueued"), duplicate: counted("status", "duplicate"), failed: counted("status", "failed") },
      event: { enqueued: counted("event", "enqueued"), duplicate: counted("event", "duplicate"), failed: counted("event", "failed") },
    };
    const ignoredCounter = counted("ignored", "ignored");
    const notOursCounter = {
      message: counted("message", "not_ours"),
      status: counted("status", "not_ours"),
      event: counted("event", "not_ours"),
      ignored: counted("ignored", "not_ours"),
    };
    const served = deps.servedNumbers;
    const serves = served === "every" ? () => true : (phoneNumberId: string) => served.has(phoneNumberId);
    // Once per number per process: another business's traffic is counted, never written out item by item.
    const notOursLogged = new Set<string>();
    const timed = (outcome: string) => deps.metrics.webhookDuration.labels({ outcome });
    const durationByStatus: Record<number, ReturnType<typeof timed>> = {
      200: timed("accepted"),
      503: timed("unavailable"),
      401: timed("bad_signature"),
      400: timed("malformed"),
      413: timed("too_large"),
    };
    const otherDuration = timed("error");
    const unreplicatedCounter = deps.metrics.redisUnreplicatedWrites;

    const replicasUnreadable = { lastAt: Number.NEGATIVE_INFINITY };
    const unreplicatedWarning = { lastAt: Number.NEGATIVE_INFINITY, writes: 0 };
    // Only a wait that settles for the replicas there are asks how many there are.
    const { durability } = deps;
    const present =
      durability.replicas > 0 && !durability.strict
        ? watchReplicas(deps.redis, (error) => {
            if (due(replicasUnreadable))
              app.log.warn(
                { event: "redis.replicas_unreadable", err: error },
                "cannot read how many replicas the Redis master has; webhooks wait for all REDIS_WAIT_REPLICAS",
              );
          })
        : undefined;
    app.addHook("onClose", async () => present?.close());
    const warnUnreplicated = (log: FastifyBaseLogger, writes: number) => {
      unreplicatedWarning.writes += writes; // since the last line
      if (!due(unreplicatedWarning)) return;
      log.warn(
        { event: "webhook.unreplicated", writes: unreplicatedWarning.writes },
        "webhooks accepted on the Redis master alone: it has no replica, so losing it would lose their jobs; restore a replica (REDIS_WAIT_STRICT=true refuses them instead)",
      );
      unreplicatedWarning.writes = 0;
    };

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

    // One observation per delivery, once it is answered: a body refused before the handler (413) too.
    const onResponse = (_request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      (durationByStatus[reply.statusCode] ?? otherDuration).observe(reply.elapsedTime / 1000);
      done();
    };

    const deliver = async (request: FastifyRequest, reply: FastifyReply) => {
      const raw = request.body;
      const signature = request.headers["x-hub-signature-256"];
      if (!Buffer.isBuffer(raw) || !verifyMetaSignature(raw, typeof signature === "string" ? signature : undefined, deps.appSecret)) {
        request.log.warn({ event: "webhook.bad_signature", status: 401 }, "signature missing or wrong; nothing stored");
        return reply.code(401).send({ error: "invalid signature" });
      }
      let body: unknown;
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        request.log.warn({ event: "webhook.malformed_json", status: 400 }, "signed body is not JSON");
        return reply.code(400).send({ error: "malformed JSON" });
      }

      const receivedAt = Date.now();
      const items = walkWebhook(body, serves);
      // Law 2: a connection that is not ready cannot enqueue. One coming back within the grace
      // is waited for; one away longer is refused at once, and Meta delivers again later.
      // The ready case stays synchronous: this is the hot path.
      const redisAway = deps.redis.status !== "ready" && items.some((item) => item.kind !== "ignored" && item.kind !== "not_ours");
      const notReady = redisAway && !(await readiness.ready()) ? new RedisNotReadyError(deps.redis.status, graceMs) : undefined;
      const enqueued: string[] = [];
      const duplicates: string[] = [];
      let ignored = 0;
      let notOurs = 0;
      let unreplicated = 0;
      // Every item is enqueued on its own; 200 only when all are safe (law 2). One failing
      // item does not stop the others (law 9): they are queued, and the redelivery finds them.
      const results = await Promise.allSettled(
        items.map(async (item) => {
          if (item.kind === "ignored") {
            ignoredCounter.inc();
            ignored++;
            request.log.info({ event: "webhook.ignored", reason: item.reason, where: item.where }, "item ignored");
            return;
          }
          if (item.kind === "not_ours") {
            notOursCounter[item.of].inc();
            notOurs++;
            if (!notOursLogged.has(item.phoneNumberId) && notOursLogged.size < NOT_OURS_LOGGED_MAX) {
              notOursLogged.add(item.phoneNumberId);
              request.log.warn(
                { event: "webhook.not_ours", phoneNumberId: item.phoneNumberId, kind: item.of },
                "a business number PHONE_NUMBERS_FILE does not list: its items are acknowledged and counted, never answered (said once per number)",
              );
            }
            return;
          }
          const job = webhookJobOf(deps.queues, jobFor(item, receivedAt), durability, present);
          const { outcome, unreplicated: alone } = await (notReady ? Promise.reject(notReady) : job.enqueue()).catch((error: unknown) => {
            itemCounter[item.kind].failed.inc();
            throw error;
          });
          itemCounter[item.kind][outcome].inc();
          if (alone) {
            unreplicatedCounter.inc();
            unreplicated++;
          }
          const id = item.kind === "message" ? item.message.id : item.kind === "status" ? item.status.id : job.id;
          (outcome === "enqueued" ? enqueued : duplicates).push(id);
          request.log.debug({ event: `webhook.${outcome}`, kind: item.kind, wamid: id }, outcome);
        }),
      );
      if (unreplicated > 0) warnUnreplicated(request.log, unreplicated);
      const failed = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      if (failed.length > 0) {
        request.log.error(
          { event: "webhook.enqueue_failed", status: 503, ms: reply.elapsedTime, failed: failed.length, of: items.length, err: failed[0]?.reason },
          "could not enqueue every item; Meta will deliver again",
        );
        return reply.code(503).send({ error: "temporarily unable to accept; retry" });
      }
      // One line per delivery, not per item: a batch of 1000 updates is one line (ids only, never text).
      const event = enqueued.length > 0 ? "webhook.enqueued" : duplicates.length > 0 ? "webhook.duplicate" : "webhook.nothing_queued";
      // A delivery of nothing but another number's items is that number's traffic: its line
      // above was the one; at info, every one of its deliveries would be a line too.
      const onlyNotOurs = notOurs > 0 && notOurs === items.length;
      request.log[onlyNotOurs ? "debug" : "info"]({ event, status: 200, ms: reply.elapsedTime, enqueued, duplicates, ignored, notOurs }, "delivery accepted");
      return reply.code(200).send({ ok: true });
    };

    // Decided once, here: with tracing off a delivery does no tracing work at all.
    const { tracer } = deps;
    const tracedDeliver = tracer
      ? (request: FastifyRequest, reply: FastifyReply) =>
          inSpan(tracer, "POST /webhook", { kind: SpanKind.SERVER, attributes: { "http.request.method": "POST", "http.route": "/webhook" } }, async (span) => {
            const answered = await deliver(request, reply);
            span.setAttribute("http.response.status_code", reply.statusCode);
            return answered;
          })
      : deliver;
    app.post("/webhook", { bodyLimit: WEBHOOK_BODY_LIMIT, onResponse }, tracedDeliver);
  };
}

/** Whether a rate-limited log line is due now; if so, its clock restarts. */
function due(limit: { lastAt: number }): boolean {
  const now = Date.now();
  if (now - limit.lastAt < REDIS_WARNING_EVERY_MS) return false;
  limit.lastAt = now;
  return true;
}
