import type { FastifyInstance } from "fastify";
import type { MetaRates } from "../../costs/meta-rates.ts";
import { type StaffSendDeps, sendTemplate } from "../../dlq/staff.ts";
import { PermanentError, RetryableError } from "../../errors.ts";
import { fillTemplate, type TemplateCatalog } from "../../whatsapp/templates.ts";
import { refuse } from "../refusals.ts";
import { problem, sendingRoute, staffRoute, type ZodParts } from "../schema.ts";
import * as wire from "../wire.ts";

/**
 * Approved templates for staff (issue 21): `GET /admin/templates` lists the business account's
 * (WHATSAPP_BUSINESS_ACCOUNT_ID), and `POST /admin/dlq/:id/template` sends one of them once on
 * an item: a failed reply is resolved by it, through the same resend as retry (its
 * Idempotency-Key, its 409s), and a customer waiting for a person gets it as the person's
 * message (past the window, the only one that reaches them); both by the part machinery of law 5.
 */

export interface TemplateRoutesDeps extends StaffSendDeps {
  templates: TemplateCatalog | undefined;
  metaRates: MetaRates | undefined;
}

const NOT_CONFIGURED = "no business account is configured: set WHATSAPP_BUSINESS_ACCOUNT_ID to send approved templates";

/** Why Meta's list could not be read, in the words of the failure (never the token). */
const unreadable = (error: unknown) =>
  `Meta's list of templates could not be read: ${error instanceof PermanentError || error instanceof RetryableError ? error.reason : "unexpected error"}`;

/** What Meta charges for one template of this category by the rate card's `*` market: a guide, not the bill. */
const priceOf = (rates: MetaRates | undefined, category: string): number | null => rates?.get(category.toLowerCase())?.get("*") ?? null;

export function registerTemplateRoutes(scope: FastifyInstance, deps: TemplateRoutesDeps): void {
  const app = scope.withTypeProvider<ZodParts>();
  const TEMPLATES = ["templates"];
  const rates = deps.metaRates;

  app.get(
    "/admin/templates",
    {
      schema: staffRoute("GET", {
        operationId: "listTemplates",
        summary: "The business account's approved templates, cached for minutes (`refresh=1` reads Meta again)",
        tags: TEMPLATES,
        querystring: wire.templatesQuery,
        response: { 200: wire.templateList, 400: problem("a parameter other than refresh"), 502: wire.templatesUnavailable },
      }),
    },
    async (request, reply) => {
      if (!deps.templates) return { configured: false, fetchedAt: null, templates: [] };
      try {
        const { templates, fetchedAt } = await deps.templates.list({ refresh: request.query.refresh !== undefined });
        return { configured: true, fetchedAt: fetchedAt.toISOString(), templates: templates.map((t) => ({ ...t, price: priceOf(rates, t.category) })) };
      } catch (error) {
        request.log.warn({ event: "templates.unreadable", err: error }, "could not read the approved templates");
        return reply.code(502).send({ error: unreadable(error) });
      }
    },
  );

  app.post(
    "/admin/dlq/:id/template",
    {
      schema: sendingRoute({
        operationId: "sendTemplateForDeadLetter",
        summary:
          "Send an approved template (its body's parameters filled) once, even when pressed twice: it resolves a failed reply, or answers a customer waiting for a person",
        tags: ["dead letters", ...TEMPLATES],
        params: wire.deadLetterId,
        body: wire.templateBody,
        response: {
          202: wire.templateSent,
          400: problem(
            "a body other than { name, language, parameters?, confirmMaybeSent? }, no such approved template, the wrong number of parameters, or no business account configured",
          ),
          404: wire.deadLetterNotFound,
          409: wire.templateRefused,
          502: wire.templatesUnavailable,
          503: wire.queueUnavailable,
        },
      }),
    },
    async (request, reply) => {
      if (!deps.templates) return reply.code(400).send({ error: NOT_CONFIGURED });
      const { name, language, parameters, confirmMaybeSent } = request.body;
      let template: Awaited<ReturnType<TemplateCatalog["find"]>>;
      try {
        template = await deps.templates.find(name, language);
      } catch (error) {
        request.log.warn({ event: "templates.unreadable", err: error }, "could not read the approved templates");
        return reply.code(502).send({ error: unreadable(error) });
      }
      if (!template) return reply.code(400).send({ error: `no approved template "${name}" in language ${language}: pick one from GET /admin/templates` });
      if (parameters.length !== template.parameterCount) {
        return reply.code(400).send({
          error: `template "${name}" takes ${template.parameterCount} parameter${template.parameterCount === 1 ? "" : "s"}; ${parameters.length} given`,
        });
      }
      const chosen = { name, language, parameters, text: fillTemplate(template.body, parameters) || `[Template "${name}" (${language})]` };
      const result = await sendTemplate(deps, request.params.id, { template: chosen, confirmMaybeSent, actor: request.actor }, deps.clock.now(), request.log);
      if (!result.ok) return refuse(request, reply, result);
      request.log.info(
        { event: "dlq.template_sent", deadLetter: request.params.id, template: name, language, state: result.state },
        "template sent on an item",
      );
      return reply.code(202).send({ ok: true, state: result.state });
    },
  );
}
