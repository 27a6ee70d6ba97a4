import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import type { Db, Prisma } from "../db/client.ts";
import { recordTakeOver } from "../state/dead-letters.ts";
import { releaseIdempotencyKey } from "./idempotency.ts";
import { answer, problem, requestPart, staffRoute, type ZodParts } from "./schema.ts";
import * as wire from "./wire.ts";

/**
 * Two people, one item (issue 21): who has an item open, and who is answering it. A page with
 * an item open says so every PRESENCE_BEAT_MS (`POST /admin/dlq/:id/presence`), `answering`
 * once its person has started a reply there; it is gone when it says so (`DELETE`) or stops
 * saying anything for PRESENCE_TTL_MS. An action on the item (a send, a discard, a give-back)
 * by anyone else while a person is answering it is refused with 409 `held_by_other`, naming
 * them, until they take it over (`POST /admin/dlq/:id/take-over`, in the item's history).
 * Rows in Postgres, so every web process behind the balancer sees the same.
 */

/** How often an open page says it is there. */
export const PRESENCE_BEAT_MS = 10_000;
/** A page silent this long has gone (closed, asleep, offline). */
export const PRESENCE_TTL_MS = 30_000;

/** The actions that change an item or write to its customer: refused while someone else answers it. */
const GUARDED = new Set(["retry", "regenerate", "template", "answer", "give-back", "discard"]);

export interface PresenceDeps {
  db: Db;
}

interface Viewer {
  actor: string;
  seenAt: Date;
  answering: boolean;
}

/**
 * Whoever else is answering the item now, or, when nobody is, the actor becomes its person
 * answering: checked and claimed under the item's row lock, so of two people pressing Send at
 * once, one is refused. Undefined: the actor may go on. Also undefined for an item that does
 * not exist (the action's own 404 says so).
 */
async function claimOrHolder(db: Db, itemId: string, actor: string, now: Date): Promise<string | undefined> {
  return db.$transaction(async (tx) => {
    const [item] = await tx.$queryRaw<{ id: string }[]>`SELECT id FROM dead_letters WHERE id = ${itemId}::uuid FOR UPDATE`;
    if (!item) return undefined;
    const since = new Date(now.getTime() - PRESENCE_TTL_MS);
    const [holder] = await tx.$queryRaw<{ actor: string }[]>`
      SELECT actor FROM staff_presence
      WHERE dead_letter_id = ${itemId}::uuid AND actor <> ${actor} AND answering_at IS NOT NULL AND seen_at > ${since}::timestamptz
      ORDER BY answering_at LIMIT 1`;
    if (holder) return holder.actor;
    await answerFromNow(tx, itemId, actor, now);
    return undefined;
  });
}

/** The actor has the item open and answers it from `now` (a claim, or a take-over), inside the caller's transaction. */
async function answerFromNow(tx: Prisma.TransactionClient, itemId: string, actor: string, now: Date): Promise<void> {
  await tx.$executeRaw`
    INSERT INTO staff_presence (dead_letter_id, actor, seen_at, answering_at) VALUES (${itemId}::uuid, ${actor}, ${now}::timestamptz, ${now}::timestamptz)
    ON CONFLICT (dead_letter_id, actor) DO UPDATE SET seen_at = EXCLUDED.seen_at, answering_at = EXCLUDED.answering_at`;
}

const itemIdPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const heldByOther = (holder: string) => ({
  code: "held_by_other" as const,
  error: `${holder} is answering this customer right now. Take the item over to act on it yourself; they will be told.`,
});

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

