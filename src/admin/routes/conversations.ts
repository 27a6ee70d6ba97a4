import type { FastifyInstance } from "fastify";
import type { PriceOverrides } from "../../ai/pricing.ts";
import type { Clock } from "../../clock.ts";
import { getConversation } from "../../conversations/detail.ts";
import { listConversations } from "../../conversations/list.ts";
import type { Db } from "../../db/client.ts";
import { explain } from "../../dlq/explain.ts";
import { problem, staffRoute, type ZodParts } from "../schema.ts";
import * as wire from "../wire.ts";

/**
 * Every conversation, for the business that reads them (issue 33): the list, found and
 * narrowed, and one whole. Pausing and resuming the bot are routes/handoff.ts's.
 */

export interface ConversationRoutesDeps {
  db: Db;
  clock: Clock;
  /** KNOWLEDGE_LANGUAGE: the text-search configuration words are found with. */
  searchLanguage: string;
  modelPrices: PriceOverrides;
}

const CONVERSATIONS = ["conversations"];

export function registerConversationRoutes(scope: FastifyInstance, deps: ConversationRoutesDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  app.get(
    "/admin/conversations",
    {
      schema: staffRoute("GET", {
        operationId: "listConversations",
        summary: "Every conversation, newest activity first, keyset-paged: found by the customer or by words either side wrote, and narrowed",
        tags: CONVERSATIONS,
        querystring: wire.conversationListQuery,
        response: { 200: wire.conversationList, 400: problem("a bad parameter (the body names it)") },
      }),
    },
    async (request) => {
      const { handedOff, deadLettered, ...rest } = request.query;
      const filter = { ...rest, handedOff: handedOff === "true" || undefined, deadLettered: deadLettered === "true" || undefined };
      return listConversations(deps.db, filter, deps.clock.now(), deps.searchLanguage);
    },
  );

  app.get(
    "/admin/conversations/:id",
    {
      schema: staffRoute("GET", {
        operationId: "getConversation",
        summary: "One conversation whole: both sides, why the bot said each thing, its items and what it cost; a long one in pages, newest first",
        tags: CONVERSATIONS,
        params: wire.conversationToRead,
        querystring: wire.conversationQuery,
        response: { 200: wire.conversationDetail, 400: problem("a malformed id or a bad parameter (the body names it)"), 404: wire.conversationNotFound },
      }),
    },
    async (request, reply) => {
      const conversation = await getConversation(deps.db, request.params.id, deps.clock.now(), request.query, deps.modelPrices);
      if (!conversation) return reply.code(404).send({ error: "conversation not found" });
      // Each item named as the queue names it (src/dlq/explain.ts, the one place those words live).
      const items = conversation.items.map((item) => {
        const { kind, title } = explain(item);
        return { ...item, kind, title };
      });
      return { ...conversation, items };
    },
  );
}
