import type { FastifyInstance } from "fastify";
import { z } from "zod";
import type { PriceOverrides } from "../../ai/pricing.ts";
import type { Clock } from "../../clock.ts";
import { eraseCustomer } from "../../customer-data/erase.ts";
import { exportContact } from "../../customer-data/export.ts";
import { findContacts } from "../../customer-data/find.ts";
import type { Db } from "../../db/client.ts";
import type { Queues } from "../../queue/queues.ts";
import type { StoredAnswers } from "../../queue/stored-answers.ts";
import { contactLabel } from "../../state/contacts.ts";
import { recordDataRequest } from "../../state/data-requests.ts";
import { answer, problem, requestPart, staffRoute, type ZodParts } from "../schema.ts";
import { badPart } from "../wire.ts";

/**
 * A customer's data (issue 35): found by staff, exported whole (GDPR article 15) and erased
 * (article 17) by operators, each export and erase audited.
 */

export interface ContactRoutesDeps {
  db: Db;
  queues: Queues;
  clock: Clock;
  modelPrices: PriceOverrides;
  /** The key of an erased identity's hash in the audit (WHATSAPP_APP_SECRET). */
  identityKey: string;
  /** The answers kept for Idempotency-Keys: an erase forgets those that quote the customer. */
  storedAnswers: StoredAnswers;
}

const CONTACTS = ["customer data"];

const contactsQuery = requestPart(
  z.strictObject({ q: z.string().trim().min(1).max(140).describe("any part of the customer's name, phone, @username or BSUID") }),
  { status: 400, error: badPart("parameter") },
);
const contactToRead = requestPart(z.object({ id: z.uuid() }), { status: 404, error: "contact not found" });
const eraseBody = requestPart(z.strictObject({ confirm: z.string().describe("the contact's label (its phone, else its @username or BSUID), as a yes") }), {
  status: 400,
  error: badPart("body"),
});

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

const erasedAnswer = answer(
  z.object({
    erased: z.record(z.string(), z.number().int()).describe("rows emptied, by kind"),
    jobs: z.number().int().describe("queued jobs removed"),
    redis: z
      .enum(["clean", "pending"])
      .describe("pending: Redis was away, or a job of the customer's was running: the workers' reconciler removes what is left once it can"),
  }),
  "erased",
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

  app.post(
    "/admin/contacts/:id/erase",
    {
      schema: staffRoute("POST", {
        operationId: "eraseContact",
        summary: "Erase everything held about one customer (operators): words and identifiers gone, counts and costs kept; audited",
        tags: CONTACTS,
        params: contactToRead,
        body: eraseBody,
        response: {
          200: erasedAnswer,
          400: problem("no `confirm`, or not the contact's label (the answer says it)"),
          403: problem("staff without the operator role"),
          404: problem("no such contact, or it was erased already"),
        },
      }),
    },
    async (request, reply) => {
      if (!request.operator) return reply.code(403).send({ error: "erasing a customer's data is for operators" });
      const contact = await deps.db.contact.findFirst({ where: { id: request.params.id, erasedAt: null } });
      if (!contact) return reply.code(404).send({ error: "contact not found" });
      const label = contactLabel(contact);
      // Not quoted back: an answer kept for its Idempotency-Key would hold the number.
      if (request.body.confirm !== label)
        return reply.code(400).send({ error: "bad body: confirm (write the contact's label, as the page shows it, to erase it)" });
      const erased = await eraseCustomer({ ...deps, logger: request.log }, contact.id, request.actor);
      // Erased meanwhile by another request: as if asked a second time.
      return erased ?? reply.code(404).send({ error: "contact not found" });
    },
  );
}