export function registerPresence(scope: FastifyInstance, deps: PresenceDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  const TAGS = ["dead letters", "presence"];

  // Before each guarded action's handler (and after the Idempotency-Key's replay, which answers
  // a repeated request as the first was answered).
  app.addHook("preHandler", async (request: FastifyRequest, reply: FastifyReply) => {
    if (request.method !== "POST") return;
    const match = /^\/admin\/dlq\/:id\/([a-z-]+)$/.exec(request.routeOptions.url ?? "");
    if (!match || !GUARDED.has(match[1]!)) return;
    const id = (request.params as { id?: string }).id ?? "";
    if (!itemIdPattern.test(id)) return;
    const holder = await claimOrHolder(deps.db, id, request.actor, new Date());
    if (holder !== undefined) {
      request.log.info({ event: "dlq.held_by_other", deadLetter: id, holder }, "refused: someone else is answering this item");
      // Refused before it ran: the same request (its key) acts once the item is taken over.
      releaseIdempotencyKey(request);
      return reply.code(409).send(heldByOther(holder));
    }
  });

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
      const { id } = request.params;
      const now = new Date();
      const since = new Date(now.getTime() - PRESENCE_TTL_MS);
      const answering = request.body.answering === true;
      const rows = await deps.db.$transaction(async (tx) => {
        const [item] = await tx.$queryRaw<{ id: string }[]>`SELECT id FROM dead_letters WHERE id = ${id}::uuid`;
        if (!item) return undefined;
        // Those gone quiet leave, so the table holds only the pages open now.
        await tx.$executeRaw`DELETE FROM staff_presence WHERE dead_letter_id = ${id}::uuid AND seen_at <= ${since}::timestamptz`;
        // Answering is claimed by starting a reply only while nobody else answers (a page that
        // was taken over keeps saying it is answering: that must not take the item back), and
        // kept until the page leaves.
        const claim = answering ? now : null;
        await tx.$executeRaw`
          INSERT INTO staff_presence (dead_letter_id, actor, seen_at, answering_at)
          SELECT ${id}::uuid, ${request.actor}, ${now}::timestamptz,
                 CASE WHEN NOT EXISTS (
                   SELECT 1 FROM staff_presence o WHERE o.dead_letter_id = ${id}::uuid AND o.actor <> ${request.actor}
                     AND o.answering_at IS NOT NULL AND o.seen_at > ${since}::timestamptz) THEN ${claim}::timestamptz END
          ON CONFLICT (dead_letter_id, actor) DO UPDATE SET seen_at = EXCLUDED.seen_at,
            answering_at = COALESCE(staff_presence.answering_at, EXCLUDED.answering_at)`;
        return tx.$queryRaw<Viewer[]>`
          SELECT actor, seen_at AS "seenAt", answering_at IS NOT NULL AS answering FROM staff_presence
          WHERE dead_letter_id = ${id}::uuid AND actor <> ${request.actor}
          ORDER BY answering_at NULLS LAST, actor`;
      });
      if (!rows) return reply.code(404).send({ error: "dead letter not found" });
      return { viewers: rows.map((v) => ({ actor: v.actor, seenAt: v.seenAt.toISOString(), answering: v.answering })) };
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
      await deps.db.$executeRaw`DELETE FROM staff_presence WHERE dead_letter_id = ${request.params.id}::uuid AND actor = ${request.actor}`;
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
        response: {
          200: answer(z.object({ ok: z.literal(true), from: z.string().nullable().describe("who was answering it, if anyone") }), "it is yours"),
          404: wire.deadLetterNotFound,
        },
      }),
    },
    async (request, reply) => {
      const from = await takeOver(deps.db, request.params.id, request.actor, new Date());
      if (from === null) return reply.code(404).send({ error: "dead letter not found" });
      request.log.info({ event: "dlq.taken_over", deadLetter: request.params.id, from: from || undefined }, "item taken over");
      return { ok: true as const, from: from || null };
    },
  );
}

/**
 * The actor answers the item from now on: the others answering it stop (they are told when
 * they act, or by their page's next beat), and the item's history records it. Returns whom it
 * was taken from ("" when nobody), or null when there is no such item.
 */
async function takeOver(db: Db, itemId: string, actor: string, now: Date): Promise<string | null> {
  return db.$transaction(async (tx) => {
    const [item] = await tx.$queryRaw<{ id: string }[]>`SELECT id FROM dead_letters WHERE id = ${itemId}::uuid FOR UPDATE`;
    if (!item) return null;
    const since = new Date(now.getTime() - PRESENCE_TTL_MS);
    const previous = await tx.$queryRaw<{ actor: string }[]>`
      UPDATE staff_presence SET answering_at = NULL
      WHERE dead_letter_id = ${itemId}::uuid AND actor <> ${actor} AND answering_at IS NOT NULL AND seen_at > ${since}::timestamptz
      RETURNING actor`;
    await answerFromNow(tx, itemId, actor, now);
    const from = previous.map((p) => p.actor).join(", ");
    await recordTakeOver(tx, itemId, { actor, from }, now);
    return from;
  });
}
