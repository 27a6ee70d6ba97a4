import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { z } from "zod";
import { discardDeadLetter, getDeadLetter, listOpenDeadLetters, reopenDeadLetter, resendDeadLetter } from "../dlq/dead-letters.ts";
import { PAUSED_INDEFINITELY } from "../jobs/inbound.ts";
import { scheduleReply, type Queues } from "../queue/queues.ts";
import helmet from "@fastify/helmet";
import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import { registerStaffAuth, type StaffAuthDeps } from "./auth.ts";
import { registerIdempotency } from "./idempotency.ts";

export interface AdminDeps extends StaffAuthDeps {
  queues: Queues;
}

const retryBody = z.object({ text: z.string().trim().min(1).max(40_000).optional() }).strict();
const discardBody = z.object({ note: z.string().max(2000).optional() }).strict();
const pauseBody = z.object({ minutes: z.number().int().min(1).max(525_600).optional() }).strict();
const idParams = z.object({ id: z.uuid() });

/** The staff API: automation with the bearer token, people signed in with a session (see auth.ts). */
export function adminRoutes(deps: AdminDeps): FastifyPluginAsync {
  return async (app: FastifyInstance) => {
    // Staff tools often send Content-Type: application/json with no body on a bare "discard";
    // treat that as {} rather than refusing it. Malformed JSON is still a 400.
    app.removeContentTypeParser("application/json");
    app.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
      if (typeof body !== "string" || body.trim() === "") return done(null, {});
      try {
        done(null, JSON.parse(body));
      } catch {
        done(Object.assign(new Error("malformed JSON"), { statusCode: 400 }), undefined);
      }
    });

    // Security headers on every /admin answer (CSP, no framing, no sniffing, HSTS).
    await app.register(helmet);
    registerStaffAuth(app, deps);
    // After authentication, so an unauthenticated request can neither claim nor replay a key;
    // each person's keys are their own.
    registerIdempotency(app, { redis: deps.redis, keyPrefix: deps.keyPrefix, scope: (request) => request.actor });

    app.get("/admin/dlq", async () => ({ items: await listOpenDeadLetters(deps.db) }));

    app.get("/admin/dlq/:id", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      const item = params.success ? await getDeadLetter(deps.db, params.data.id) : null;
      return item ?? reply.code(404).send({ error: "dead letter not found" });
    });

    app.post("/admin/dlq/:id/retry", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "dead letter not found" });
      const body = retryBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { text?: non-empty string }" });
      const result = await resendDeadLetter(deps.db, params.data.id, { text: body.data.text, actor: request.actor });
      if (!result.ok) return reply.code(result.status).send({ error: result.error });
      try {
        await scheduleReply(deps.queues, result.conversationId!, 0);
      } catch (error) {
        const letter = await deps.db.deadLetter.findUnique({ where: { id: params.data.id } });
        await reopenDeadLetter(deps.db, params.data.id, letter?.replyId ?? undefined);
        request.log.error({ event: "dlq.resend_enqueue_failed", err: error }, "resend could not be queued; item reopened");
        return reply.code(503).send({ error: "queue unavailable; the item is still open" });
      }
      request.log.info({ event: "dlq.resent", deadLetter: params.data.id, edited: body.data.text !== undefined }, "dead letter resent");
      return reply.code(202).send({ ok: true, state: "resent" });
    });

    app.post("/admin/dlq/:id/discard", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "dead letter not found" });
      const body = discardBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { note?: string }" });
      const result = await discardDeadLetter(deps.db, params.data.id, { note: body.data.note, actor: request.actor });
      if (!result.ok) return reply.code(result.status).send({ error: result.error });
      request.log.info({ event: "dlq.discarded", deadLetter: params.data.id }, "dead letter discarded");
      return reply.code(200).send({ ok: true, state: "discarded" });
    });

    // Human handoff: while paused, the conversation's messages are stored but not answered.
    app.post("/admin/conversations/:id/pause", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "conversation not found" });
      const body = pauseBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { minutes?: whole number from 1 to 525600 }" });
      const until = body.data.minutes ? new Date(Date.now() + body.data.minutes * 60_000) : PAUSED_INDEFINITELY;
      const paused = await deps.db.conversation.updateMany({ where: { id: params.data.id }, data: { pausedUntil: until, pausedBy: request.actor } });
      if (paused.count === 0) return reply.code(404).send({ error: "conversation not found" });
      request.log.info({ event: "conversation.paused", conversation: params.data.id, until }, "bot paused for a person");
      return { ok: true, pausedUntil: until === PAUSED_INDEFINITELY ? null : until, indefinitely: until === PAUSED_INDEFINITELY };
    });

    app.post("/admin/conversations/:id/resume", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "conversation not found" });
      const resumed = await deps.db.conversation.updateMany({ where: { id: params.data.id }, data: { pausedUntil: null, pausedBy: null } });
      if (resumed.count === 0) return reply.code(404).send({ error: "conversation not found" });
      request.log.info({ event: "conversation.resumed", conversation: params.data.id }, "bot resumed");
      return { ok: true };
    });

    // Operators see BullMQ's own queues through bull-board, behind the same sign-in.
    const board = new FastifyAdapter();
    board.setBasePath("/admin/queues");
    createBullBoard({ queues: Object.values(deps.queues).map((queue) => new BullMQAdapter(queue)), serverAdapter: board });
    await app.register(board.registerPlugin(), { prefix: "/admin/queues" });
  };
}
