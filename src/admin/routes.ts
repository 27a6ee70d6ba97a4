import type { FastifyInstance, FastifyPluginAsync } from "fastify";
import { z } from "zod";
import { auditConversation, discardDeadLetter, reopenDeadLetter, resendDeadLetter } from "../dlq/dead-letters.ts";
import { REASON_KINDS, type ReasonKind } from "../dlq/explain.ts";
import { summarizeDeadLetters } from "../dlq/reasons.ts";
import { getDeadLetter, listDeadLetters } from "../dlq/views.ts";
import { PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { scheduleReply, type Queues } from "../queue/queues.ts";
import helmet from "@fastify/helmet";
import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import { registerStaffAuth, type StaffAuthDeps } from "./auth.ts";
import { registerIdempotency } from "./idempotency.ts";
import { registerStaffPage } from "./page.ts";

export interface AdminDeps extends StaffAuthDeps {
  queues: Queues;
}

/** `confirmMaybeSent`: the person knows the last send may already have arrived, and resends anyway. */
const retryBody = z.object({ text: z.string().trim().min(1).max(40_000).optional(), confirmMaybeSent: z.boolean().optional() }).strict();
const regenerateBody = z.object({ confirmMaybeSent: z.boolean().optional() }).strict();
const discardBody = z.object({ note: z.string().max(2000).optional() }).strict();
const pauseBody = z.object({ minutes: z.number().int().min(1).max(525_600).optional() }).strict();
const idParams = z.object({ id: z.uuid() });
const listQuery = z
  .object({
    state: z.enum(["open", "resent", "discarded"]).optional(),
    code: z.string().max(40).optional(),
    source: z.string().max(40).optional(),
    phoneNumberId: z.string().regex(/^\d+$/).optional(),
    q: z.string().trim().min(1).max(140).optional(),
    reason: z.enum(Object.keys(REASON_KINDS) as [ReasonKind, ...ReasonKind[]]).optional(),
    order: z.enum(["oldest", "newest"]).optional(),
    limit: z.coerce.number().int().min(1).max(500).optional(),
  })
  .strict();
const summaryQuery = z
  .object({ state: z.enum(["open", "resent", "discarded"]).optional(), phoneNumberId: z.string().regex(/^\d+$/).optional() })
  .strict();
const bulkBody = z
  .object({ code: z.string().min(1).max(40), spacingMs: z.number().int().min(0).max(60_000).optional(), confirmMaybeSent: z.boolean().optional() })
  .strict();

/** A refused staff action's answer: the reason, and a code the page can act on (e.g. ask to confirm a maybe-sent resend). */
const refusal = (result: { error: string; code?: string | undefined }) => ({ error: result.error, ...(result.code ? { code: result.code } : {}) });

/** After an outage, resends go out this far apart, so as not to trip Meta's rate limits again. */
const BULK_SPACING_MS = 500;

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
    registerStaffPage(app);
    // After authentication, so an unauthenticated request can neither claim nor replay a key;
    // each person's keys are their own.
    registerIdempotency(app, { redis: deps.redis, keyPrefix: deps.keyPrefix, scope: (request) => request.actor });

    app.get("/admin/dlq", async (request, reply) => {
      const query = listQuery.safeParse(request.query);
      if (!query.success) return reply.code(400).send({ error: `bad filter: ${query.error.issues.map((i) => i.path.join(".")).join(", ")}` });
      return listDeadLetters(deps.db, query.data);
    });

    // The queue's counts by reason (and the oldest of each), for the page's filters.
    app.get("/admin/dlq/summary", async (request, reply) => {
      const query = summaryQuery.safeParse(request.query);
      if (!query.success) return reply.code(400).send({ error: `bad filter: ${query.error.issues.map((i) => i.path.join(".")).join(", ")}` });
      return summarizeDeadLetters(deps.db, query.data);
    });

    app.get("/admin/dlq/:id", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      const item = params.success ? await getDeadLetter(deps.db, params.data.id) : null;
      return item ?? reply.code(404).send({ error: "dead letter not found" });
    });

    /** Resend one item and queue its reply job `delayMs` from now; undone if the queue is unreachable. */
    const resend = async (
      id: string,
      input: { text?: string | undefined; regenerate?: boolean; confirmMaybeSent?: boolean | undefined; actor: string },
      delayMs = 0,
    ) => {
      const result = await resendDeadLetter(deps.db, id, input);
      if (!result.ok) return result;
      try {
        await scheduleReply(deps.queues, result.conversationId!, delayMs);
      } catch {
        const letter = await deps.db.deadLetter.findUnique({ where: { id } });
        await reopenDeadLetter(deps.db, id, letter?.replyId ?? undefined);
        return { ok: false as const, status: 503 as const, error: "queue unavailable; the item is still open" };
      }
      return result;
    };

    app.post("/admin/dlq/:id/retry", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "dead letter not found" });
      const body = retryBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { text?: non-empty string, confirmMaybeSent?: boolean }" });
      const result = await resend(params.data.id, { ...body.data, actor: request.actor });
      if (!result.ok) return reply.code(result.status).send(refusal(result));
      request.log.info({ event: "dlq.resent", deadLetter: params.data.id, edited: body.data.text !== undefined }, "dead letter resent");
      return reply.code(202).send({ ok: true, state: "resent" });
    });

    // An explicit choice, because it costs a Claude call: drop the draft and write a new one.
    app.post("/admin/dlq/:id/regenerate", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "dead letter not found" });
      const body = regenerateBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { confirmMaybeSent?: boolean }" });
      const result = await resend(params.data.id, { regenerate: true, confirmMaybeSent: body.data.confirmMaybeSent, actor: request.actor });
      if (!result.ok) return reply.code(result.status).send(refusal(result));
      request.log.info({ event: "dlq.regenerated", deadLetter: params.data.id }, "dead letter regenerated");
      return reply.code(202).send({ ok: true, state: "resent" });
    });

    // After an outage: resend every open item of one reason, paced.
    app.post("/admin/dlq/bulk-retry", async (request, reply) => {
      const body = bulkBody.safeParse(request.body ?? {});
      if (!body.success) return reply.code(400).send({ error: "body must be { code: string, spacingMs?: number, confirmMaybeSent?: boolean }" });
      const { items } = await listDeadLetters(deps.db, { code: body.data.code, limit: 500 });
      const spacing = body.data.spacingMs ?? BULK_SPACING_MS;
      let resent = 0;
      let skipped = 0;
      // Never one reply twice, even if it stood in the list twice.
      const seen = new Set<string>();
      for (const item of items) {
        if (item.reply && seen.has(item.reply.id)) continue;
        if (item.reply) seen.add(item.reply.id);
        const result = await resend(item.id, { actor: request.actor, confirmMaybeSent: body.data.confirmMaybeSent }, resent * spacing);
        if (result.ok) resent++;
        else skipped++;
      }
      request.log.info({ event: "dlq.bulk_resent", code: body.data.code, resent, skipped }, "dead letters resent in bulk");
      return reply.code(202).send({ ok: true, resent, skipped, spacingMs: spacing });
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
      await auditConversation(deps.db, params.data.id, request.actor, "pause_bot", { until: until === PAUSED_INDEFINITELY ? null : until });
      request.log.info({ event: "conversation.paused", conversation: params.data.id, until }, "bot paused for a person");
      return { ok: true, pausedUntil: until === PAUSED_INDEFINITELY ? null : until, indefinitely: until === PAUSED_INDEFINITELY };
    });

    app.post("/admin/conversations/:id/resume", async (request, reply) => {
      const params = idParams.safeParse(request.params);
      if (!params.success) return reply.code(404).send({ error: "conversation not found" });
      const resumed = await deps.db.conversation.updateMany({ where: { id: params.data.id }, data: { pausedUntil: null, pausedBy: null } });
      if (resumed.count === 0) return reply.code(404).send({ error: "conversation not found" });
      await auditConversation(deps.db, params.data.id, request.actor, "resume_bot");
      request.log.info({ event: "conversation.resumed", conversation: params.data.id }, "bot resumed");
      return { ok: true };
    });

    // BullMQ's own queues through bull-board, behind the same sign-in, for operators only: job
    // payloads carry message text and phone numbers. Read-only: its buttons (retry, clean,
    // promote, remove) send no X-CSRF-Token, so a session could not use them anyway, and
    // resending belongs to the dead-letter routes, which keep the send-once guarantees.
    const board = new FastifyAdapter();
    board.setBasePath("/admin/queues");
    createBullBoard({
      queues: Object.values(deps.queues).map((queue) => new BullMQAdapter(queue, { readOnlyMode: true })),
      serverAdapter: board,
    });
    await app.register(async (operatorsOnly) => {
      operatorsOnly.addHook("onRequest", async (request, reply) => {
        if (!request.operator) return reply.code(403).send({ error: "the queues are for operators" });
      });
      await operatorsOnly.register(board.registerPlugin(), { prefix: "/admin/queues" });
    });
  };
}
