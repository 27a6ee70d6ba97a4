import { createBullBoard } from "@bull-board/api";
import { BullMQAdapter } from "@bull-board/api/bullMQAdapter";
import { FastifyAdapter } from "@bull-board/fastify";
import helmet from "@fastify/helmet";
import type { FastifyBaseLogger, FastifyInstance, FastifyPluginAsync } from "fastify";
import { summarizeDeadLetters } from "../dlq/reasons.ts";
import { getDeadLetter, listDeadLetters } from "../dlq/views.ts";
import { PAUSED_INDEFINITELY } from "../messages/controls.ts";
import { type Queues, scheduleReply } from "../queue/queues.ts";
import { pauseConversation, resumeConversation } from "../state/conversations.ts";
import { answerHandedOff, discardDeadLetter, giveBackToBot, reopenAfterFailedQueue, resendDeadLetter } from "../state/dead-letters.ts";
import type { TemplateCatalog } from "../whatsapp/templates.ts";
import { registerStaffAuth, type StaffAuthDeps } from "./auth.ts";
import { type CostRoutesDeps, registerCostRoutes } from "./costs.ts";
import { registerLiveQueue } from "./events.ts";
import { registerIdempotency } from "./idempotency.ts";
import { describeStaffApi } from "./openapi.ts";
import { registerStaffPage } from "./page.ts";
import { registerPresence } from "./presence.ts";
import { problem, serializeAsJson, staffRoute, validateWithZod, type ZodParts } from "./schema.ts";
import { registerTemplateRoutes } from "./templates.ts";
import * as wire from "./wire.ts";

export interface AdminDeps extends StaffAuthDeps {
  queues: Queues;
  /** The cost ledger's prices (GET /admin/costs). */
  costs: CostRoutesDeps["costs"];
  /** The business account's approved templates (WHATSAPP_BUSINESS_ACCOUNT_ID); undefined: none configured. */
  templates: TemplateCatalog | undefined;
}

/** A refused staff action's answer: the reason, and a code the page can act on (e.g. ask to confirm a maybe-sent resend). */
const refusal = (result: { error: string; code?: string | undefined }) => ({ error: result.error, ...(result.code ? { code: result.code } : {}) });

/** After an outage, resends go out this far apart, so as not to trip Meta's rate limits again. */
const BULK_SPACING_MS = 500;

