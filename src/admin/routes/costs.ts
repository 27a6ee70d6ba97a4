import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { PriceOverrides } from "../../ai/pricing.ts";
import type { Clock } from "../../clock.ts";
import { costsByDay, totalOf } from "../../costs/ledger.ts";
import type { MetaRates } from "../../costs/meta-rates.ts";
import type { Db } from "../../db/client.ts";
import { badRange, dayRangeQuery, resolveDayRange } from "../range.ts";
import { answer, staffRoute, type ZodParts } from "../schema.ts";

/**
 * `GET /admin/costs`: what replies cost, per business number and UTC day (issue 20): Claude's
 * tokens and USD, and the messages Meta priced, by category, with their amount by the rate card
 * (src/costs/ledger.ts).
 */

export interface CostRoutesDeps {
  db: Db;
  costs: { modelPrices: PriceOverrides; metaRates: MetaRates | undefined };
  clock: Clock;
}

const count = z.number().int().nonnegative();
const byCategory = z.record(z.string(), count).describe("by Meta's pricing category (service, utility, marketing, authentication, ...)");
const figures = {
  replies: count.describe("replies made that day: Claude's and configured answers"),
  parts: count.describe("WhatsApp messages Meta took that day"),
  messages: z.object({ billable: byCategory, free: byCategory }).describe("the messages Meta priced in a status webhook, each counted once"),
  tokens: z.object({ input: count, output: count, cacheRead: count, cacheWrite: count }).describe("Claude's tokens"),
  amounts: z.object({
    claudeUsd: z.number().describe("Claude's calls in USD (src/ai/models.ts's prices, or MODEL_PRICES_FILE's)"),
    meta: z.number().describe("Meta's billed messages, in META_RATES_FILE's currency (0 without a rate card)"),
    unpriced: z
      .object({ claudeCalls: count, metaMessages: count })
      .describe(
        "left out of the amounts: Claude calls whose model has no price or whose answer never came (they may be billed); billed messages the rate card does not price",
      ),
  }),
};

const costsAnswer = answer(
  z.object({
    from: z.iso.date(),
    to: z.iso.date(),
    rateCard: z.boolean().describe("META_RATES_FILE is set: Meta's messages are priced, not only counted"),
    days: z.array(z.object({ phoneNumberId: z.string(), day: z.iso.date(), ...figures })).describe("a row per number and day with any activity, by day"),
    total: z.object(figures),
  }),
  "the costs per number and day, and their total",
);

export function registerCostRoutes(app: FastifyInstance, deps: CostRoutesDeps): void {
  app.withTypeProvider<ZodParts>().get(
    "/admin/costs",
    {
      schema: staffRoute("GET", {
        operationId: "listCosts",
        summary: "What replies cost, per business number and UTC day: Claude's tokens and USD, Meta's messages by category and amount",
        tags: ["costs"],
        querystring: dayRangeQuery,
        response: { 200: costsAnswer, 400: badRange },
      }),
    },
    async (request, reply) => {
      const range = resolveDayRange(request.query, deps.clock);
      if ("error" in range) return reply.code(400).send(range);
      const { from, to } = range;
      const days = await costsByDay(deps.db, { from, to, phoneNumberId: request.query.phoneNumberId }, deps.costs.modelPrices);
      return { from, to, rateCard: deps.costs.metaRates !== undefined, days, total: totalOf(days) };
    },
  );
}
