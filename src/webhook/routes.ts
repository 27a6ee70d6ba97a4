import { SpanKind, type Tracer } from "@opentelemetry/api";
import { type FastifyBaseLogger, type FastifyInstance, type FastifyPluginAsync, type FastifyReply, type FastifyRequest, LogController } from "fastify";
import type { Counter } from "prom-client";
import type { Clock } from "../clock.ts";
import type { ServedNumbers } from "../config/numbers.ts";
import { safeEqual } from "../crypto/safe-equal.ts";
import type { Metrics } from "../metrics/metrics.ts";
import { type Durability, type EnqueueOutcome, type Queues, webhookJobOf } from "../queue/queues.ts";
import { REDIS_READY_GRACE_MS, type RedisClient, type RedisReadiness, watchReadiness } from "../queue/redis.ts";
import { type ReplicaCount, watchReplicas } from "../queue/replicas.ts";
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
  clock: Clock;
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
    const deliveries = new Deliveries(deps, app.log);
    app.addHook("onClose", async () => deliveries.close());
    app.get<{ Querystring: Record<string, string | undefined> }>("/webhook", async (request, reply) => answerVerify(deps.verifyToken, request, reply));

    // One observation per delivery, once it is answered: a body refused before the handler (413) too.
    const timed = (outcome: string) => deps.metrics.webhookDuration.labels({ outcome });
    const durationByStatus: Record<number, ReturnType<typeof timed>> = {
      200: timed("accepted"),
      503: timed("unavailable"),
      401: timed("bad_signature"),
      400: timed("malformed"),
      413: timed("too_large"),
    };
    const otherDuration = timed("error");
    const onResponse = (_request: FastifyRequest, reply: FastifyReply, done: () => void) => {
      (durationByStatus[reply.statusCode] ?? otherDuration).observe(reply.elapsedTime / 1000);
      done();
    };

    // Decided once, here: with tracing off a delivery does no tracing work at all.
    const { tracer } = deps;
    const deliver = (request: FastifyRequest, reply: FastifyReply) => deliveries.deliver(request, reply);
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

/** Meta's verify challenge: 200 with the raw challenge for our token, else 403. */
function answerVerify(verifyToken: string, request: FastifyRequest<{ Querystring: Record<string, string | undefined> }>, reply: FastifyReply) {
  const mode = request.query["hub.mode"];
  const token = request.query["hub.verify_token"];
  const challenge = request.query["hub.challenge"];
  if (mode === "subscribe" && typeof token === "string" && safeEqual(token, verifyToken) && challenge) {
    request.log.info({ event: "webhook.verified" }, "verify challenge answered");
    // Meta compares the body byte for byte: the raw challenge, never JSON.
    return reply.code(200).type("text/plain").send(challenge);
  }
  request.log.warn({ event: "webhook.verify_refused" }, "verify challenge refused");
  return reply.code(403).type("text/plain").send("Forbidden");
}

/** What one delivery's items came to, for its one log line. */
interface Tally {
  enqueued: string[];
  duplicates: string[];
  ignored: number;
  notOurs: number;
  unreplicated: number;
}

/**
 * Meta's deliveries: verified, walked, each item enqueued in the same script as its claim, and
 * answered 200 only when all are safe. What a delivery reads again and again (the counters,
 * whether Redis is ready, how many replicas its master has) is made once, here.
 */
class Deliveries {
  private readonly graceMs: number;
  private readonly readiness: RedisReadiness;
  /** How many replicas the master has now; only a wait that settles for the replicas there are asks. */
  private readonly present: ReplicaCount | undefined;
  private readonly serves: (phoneNumberId: string) => boolean;
  // Bound once: a labelled inc() hashes its labels on every call, and this is the hot path.
  private readonly itemCounter: Record<Kind, Record<EnqueueOutcome | "failed", Counter.Internal>>;
  private readonly ignoredCounter: Counter.Internal;
  private readonly notOursCounter: Record<Kind | "ignored", Counter.Internal>;
  /** Once per number per process: another business's traffic is counted, never written out item by item. */
  private readonly notOursLogged = new Set<string>();
  private readonly replicasUnreadable = { lastAt: Number.NEGATIVE_INFINITY };
  private readonly unreplicatedWarning = { lastAt: Number.NEGATIVE_INFINITY, writes: 0 };

  constructor(
    private readonly deps: WebhookDeps,
    log: FastifyBaseLogger,
  ) {
    this.graceMs = deps.redisGraceMs ?? REDIS_READY_GRACE_MS;
    this.readiness = watchReadiness(deps.redis, this.graceMs, deps.clock);
    const { durability } = deps;
    this.present =
      durability.replicas > 0 && !durability.strict
        ? watchReplicas(deps.redis, deps.clock, (error) => {
            if (due(this.replicasUnreadable, deps.clock))
              log.warn(
                { event: "redis.replicas_unreadable", err: error },
                "cannot read how many replicas the Redis master has; webhooks wait for all REDIS_WAIT_REPLICAS",
              );
          })
        : undefined;
    const served = deps.servedNumbers;
    this.serves = served === "every" ? () => true : (phoneNumberId: string) => served.has(phoneNumberId);
    const counted = (kind: Kind | "ignored", outcome: EnqueueOutcome | "ignored" | "failed" | "not_ours") =>
      deps.metrics.webhookItems.labels({ kind, outcome });
    const outcomes = (kind: Kind) => ({ enqueued: counted(kind, "enqueued"), duplicate: counted(kind, "duplicate"), failed: counted(kind, "failed") });
    this.itemCounter = { message: outcomes("message"), status: outcomes("status"), event: outcomes("event") };
    this.ignoredCounter = counted("ignored", "ignored");
    this.notOursCounter = {
      message: counted("message", "not_ours"),
      status: counted("status", "not_ours"),
      event: counted("event", "not_ours"),
      ignored: counted("ignored", "not_ours"),
    };
  }

