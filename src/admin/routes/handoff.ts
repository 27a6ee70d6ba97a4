import type { FastifyInstance } from "fastify";
import { answerWaiting, type StaffSendDeps } from "../../dlq/staff.ts";
import { PAUSED_INDEFINITELY } from "../../messages/controls.ts";
import { giveBackToBot, pauseConversation, resumeConversation } from "../../state/staff-actions.ts";
import { refuse } from "../refusals.ts";
import { problem, type StaffApp, sendingRoute, staffRoute, type ZodParts } from "../schema.ts";
import * as wire from "../wire.ts";

/** Human handoff: a person writes to a customer waiting for one, gives the conversation back, or pauses and resumes the bot (its messages are still stored). */

const HANDOFF = ["human handoff"];

export function registerHandoffRoutes(scope: FastifyInstance, deps: StaffSendDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  registerWaitingCustomer(app, deps);
  registerBotSwitch(app, deps);
}

function registerWaitingCustomer(app: StaffApp, deps: StaffSendDeps): void {
  app.post(
    "/admin/dlq/:id/answer",
    {
      schema: sendingRoute({
        operationId: "answerWaitingCustomer",
        summary: "Write to a customer waiting for a person (within the 24-hour window); sent once even when pressed twice, and the bot stays paused",
        tags: ["dead letters", ...HANDOFF],
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
      const result = await answerWaiting(deps, id, { text: request.body.text, actor: request.actor }, deps.clock.now(), request.log);
      if (!result.ok) return refuse(request, reply, result);
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
        tags: ["dead letters", ...HANDOFF],
        params: wire.deadLetterId,
        response: { 200: wire.givenBack, 404: wire.deadLetterNotFound, 409: wire.answerRefused },
      }),
    },
    async (request, reply) => {
      const { id } = request.params;
      const result = await giveBackToBot(deps.db, id, request.actor, deps.clock.now());
      if (!result.ok) return refuse(request, reply, result);
      request.log.info({ event: "dlq.given_back", deadLetter: id, conversation: result.conversationId }, "conversation given back to the bot");
      return reply.code(200).send({ ok: true, state: "resolved" });
    },
  );
}

function registerBotSwitch(app: StaffApp, deps: StaffSendDeps): void {
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
      const now = deps.clock.now();
      const until = request.body.minutes ? new Date(now.getTime() + request.body.minutes * 60_000) : PAUSED_INDEFINITELY;
      const paused = await pauseConversation(deps.db, { conversationId: id, until, actor: request.actor }, now);
      if (!paused.ok) return refuse(request, reply, paused);
      request.log.info({ event: "conversation.paused", conversation: id, until }, "bot paused for a person");
      return { ok: true, pausedUntil: until === PAUSED_INDEFINITELY ? null : until, indefinitely: until === PAUSED_INDEFINITELY };
    },
  );

  app.post(
    "/admin/conversations/:id/resume",
    {
      schema: staffRoute("POST", {
        operationId: "resumeConversation",
        summary: "The bot answers again; refused while another person answers one of the conversation's items",
        tags: HANDOFF,
        params: wire.conversationId,
        response: { 200: wire.resumed, 404: wire.conversationNotFound, 409: wire.heldRefused },
      }),
    },
    async (request, reply) => {
      const { id } = request.params;
      const resumed = await resumeConversation(deps.db, { conversationId: id, actor: request.actor }, deps.clock.now());
      if (!resumed.ok) return refuse(request, reply, resumed);
      request.log.info({ event: "conversation.resumed", conversation: id }, "bot resumed");
      return { ok: true };
    },
  );
}
