import type { FastifyInstance } from "fastify";
import { getDeadLetter, listDeadLetters } from "../../conversations/items.ts";
import { summarizeDeadLetters } from "../../dlq/reasons.ts";
import { bulkRetry, resend, type StaffSendDeps } from "../../dlq/staff.ts";
import { discardDeadLetter } from "../../state/staff-actions.ts";
import { refuse } from "../refusals.ts";
import { problem, type StaffApp, sendingRoute, staffRoute, type ZodParts } from "../schema.ts";
import * as wire from "../wire.ts";

/** The dead letters: the queue, one item, and what a person does to a failed reply (resend, regenerate, bulk resend, discard). */

const DLQ = ["dead letters"];

export function registerDeadLetterRoutes(scope: FastifyInstance, deps: StaffSendDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  registerReads(app, deps);
  registerResends(app, deps);
  registerDiscard(app, deps);
}

function registerReads(app: StaffApp, deps: StaffSendDeps): void {
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
    async (request, reply) => (await getDeadLetter(deps.db, request.params.id, deps.clock.now())) ?? reply.code(404).send({ error: "dead letter not found" }),
  );
}

/** What a resend answers: queued, or refused (src/admin/refusals.ts). */
const resendAnswers = (badBody: string) => ({
  202: wire.resent,
  400: problem(badBody),
  404: wire.deadLetterNotFound,
  409: wire.resendRefused,
  503: wire.queueUnavailable,
});

function registerResends(app: StaffApp, deps: StaffSendDeps): void {
  app.post(
    "/admin/dlq/:id/retry",
    {
      schema: sendingRoute({
        operationId: "retryDeadLetter",
        summary: "Resend: the body's `text` if given, else the stored draft; exactly once even when pressed twice",
        tags: DLQ,
        params: wire.deadLetterId,
        body: wire.retryBody,
        response: resendAnswers(`a body other than { text?, confirmMaybeSent? }, or a text over ${wire.RESEND_TEXT_LIMIT} characters (ten WhatsApp messages)`),
      }),
    },
    async (request, reply) => {
      const result = await resend(deps, request.params.id, { ...request.body, actor: request.actor }, deps.clock.now());
      if (!result.ok) return refuse(request, reply, result);
      request.log.info({ event: "dlq.resent", deadLetter: request.params.id, edited: request.body.text !== undefined }, "dead letter resent");
      return reply.code(202).send({ ok: true, state: "resent" });
    },
  );

  // An explicit choice, because it costs a Claude call: drop the draft and write a new one.
  app.post(
    "/admin/dlq/:id/regenerate",
    {
      schema: sendingRoute({
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
      const result = await resend(deps, id, { regenerate: true, confirmMaybeSent: request.body.confirmMaybeSent, actor: request.actor }, deps.clock.now());
      if (!result.ok) return refuse(request, reply, result);
      request.log.info({ event: "dlq.regenerated", deadLetter: id }, "dead letter regenerated");
      return reply.code(202).send({ ok: true, state: "resent" });
    },
  );

  // After an outage: resend every open item of one reason, paced.
  app.post(
    "/admin/dlq/bulk-retry",
    {
      schema: sendingRoute({
        operationId: "bulkRetryDeadLetters",
        summary: "After an outage: resend every open item with one code, paced, each reply once; items another person answers are skipped",
        tags: DLQ,
        body: wire.bulkBody,
        response: { 202: wire.bulkResent, 400: problem("a body other than { code, spacingMs?, confirmMaybeSent? }") },
      }),
    },
    async (request, reply) => {
      const { resent, skipped, spacingMs } = await bulkRetry(deps, { ...request.body, actor: request.actor }, deps.clock.now());
      request.log.info({ event: "dlq.bulk_resent", code: request.body.code, resent, skipped }, "dead letters resent in bulk");
      return reply.code(202).send({ ok: true, resent, skipped, spacingMs });
    },
  );
}

function registerDiscard(app: StaffApp, deps: StaffSendDeps): void {
  app.post(
    "/admin/dlq/:id/discard",
    {
      schema: staffRoute("POST", {
        operationId: "discardDeadLetter",
        summary: "Close it, with an optional note",
        tags: DLQ,
        params: wire.deadLetterId,
        body: wire.discardBody,
        response: { 200: wire.discarded, 400: problem("a body other than { note? }"), 404: wire.deadLetterNotFound, 409: wire.discardRefused },
      }),
    },
    async (request, reply) => {
      const { id } = request.params;
      const result = await discardDeadLetter(deps.db, id, { note: request.body.note, actor: request.actor }, deps.clock.now());
      if (!result.ok) return refuse(request, reply, result);
      request.log.info({ event: "dlq.discarded", deadLetter: id }, "dead letter discarded");
      return reply.code(200).send({ ok: true, state: "discarded" });
    },
  );
}