  close(): void {
    this.readiness.stop();
    this.present?.close();
  }

  async deliver(request: FastifyRequest, reply: FastifyReply) {
    const raw = request.body;
    const signature = request.headers["x-hub-signature-256"];
    if (!Buffer.isBuffer(raw) || !verifyMetaSignature(raw, typeof signature === "string" ? signature : undefined, this.deps.appSecret)) {
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
    const receivedAt = this.deps.clock.now().getTime();
    const items = walkWebhook(body, this.serves);
    // Law 2: a connection that is not ready cannot enqueue. One coming back within the grace
    // is waited for; one away longer is refused at once, and Meta delivers again later.
    // The ready case stays synchronous: this is the hot path.
    const redis = this.deps.redis;
    const redisAway = redis.status !== "ready" && items.some((item) => item.kind !== "ignored" && item.kind !== "not_ours");
    const notReady = redisAway && !(await this.readiness.ready()) ? new RedisNotReadyError(redis.status, this.graceMs) : undefined;
    const tally: Tally = { enqueued: [], duplicates: [], ignored: 0, notOurs: 0, unreplicated: 0 };
    // Every item is enqueued on its own; 200 only when all are safe (law 2). One failing
    // item does not stop the others (law 9): they are queued, and the redelivery finds them.
    const results = await Promise.allSettled(items.map((item) => this.take(item, { request, receivedAt, notReady, tally })));
    if (tally.unreplicated > 0) this.warnUnreplicated(request.log, tally.unreplicated);
    const failed = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed.length > 0) {
      request.log.error(
        { event: "webhook.enqueue_failed", status: 503, ms: reply.elapsedTime, failed: failed.length, of: items.length, err: failed[0]?.reason },
        "could not enqueue every item; Meta will deliver again",
      );
      return reply.code(503).send({ error: "temporarily unable to accept; retry" });
    }
    // One line per delivery, not per item: a batch of 1000 updates is one line (ids only, never text).
    const { enqueued, duplicates, ignored, notOurs } = tally;
    const event = enqueued.length > 0 ? "webhook.enqueued" : duplicates.length > 0 ? "webhook.duplicate" : "webhook.nothing_queued";
    // A delivery of nothing but another number's items is that number's traffic: its line
    // above was the one; at info, every one of its deliveries would be a line too.
    const onlyNotOurs = notOurs > 0 && notOurs === items.length;
    request.log[onlyNotOurs ? "debug" : "info"]({ event, status: 200, ms: reply.elapsedTime, enqueued, duplicates, ignored, notOurs }, "delivery accepted");
    return reply.code(200).send({ ok: true });
  }

  /** One item: ignored or another number's (counted, logged), or enqueued with its claim. */
  private async take(item: WebhookItem, delivery: { request: FastifyRequest; receivedAt: number; notReady: Error | undefined; tally: Tally }): Promise<void> {
    const { request, tally } = delivery;
    if (item.kind === "ignored") {
      this.ignoredCounter.inc();
      tally.ignored++;
      request.log.info({ event: "webhook.ignored", reason: item.reason, where: item.where }, "item ignored");
      return;
    }
    if (item.kind === "not_ours") {
      this.notOursCounter[item.of].inc();
      tally.notOurs++;
      if (!this.notOursLogged.has(item.phoneNumberId) && this.notOursLogged.size < NOT_OURS_LOGGED_MAX) {
        this.notOursLogged.add(item.phoneNumberId);
        request.log.warn(
          { event: "webhook.not_ours", phoneNumberId: item.phoneNumberId, kind: item.of },
          "a business number PHONE_NUMBERS_FILE does not list: its items are acknowledged and counted, never answered (said once per number)",
        );
      }
      return;
    }
    const job = webhookJobOf(this.deps.queues, jobFor(item, delivery.receivedAt), this.deps.durability, this.present);
    const { outcome, unreplicated } = await (delivery.notReady ? Promise.reject(delivery.notReady) : job.enqueue()).catch((error: unknown) => {
      this.itemCounter[item.kind].failed.inc();
      throw error;
    });
    this.itemCounter[item.kind][outcome].inc();
    if (unreplicated) {
      this.deps.metrics.redisUnreplicatedWrites.inc();
      tally.unreplicated++;
    }
    const id = item.kind === "message" ? item.message.id : item.kind === "status" ? item.status.id : job.id;
    (outcome === "enqueued" ? tally.enqueued : tally.duplicates).push(id);
    request.log.debug({ event: `webhook.${outcome}`, kind: item.kind, wamid: id }, outcome);
  }

  private warnUnreplicated(log: FastifyBaseLogger, writes: number): void {
    this.unreplicatedWarning.writes += writes; // since the last line
    if (!due(this.unreplicatedWarning, this.deps.clock)) return;
    log.warn(
      { event: "webhook.unreplicated", writes: this.unreplicatedWarning.writes },
      "webhooks accepted on the Redis master alone: it has no replica, so losing it would lose their jobs; restore a replica (REDIS_WAIT_STRICT=true refuses them instead)",
    );
    this.unreplicatedWarning.writes = 0;
  }
}

/** Whether a rate-limited log line is due now; if so, its clock restarts. */
function due(limit: { lastAt: number }, clock: Clock): boolean {
  const now = clock.monotonicMs();
  if (now - limit.lastAt < REDIS_WARNING_EVERY_MS) return false;
  limit.lastAt = now;
  return true;
}
