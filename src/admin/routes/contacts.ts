import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { PriceOverrides } from "../../ai/pricing.ts";
import type { Clock } from "../../clock.ts";
import { exportContact } from "../../customer-data/export.ts";
import { findContacts } from "../../customer-data/find.ts";
import type { Db } from "../../db/client.ts";
import { recordDataRequest } from "../../state/data-requests.ts";
import { answer, problem, requestPart, staffRoute, type ZodParts } from "../schema.ts";
import { badPart } from "../wire.ts";

/**
 * A customer's data (issue 35): found by staff, exported whole by operators (GDPR article 15),
 * each export audited.
 */

export interface ContactRoutesDeps {
  db: Db;
  clock: Clock;
  modelPrices: PriceOverrides;
}

const CONTACTS = ["customer data"];

const contactsQuery = requestPart(
  z.strictObject({ q: z.string().trim().min(1).max(140).describe("any part of the customer's name, phone, @username or BSUID") }),
  { status: 400, error: badPart("parameter") },
);
const contactToRead = requestPart(z.object({ id: z.uuid() }), { status: 404, error: "contact not found" });

const contactsAnswer = answer(
  z.object({
    contacts: z.array(
      z.object({
        id: z.string(),
        label: z.string().describe("the phone, else the @username or BSUID, as the page shows the customer"),
        name: z.string().nullable(),
        phone: z.string().nullable(),
        bsuid: z.string().nullable(),
        username: z.string().nullable(),
        conversations: z.number().int(),
        lastMessageAt: z.iso.datetime().nullable(),
      }),
    ),
  }),
  "the contacts found, most recently active first (50 at most)",
);

export function registerContactRoutes(scope: FastifyInstance, deps: ContactRoutesDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  app.get(
    "/admin/contacts",
    {
      schema: staffRoute("GET", {
        operationId: "findContacts",
        summary: "The customers whose name, phone, @username or BSUID holds `q`",
        tags: CONTACTS,
        querystring: contactsQuery,
        response: { 200: contactsAnswer, 400: problem("no `q`, or a bad one") },
      }),
    },
    async (request) => ({ contacts: await findContacts(deps.db, request.query.q) }),
  );

  app.get(
    "/admin/contacts/:id/export",
    {
      schema: staffRoute("GET", {
        operationId: "exportContact",
        summary: "Everything held about one customer, as one JSON file (operators); audited",
        tags: CONTACTS,
        params: contactToRead,
        response: {
          200: answer(z.looseObject({}), "the contact and each conversation whole (Content-Disposition: attachment)"),
          403: problem("staff without the operator role"),
          404: problem("no such contact (or it was erased)"),
        },
      }),
    },
    async (request, reply) => {
      if (!request.operator) return reply.code(403).send({ error: "exporting a customer's data is for operators" });
      const exported = await exportContact(deps.db, request.params.id, deps.modelPrices);
      if (!exported) return reply.code(404).send({ error: "contact not found" });
      const now = deps.clock.now();
      await recordDataRequest(deps.db, { kind: "export", actor: request.actor, contactId: request.params.id }, now);
      return reply
        .header("content-disposition", `attachment; filename="customer-${request.params.id}.json"`)
        .send({ exportedAt: now, exportedBy: request.actor, ...exported });
    },
  );
}
