import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { z } from "zod";
import type { Clock } from "../../clock.ts";
import type { Db } from "../../db/client.ts";
import { REASON_KINDS } from "../../dlq/explain.ts";
import { insightsOf } from "../../insights/insights.ts";
import { type KnowledgeLimits, listKnowledge } from "../../knowledge/walk.ts";
import { badRange, dayRangeQuery, resolveDayRange } from "../range.ts";
import { answer, staffRoute, type ZodParts } from "../schema.ts";
import type { CostRoutesDeps } from "./costs.ts";

/**
 * `GET /admin/insights`: whether the bot helps, per UTC day and in total (issue 33), counted
 * over what is stored (src/insights/): conversations it resolved, handoffs, failures, how long
 * customers waited, what was delivered and read, what it cost; and for the range, why customers
 * were handed over or replies failed, which knowledge was cited, how the tools answered.
 */

export interface InsightRoutesDeps {
  db: Db;
  costs: CostRoutesDeps["costs"];
  /** Each number's knowledgeDir (PHONE_NUMBERS_FILE), absolute, and the caps a reading stays within. */
  knowledge: { dirs: ReadonlyMap<string, string>; limits: KnowledgeLimits };
  clock: Clock;
}

const count = z.number().int().nonnegative();
const figures = {
  conversations: count.describe("conversations with at least one customer message that day"),
  inbound: count.describe(
    "customer messages received (not reactions, deletions, system notices, edits folded into their message; echoes and statuses are not messages)",
  ),
  answeredByBot: count.describe("customer messages answered by a reply the bot wrote (Claude's or a configured answer) that Meta accepted"),
  handedOff: count.describe(
    "conversations handed to a person: their handoff word, Claude's handoff_to_human or refusal, or a message to a bot paused for a person",
  ),
  deadLettered: count.describe("conversations with an item opened for staff that day other than a handoff (a failed reply, a business action left unknown)"),
  resolvedByBot: count.describe(
    "conversations with customer messages that day and no handoff, no other item and no person's message (staff page or Business app) that day",
  ),
  automationRate: z.number().nullable().describe("resolvedByBot ÷ conversations; null without conversations"),
  firstReplyMs: z
    .object({ p50: z.number().nullable(), p95: z.number().nullable() })
    .describe(
      "over the replies whose first part Meta accepted that day: from the first message each answers reaching us to then, in ms (nearest rank); null without replies",
    ),
  delivered: count.describe("of the messages Meta accepted that day, those it reported delivered (or read)"),
  read: count.describe("of those, the ones it reported read"),
  csat: z
    .object({ asked: count, answered: count, good: count, okay: count, bad: count })
    .describe("customers asked how it went (CSAT_AFTER_SECONDS) that day, those who answered, and their latest ratings"),
  claudeUsd: z.number().describe("Claude's calls in USD, as GET /admin/costs counts them"),
  meta: z.number().describe("Meta's billed messages in META_RATES_FILE's currency (0 without a rate card), as GET /admin/costs counts them"),
};

const insightsAnswer = answer(
  z.object({
    from: z.iso.date(),
    to: z.iso.date(),
    rateCard: z.boolean().describe("META_RATES_FILE is set: `meta` is priced, not 0"),
    days: z.array(z.object({ day: z.iso.date(), ...figures })).describe("every day of the range, in order, days with nothing at 0"),
    total: z.object(figures).describe("the whole range: each conversation counted once"),
    handoffReasons: z
      .array(z.object({ reason: z.string(), count }))
      .describe('why customers were handed to a person: "keyword", "refusal" (Claude declined), "paused" (wrote to a paused bot), or Claude\'s own reason'),
    deadLetterReasons: z
      .array(z.object({ kind: z.enum(Object.keys(REASON_KINDS) as [keyof typeof REASON_KINDS]), label: z.string(), count }))
      .describe("the other items opened, by kind as GET /admin/dlq/summary names them"),
    knowledge: z
      .array(z.object({ phoneNumberId: z.string(), source: z.string(), citations: count }))
      .describe("each file of the numbers' knowledgeDirs (uncited ones at 0), and how often replies made in the range cite it"),
    tools: z.array(z.object({ name: z.string(), calls: count, failed: count, unknown: count })).describe("the business tools Claude called, by outcome"),
  }),
  "whether the bot helps, per day and in total, and what lies behind it",
);

export function registerInsightRoutes(app: FastifyInstance, deps: InsightRoutesDeps): void {
  app.withTypeProvider<ZodParts>().get(
    "/admin/insights",
    {
      schema: staffRoute("GET", {
        operationId: "getInsights",
        summary: "Whether the bot helps, per UTC day and in total: automation rate, first-reply time, handoffs, failures, delivery, CSAT, cost",
        tags: ["insights"],
        querystring: dayRangeQuery,
        response: { 200: insightsAnswer, 400: badRange },
      }),
    },
    async (request, reply) => {
      const range = resolveDayRange(request.query, deps.clock);
      if ("error" in range) return reply.code(400).send(range);
      const insights = await insightsOf(
        deps.db,
        { ...range, phoneNumberId: request.query.phoneNumberId },
        { modelPrices: deps.costs.modelPrices, knowledgeFiles: () => knowledgeFiles(deps.knowledge, request.log) },
      );
      return { ...range, rateCard: deps.costs.metaRates !== undefined, ...insights };
    },
  );
}

/** The knowledge files each number has now; a folder that cannot be listed is logged and shows only its cited files. */
async function knowledgeFiles(knowledge: InsightRoutesDeps["knowledge"], log: FastifyBaseLogger): Promise<Map<string, readonly string[]>> {
  const listed = await Promise.all(
    [...knowledge.dirs].map(async ([phoneNumberId, dir]): Promise<[string, readonly string[]]> => {
      try {
        const listing = await listKnowledge(dir, knowledge.limits);
        return [phoneNumberId, listing.files.map((file) => file.path)];
      } catch (error) {
        log.warn({ event: "insights.knowledge_unlisted", phoneNumberId, err: error }, "a knowledgeDir could not be listed: only its cited files are shown");
        return [phoneNumberId, []];
      }
    }),
  );
  return new Map(listed);
}
