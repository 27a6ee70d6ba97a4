import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { z } from "zod";
import type { Db } from "../db/client.ts";
import { discardDeadLetter, listOpenDeadLetters, reopenDeadLetter, resendDeadLetter } from "../dlq/dead-letters.ts";
import { scheduleReply, type Queues } from "../queue/queues.ts";
import { safeEqual } from "../webhook/signature.ts";

export interface AdminDeps {
  db: Db;
  queues: Queues;
  adminToken: string;
}

const retryBody = z.object({ text: z.string().trim().min(1).max(40_000).optional() }).strict();
const discardBody = z.object({ note: z.string().max(2000).optional() }).strict();
const idParams = z.object({ id: z.uuid() });

/** The staff API. The bearer token is attributed as "api" (people get their own sign-in later). */
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

    app.addHook("onRequest", async (request, reply) => {
      const header = request.headers.authorization ?? "";
      const token = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : "";
      if (!token || !safeEqual(token, deps.adminToken)) {
        return reply.code(401).header("www-authenticate", "Bearer").send({ error: "unauthorized" });
      }
    });

    app.get("/admin/dlq", async () => ({ items: await listOpenDeadLetters(deps.db) }));

    app.post("/admin/dlq/:id/retry", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "dead letter not found" });
      const body = retryBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { text?: non-empty string }" });
      const result = await resendDeadLetter(deps.db, params.data.id, { text: body.data.text, actor: API_ACTOR });
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
      const result = await discardDeadLetter(deps.db, params.data.id, { note: body.data.note, actor: API_ACTOR });
      if (!result.ok) return reply.code(result.status).send({ error: result.error });
      request.log.info({ event: "dlq.discarded", deadLetter: params.data.id }, "dead letter discarded");
      return reply.code(200).send({ ok: true, state: "discarded" });
    });
  };
}

/** Who acted: the bearer token stands for automation; people get their own sign-in later. */
const API_ACTOR = "api";
