import { createHash } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import type { RedisClient } from "../queue/redis.ts";
import { idempotencyKeys } from "../queue/stored-answers.ts";

/**
 * Double clicks never act twice: every mutating /admin request may carry an
 * `Idempotency-Key`, with Stripe's semantics, and a request that sends to a customer must
 * (`staffRoute`'s SENDS_TO_CUSTOMER, schema.ts): without one, a client that retries after a
 * lost answer, or a person who presses twice, would write to the customer twice, since a
 * person's message to a waiting customer is a new reply each time. The first response is stored (status and body)
 * for 24 h and replayed for the same key with `Idempotent-Replayed: true`; the same key with
 * a different request is 422; the same key while the first is still running is 409.
 * One deliberate difference from Stripe: a 5xx (e.g. the queue was unreachable) releases the
 * key, so the same click can be retried once the outage is over. As with Stripe, a request
 * refused before it ran because of someone else's work (`releaseIdempotencyKey`: another
 * person answering the item) keeps nothing either: the same click acts once that is over.
 */

const DONE_TTL_MS = 24 * 60 * 60 * 1000;
/** A request that never finished (its process died) must not block its key for a day. */
const RUNNING_TTL_MS = 60 * 1000;
const MAX_KEY_LENGTH = 255;
/** What a key may be; the POST routes' header schemas say so too (schema.ts). */
export const IDEMPOTENCY_KEY = z.string().min(1).max(MAX_KEY_LENGTH);
export const IDEMPOTENCY_KEY_REFUSAL = `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters`;
export const IDEMPOTENCY_KEY_REQUIRED = `this sends to a customer: it needs an Idempotency-Key header (1 to ${MAX_KEY_LENGTH} characters, one per intended send), so that a repeated request sends once`;

type Entry = { state: "running"; fingerprint: string } | { state: "done"; fingerprint: string; status: number; body: string; contentType: string };

declare module "fastify" {
  interface FastifyRequest {
    idempotencyKey?: string;
    idempotencyReleased?: boolean;
  }
}

/** This request's answer is not kept for its Idempotency-Key: it was refused before it ran, for a reason that passes. */
export function releaseIdempotencyKey(request: FastifyRequest): void {
  request.idempotencyReleased = true;
}

export function registerIdempotency(app: FastifyInstance, deps: { redis: RedisClient; keyPrefix: string; scope: (request: FastifyRequest) => string }): void {
  const redisKey = (request: FastifyRequest, key: string) => `${idempotencyKeys(deps.keyPrefix)}${deps.scope(request)}:${key}`;
  const fingerprint = (request: FastifyRequest) =>
    createHash("sha256")
      .update(`${request.method} ${request.url}\n${JSON.stringify(request.body ?? null)}`)
      .digest("hex");

  // preHandler: the body is parsed by now, so it is part of what "the same request" means.
  app.addHook("preHandler", async (request, reply) => {
    const key = request.headers["idempotency-key"];
    if (request.method !== "POST" || typeof key !== "string" || !deps.scope(request)) return;
    if (!IDEMPOTENCY_KEY.safeParse(key).success) return reply.code(400).send({ error: IDEMPOTENCY_KEY_REFUSAL });
    const print = fingerprint(request);
    const running: Entry = { state: "running", fingerprint: print };
    const claimed = await deps.redis.set(redisKey(request, key), JSON.stringify(running), "PX", RUNNING_TTL_MS, "NX");
    if (claimed === "OK") {
      request.idempotencyKey = key;
      return;
    }
    const stored = await deps.redis.get(redisKey(request, key));
    if (stored === null) return replyConflict(reply, "the first request with this Idempotency-Key just ended; retry");
    const entry = JSON.parse(stored) as Entry;
    if (entry.fingerprint !== print) {
      return reply.code(422).send({ error: "this Idempotency-Key was used for a different request" });
    }
    if (entry.state === "running") return replyConflict(reply, "a request with this Idempotency-Key is still running");
    return reply.code(entry.status).header("idempotent-replayed", "true").type(entry.contentType).send(entry.body);
  });

  app.addHook("onSend", async (request, reply, payload) => {
    const key = request.idempotencyKey;
    if (!key) return payload;
    if (reply.statusCode >= 500 || request.idempotencyReleased) {
      await deps.redis.del(redisKey(request, key));
      return payload;
    }
    const entry: Entry = {
      state: "done",
      fingerprint: fingerprint(request),
      status: reply.statusCode,
      body: typeof payload === "string" ? payload : "",
      contentType: String(reply.getHeader("content-type") ?? "application/json; charset=utf-8"),
    };
    await deps.redis.set(redisKey(request, key), JSON.stringify(entry), "PX", DONE_TTL_MS);
    return payload;
  });
}

function replyConflict(reply: FastifyReply, error: string) {
  return reply.code(409).send({ error });
}