/** The staff API: automation with the bearer token, people signed in with a session (see auth.ts). */
export function adminRoutes(deps: AdminDeps): FastifyPluginAsync {
  return async (scope: FastifyInstance) => {
    const app = scope.withTypeProvider<ZodParts>();
    app.setValidatorCompiler(validateWithZod);
    app.setSerializerCompiler(serializeAsJson);
    // First, so that it sees every route registered after it.
    describeStaffApi(scope);

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
    registerStaffAuth(scope, deps);
    registerStaffPage(scope);
    // After authentication, so an unauthenticated request can neither claim nor replay a key;
    // each person's keys are their own.
    registerIdempotency(scope, { redis: deps.redis, keyPrefix: deps.keyPrefix, scope: (request) => request.actor });
    // After the Idempotency-Key's replay: a repeated request is answered as the first was.
    registerPresence(scope, { db: deps.db });

    const DLQ = ["dead letters"];
    app.get(
      "/admin/dlq",
      {
        schema: staffRoute("GET", {
          operationId: "listDeadLetters",
          summary: "The dead letters: open and oldest first, or filtered",
          tags: DLQ,
          querystring: wire.listQuery,
          response: { 200: wire.deadLetterList, 400: problem("a bad filter (the body names it)") },
        }),
      },
      async (request) => listDeadLetters(deps.db, request.query),
    );

    // The queue's counts by reason (and the oldest of each), for the page's filters.
    app.get(
      "/admin/dlq/summary",
      {
        schema: staffRoute("GET", {
          operationId: "summarizeDeadLetters",
          summary: "The open items (or those in `state`) counted by reason",
          tags: DLQ,
          querystring: wire.summaryQuery,
          response: { 200: wire.deadLetterSummary, 400: problem("a bad filter (the body names it)") },
        }),
      },
      async (request) => summarizeDeadLetters(deps.db, request.query),
    );

    app.get(
      "/admin/dlq/:id",
      {
        schema: staffRoute("GET", {
          operationId: "getDeadLetter",
          summary: "One item with everything needed to decide",
          tags: DLQ,
          params: wire.deadLetterId,
          response: { 200: wire.deadLetterDetail, 404: wire.deadLetterNotFound },
        }),
      },
      async (request, reply) => (await getDeadLetter(deps.db, request.params.id)) ?? reply.code(404).send({ error: "dead letter not found" }),
    );

    /** Resend one item and queue its reply job `delayMs` from now; undone if the queue is unreachable. */
    const resend = async (id: string, input: Parameters<typeof resendDeadLetter>[2], delayMs = 0) => {
      const result = await resendDeadLetter(deps.db, id, input, new Date());
      if (!result.ok) return result;
      try {
        await scheduleReply(deps.queues, result.conversationId!, delayMs);
      } catch {
        await reopenAfterFailedQueue(deps.db, id, new Date());
        return { ok: false as const, status: 503 as const, error: "queue unavailable; the item is still open" };
      }
      return result;
    };

    /**
     * A person's message to a customer waiting for one, stored once and its reply job queued.
     * Not undone when the queue is unreachable: the message is stored, ready, and the
     * reconciler queues its job; undoing it could race a run already sending it.
     */
    const answerWaiting = async (id: string, input: Parameters<typeof answerHandedOff>[2], log: FastifyBaseLogger) => {
      const result = await answerHandedOff(deps.db, id, input, new Date());
      if (!result.ok) return result;
      await scheduleReply(deps.queues, result.conversationId!, 0).catch((error: unknown) =>
        log.warn({ event: "dlq.answer_not_queued", deadLetter: id, err: error }, "the answer's reply job could not be queued; the reconciler will queue it"),
      );
      return result;
    };

    /** What a resend answers: queued, or refused (refusal's 404, 409 and 503). */
    const resendAnswers = (badBody: string) => ({
      202: wire.resent,
      400: problem(badBody),
      404: wire.deadLetterNotFound,
      409: wire.resendRefused,
      503: wire.queueUnavailable,
    });

    app.post(
      "/admin/dlq/:id/retry",
      {
        schema: staffRoute("POST", {
          operationId: "retryDeadLetter",
          summary: "Resend: the body's `text` if given, else the stored draft; exactly once even when pressed twice",
          tags: DLQ,
          params: wire.deadLetterId,
          body: wire.retryBody,
          response: resendAnswers(
            `a body other than { text?, confirmMaybeSent? }, or a text over ${wire.RESEND_TEXT_LIMIT} characters (ten WhatsApp messages)`,
          ),
        }),
      },
      async (request, reply) => {
        const result = await resend(request.params.id, { ...request.body, actor: request.actor });
        if (!result.ok) return reply.code(result.status).send(refusal(result));
        request.log.info({ event: "dlq.resent", deadLetter: request.params.id, edited: request.body.text !== undefined }, "dead letter resent");
        return reply.code(202).send({ ok: true, state: "resent" });
      },
    );

    // An explicit choice, because it costs a Claude call: drop the draft and write a new one.
    app.post(
      "/admin/dlq/:id/regenerate",
      {
        schema: staffRoute("POST", {
          operationId: "regenerateDeadLetter",
          summary: "Drop the draft, have Claude write a new one (a paid call), then send it",
          tags: DLQ,
          params: wire.deadLetterId,
          body: wire.regenerateBody,
          response: resendAnswers("a body other than { confirmMaybeSent? }"),
        }),
      },
      async (request, reply) => {
        const { id } = request.params;
        const result = await resend(id, { regenerate: true, confirmMaybeSent: request.body.confirmMaybeSent, actor: request.actor });
        if (!result.ok) return reply.code(result.status).send(refusal(result));
        request.log.info({ event: "dlq.regenerated", deadLetter: id }, "dead letter regenerated");
        return reply.code(202).send({ ok: true, state: "resent" });
      },
    );

    // After an outage: resend every open item of one reason, paced.
    app.post(
      "/admin/dlq/bulk-retry",
      {
        schema: staffRoute("POST", {
          operationId: "bulkRetryDeadLetters",
          summary: "After an outage: resend every open item with one code, paced, each reply once",
          tags: DLQ,
          body: wire.bulkBody,
          response: { 202: wire.bulkResent, 400: problem("a body other than { code, spacingMs?, confirmMaybeSent? }") },
        }),
      },
      async (request, reply) => {
        const { code, spacingMs, confirmMaybeSent } = request.body;
        const { items } = await listDeadLetters(deps.db, { code, limit: 500 });
        const spacing = spacingMs ?? BULK_SPACING_MS;
        let resent = 0;
        let skipped = 0;
        // Never one reply twice, even if it stood in the list twice.
        const seen = new Set<string>();
        for (const item of items) {
          if (item.reply && seen.has(item.reply.id)) continue;
          if (item.reply) seen.add(item.reply.id);
          const result = await resend(item.id, { actor: request.actor, confirmMaybeSent }, resent * spacing);
          if (result.ok) resent++;
          else skipped++;
        }
        request.log.info({ event: "dlq.bulk_resent", code, resent, skipped }, "dead letters resent in bulk");
        return reply.code(202).send({ ok: true, resent, skipped, spacingMs: spacing });
      },
    );

    app.post(
      "/admin/dlq/:id/discard",
      {
        schema: staffRoute("POST", {
          operationId: "discardDeadLetter",
          summary: "Close it, with an optional note",
          tags: DLQ,
          params: wire.deadLetterId,
          body: wire.discardBody,
          response: {
            200: wire.discarded,
            400: problem("a body other than { note? }"),
            404: wire.deadLetterNotFound,
            409: wire.discardRefused,
          },
        }),
      },
      async (request, reply) => {
        const { id } = request.params;
        const result = await discardDeadLetter(deps.db, id, { note: request.body.note, actor: request.actor }, new Date());
        if (!result.ok) return reply.code(result.status).send({ error: result.error });
        request.log.info({ event: "dlq.discarded", deadLetter: id }, "dead letter discarded");
        return reply.code(200).send({ ok: true, state: "discarded" });
      },
    );

    // Human handoff: while paused, the conversation's messages are stored but not answered.
    const HANDOFF = ["human handoff"];
    app.post(
      "/admin/dlq/:id/answer",
      {
        schema: staffRoute("POST", {
          operationId: "answerWaitingCustomer",
          summary: "Write to a customer waiting for a person (within the 24-hour window); sent once even when pressed twice, and the bot stays paused",
          tags: [...DLQ, ...HANDOFF],
          params: wire.deadLetterId,
          body: wire.answerBody,
          response: {
            202: wire.answered,
            400: problem(`a body other than { text }, or a text over ${wire.RESEND_TEXT_LIMIT} characters (ten WhatsApp messages)`),
            404: wire.deadLetterNotFound,
            409: wire.answerRefused,
          },
        }),
      },
      async (request, reply) => {
        const { id } = request.params;
        const result = await answerWaiting(id, { text: request.body.text, actor: request.actor }, request.log);
        if (!result.ok) return reply.code(result.status).send(refusal(result));
        request.log.info({ event: "dlq.answered", deadLetter: id, reply: result.replyId }, "a person wrote to a waiting customer");
        return reply.code(202).send({ ok: true, state: "open" });
      },
    );

    app.post(
      "/admin/dlq/:id/give-back",
      {
        schema: staffRoute("POST", {
          operationId: "giveBackToBot",
          summary: "The person is done: the bot answers the customer's next message, with the person's words in its history",
          tags: [...DLQ, ...HANDOFF],
          params: wire.deadLetterId,
          response: { 200: wire.givenBack, 404: wire.deadLetterNotFound, 409: wire.answerRefused },
        }),
      },
      async (request, reply) => {
        const { id } = request.params;
        const result = await giveBackToBot(deps.db, id, request.actor, new Date());
        if (!result.ok) return reply.code(result.status).send(refusal(result));
        request.log.info({ event: "dlq.given_back", deadLetter: id, conversation: result.conversationId }, "conversation given back to the bot");
        return reply.code(200).send({ ok: true, state: "resolved" });
      },
    );

    app.post(
      "/admin/conversations/:id/pause",
      {
        schema: staffRoute("POST", {
          operationId: "pauseConversation",
          summary: "Human handoff: the bot stops answering (messages are still stored)",
          tags: HANDOFF,
          params: wire.conversationId,
          body: wire.pauseBody,
          response: { 200: wire.paused, 400: problem("a body other than { minutes? }"), 404: wire.conversationNotFound },
        }),
      },
      async (request, reply) => {
        const { id } = request.params;
        const until = request.body.minutes ? new Date(Date.now() + request.body.minutes * 60_000) : PAUSED_INDEFINITELY;
        const paused = await pauseConversation(deps.db, { conversationId: id, until, actor: request.actor }, new Date());
        if (!paused.ok) return reply.code(404).send({ error: "conversation not found" });
        request.log.info({ event: "conversation.paused", conversation: id, until }, "bot paused for a person");
        return { ok: true, pausedUntil: until === PAUSED_INDEFINITELY ? null : until, indefinitely: until === PAUSED_INDEFINITELY };
      },
    );

    app.post(
      "/admin/conversations/:id/resume",
      {
        schema: staffRoute("POST", {
          operationId: "resumeConversation",
          summary: "The bot answers again",
          tags: HANDOFF,
          params: wire.conversationId,
          response: { 200: wire.resumed, 404: wire.conversationNotFound },
        }),
      },
      async (request, reply) => {
        const { id } = request.params;
        const resumed = await resumeConversation(deps.db, { conversationId: id, actor: request.actor }, new Date());
        if (!resumed.ok) return reply.code(404).send({ error: "conversation not found" });
        request.log.info({ event: "conversation.resumed", conversation: id }, "bot resumed");
        return { ok: true };
      },
    );

    registerTemplateRoutes(scope, {
      templates: deps.templates,
      metaRates: deps.costs.metaRates,
      // A waiting customer has no failed reply: the template is the person's message to them.
      send: async (id, { template, confirmMaybeSent, actor }, log) => {
        const item = await deps.db.deadLetter.findUnique({ where: { id }, select: { replyId: true } });
        if (item && item.replyId === null) {
          const answered = await answerWaiting(id, { template, actor }, log);
          return answered.ok ? { ok: true, state: "open" } : answered;
        }
        const resent = await resend(id, { template, confirmMaybeSent, actor });
        return resent.ok ? { ok: true, state: "resent" } : resent;
      },
    });
    registerCostRoutes(scope, { db: deps.db, costs: deps.costs });
    registerLiveQueue(scope, { db: deps.db });

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
