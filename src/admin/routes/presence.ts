import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { Clock } from "../../clock.ts";
import type { Db } from "../../db/client.ts";
import { leaveItem, PRESENCE_BEAT_MS, sayPresence, takeOver } from "../../state/staff-actions.ts";
import { answer, problem, requestPart, staffRoute, type ZodParts } from "../schema.ts";
import * as wire from "../wire.ts";

/**
 * Two people, one item (issue 21): who has an item open, and who is answering it. A page with
 * an item open says so every PRESENCE_BEAT_MS; it is gone when it says so or goes quiet. While
 * a person answers an item, the others' actions on it are refused by the actions themselves
 * (src/state/staff-actions.ts) until they take it over. Rows in Postgres, so every web process
 * behind the balancer sees the same.
 */

const TAGS = ["dead letters", "presence"];

const presenceBody = requestPart(z.object({ answering: z.boolean().optional().describe("true once this person has started a reply here") }).strict(), {
  status: 400,
  error: "body must be { answering?: boolean }",
});
const viewers = answer(
  z.object({
    viewers: z
      .array(z.object({ actor: z.string(), seenAt: z.string().datetime(), answering: z.boolean() }))
      .describe("the other people with this item open now, the one answering it first"),
  }),
  "who else has the item open",
);
const takenOver = answer(z.object({ ok: z.literal(true), from: z.string().nullable().describe("who was answering it, if anyone") }), "it is yours");

export function registerPresenceRoutes(scope: FastifyInstance, deps: { db: Db; clock: Clock }): void {
  const app = scope.withTypeProvider<ZodParts>();

  app.post(
    "/admin/dlq/:id/presence",
    {
      schema: staffRoute("POST", {
        operationId: "sayPresence",
        summary: `This person has the item open (say it every ${PRESENCE_BEAT_MS / 1000} s): who else has it open, and who is answering`,
        tags: TAGS,
        params: wire.deadLetterId,
        body: presenceBody,
        response: { 200: viewers, 400: problem("a body other than { answering? }"), 404: wire.deadLetterNotFound },
      }),
    },
    async (request, reply) => {
      const others = await sayPresence(deps.db, request.params.id, { actor: request.actor, answering: request.body.answering === true }, deps.clock.now());
      if (!others) return reply.code(404).send({ error: "dead letter not found" });
      return { viewers: others.map((v) => ({ actor: v.actor, seenAt: v.seenAt.toISOString(), answering: v.answering })) };
    },
  );

  app.delete(
    "/admin/dlq/:id/presence",
    {
      schema: staffRoute("DELETE", {
        operationId: "leaveItem",
        summary: "This person has left the item: they no longer have it open, nor answer it",
        tags: TAGS,
        params: wire.deadLetterId,
        response: { 200: answer(z.object({ ok: z.literal(true) }), "gone"), 404: wire.deadLetterNotFound },
      }),
    },
    async (request) => {
      await leaveItem(deps.db, request.params.id, request.actor);
      return { ok: true as const };
    },
  );

  app.post(
    "/admin/dlq/:id/take-over",
    {
      schema: staffRoute("POST", {
        operationId: "takeOverItem",
        summary: "Answer this item yourself: whoever was answering it is no longer, and the item's history says who took it from whom",
        tags: TAGS,
        params: wire.deadLetterId,
        response: { 200: takenOver, 404: wire.deadLetterNotFound },
      }),
    },
    async (request, reply) => {
      const from = await takeOver(deps.db, request.params.id, request.actor, deps.clock.now());
      if (from === null) return reply.code(404).send({ error: "dead letter not found" });
      request.log.info({ event: "dlq.taken_over", deadLetter: request.params.id, from: from || undefined }, "item taken over");
      return { ok: true as const, from: from || null };
    },
  );
}
