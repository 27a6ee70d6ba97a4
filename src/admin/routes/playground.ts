import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { PermanentError } from "../../errors.ts";
import { toolStub } from "../../eval/file.ts";
import type { Playground } from "../../eval/playground.ts";
import { answer, problem, requestPart, staffRoute, type ZodParts } from "../schema.ts";
import { badPart, citation } from "../wire.ts";

/**
 * `POST /admin/playground` (issue 34.2): what the bot would answer a customer's words, for
 * operators and the ADMIN_TOKEN (it spends money); staff are refused. Nothing is sent or stored
 * (src/eval/playground.ts).
 */

const playRequest = requestPart(
  z.strictObject({
    phoneNumberId: z.string().regex(/^\d+$/, { error: "digits" }).describe("the business number whose prompt, knowledge and tools answer"),
    turns: z.array(z.string().trim().min(1).max(4096)).min(1).max(20).describe("the customer's messages, in order; each answer joins the history"),
    tools: z
      .record(z.string(), z.array(toolStub))
      .optional()
      .describe("what each tool answers here, as in an eval file; a read (GET) no stub answers runs for real"),
  }),
  { status: 400, error: badPart("body") },
);

const played = answer(
  z.object({
    answers: z.array(z.string()).describe("what the customer would read, one per turn answered (a handoff ends them: HANDOFF_REPLY)"),
    citations: z.array(citation.extend({ turn: z.number().int() })).describe("the knowledge each answer cited, with its turn (from 0)"),
    toolCalls: z
      .array(
        z.object({
          turn: z.number().int(),
          name: z.string(),
          input: z.unknown(),
          answer: z.string().describe("what Claude read back"),
          isError: z.boolean(),
          how: z.enum(["executed", "stubbed", "not_run"]).describe("executed: a read sent to the business; stubbed: answered by `tools`; not_run: neither"),
        }),
      )
      .describe("every business tool Claude asked for"),
    handoff: z.string().nullable().describe("why the customer would be handed to a person, or null"),
    usage: z.object({ calls: z.number().int(), input: z.number().int(), output: z.number().int(), cacheRead: z.number().int(), cacheWrite: z.number().int() }),
    costUsd: z.number().nullable().describe("the Claude calls' cost; null when the model has no price"),
  }),
  "the answers, and why the bot would say each",
);

const numbers = answer(
  z.object({
    numbers: z
      .array(z.object({ phoneNumberId: z.string(), tools: z.array(z.string()), knowledge: z.boolean() }))
      .describe("the numbers of PHONE_NUMBERS_FILE, each with its tools' names and whether it has a knowledgeDir"),
  }),
  "the numbers that can be tried",
);

export function registerPlaygroundRoutes(scope: FastifyInstance, playground: Playground): void {
  scope.withTypeProvider<ZodParts>().get(
    "/admin/playground",
    {
      schema: staffRoute("GET", {
        operationId: "playgroundNumbers",
        summary: "The business numbers the bot can be tried as (operators)",
        tags: ["playground"],
        response: { 200: numbers, 403: problem("staff without the operator role") },
      }),
    },
    async (request, reply) => {
      if (!request.operator) return reply.code(403).send({ error: "the playground is for operators: every try is paid for" });
      return { numbers: playground.numbers() };
    },
  );

  scope.withTypeProvider<ZodParts>().post(
    "/admin/playground",
    {
      schema: staffRoute("POST", {
        operationId: "tryTheBot",
        summary: "What the bot would answer a customer's words, with why and what it cost; nothing is sent or stored (operators: it spends money)",
        tags: ["playground"],
        body: playRequest,
        response: {
          200: played,
          400: problem("a bad body (the answer names what), or a number PHONE_NUMBERS_FILE lacks"),
          403: problem("staff without the operator role"),
          409: problem("the number's daily budget is spent: a try is a paid call like a customer's answer"),
        },
      }),
    },
    async (request, reply) => {
      if (!request.operator) return reply.code(403).send({ error: "the playground is for operators: every try is paid for" });
      if (!playground.knows(request.body.phoneNumberId))
        return reply.code(400).send({ error: `bad body: phoneNumberId (${request.body.phoneNumberId} is not an entry of PHONE_NUMBERS_FILE)` });
      try {
        return await playground.play(request.body);
      } catch (error) {
        if (error instanceof PermanentError && error.code === "daily_budget") return reply.code(409).send({ error: error.reason });
        throw error;
      }
    },
  );
}
