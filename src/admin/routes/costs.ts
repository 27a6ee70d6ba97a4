import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { PriceOverrides } from "../../ai/pricing.ts";
import type { Clock } from "../../clock.ts";
import { costsByDay, totalOf, utcDay } from "../../costs/ledger.ts";
import type { MetaRates } from "../../costs/meta-rates.ts";
import type { Db } from "../../db/client.ts";
import { answer, problem, requestPart, staffRoute, type ZodParts } from "../schema.ts";

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

/** Seven days ending today, by default; at most a year at once. */
const DEFAULT_DAYS = 7;
const MAX_DAYS = 366;
const DAY_MS = 86_400_000;

const day = (name: string) => z.iso.date({ error: `${name} must be a day as YYYY-MM-DD (UTC)` });

const costsQuery = requestPart(
  z.strictObject(
    {
      from: day("from")
        .optional()
        .describe(`the first UTC day, YYYY-MM-DD; default ${DEFAULT_DAYS - 1} days before \`to\``),
      to: day("to").optional().describe("the last UTC day, YYYY-MM-DD, included; default today"),
      phoneNumberId: z.string().regex(/^\d+$/, { error: "phoneNumberId must be a phone_number_id (digits)" }).optional(),
    },
    { error: (issue) => (issue.code === "unrecognized_keys" ? `unknown parameter: ${issue.keys.join(", ")}; use from, to, phoneNumberId` : undefined) },
  ),
  { status: 400, error: (error) => `bad range: ${error.issues.map((issue) => issue.message).join("; ")}` },
);

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
        querystring: costsQuery,
        response: { 200: costsAnswer, 400: problem("a bad range: a day that is not YYYY-MM-DD, `from` after `to`, or over a year (the body says which)") },
      }),
    },
    async (request, reply) => {
      const to = request.query.to ?? utcDay(deps.clock.now());
      const from = request.query.from ?? utcDay(new Date(Date.parse(to) - (DEFAULT_DAYS - 1) * DAY_MS));
      if (from > to) return reply.code(400).send({ error: `bad range: from (${from}) is after to (${to})` });
      if ((Date.parse(to) - Date.parse(from)) / DAY_MS + 1 > MAX_DAYS) return reply.code(400).send({ error: `bad range: at most ${MAX_DAYS} days at once` });
      const days = await costsByDay(deps.db, { from, to, phoneNumberId: request.query.phoneNumberId }, deps.costs.modelPrices);
      return { from, to, rateCard: deps.costs.metaRates !== undefined, days, total: totalOf(days) };
    },
  );
}
