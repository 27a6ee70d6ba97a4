import type { FastifyInstance, RouteOptions } from "fastify";
import { z } from "zod";
import { CSRF_HEADER, isPublicRoute, SESSION_COOKIE } from "./auth.ts";
import { PUBLIC_ROUTES } from "./page.ts";
import { answer, type JsonSchema, type RouteSpec, staffRoute, type ZodParts } from "./schema.ts";

/**
 * The staff API described as OpenAPI 3.1, from the routes' own schemas (schema.ts): an onRoute
 * hook collects every /admin route as it is registered, so the document cannot list a route
 * that does not exist or miss one that does.
 *
 * Pages are not API and are left out: the staff page (`GET /admin`, its assets) and bull-board
 * under /admin/queues, whose routes are its own UI's, not a contract of ours.
 *
 * The document needs the same sign-in as the rest of /admin. It holds no data, but nothing
 * needs it before signing in (a tool generating a client sends the bearer), and the staff
 * routes are private: there is no reason to hand their map to anyone who asks.
 */

const OPENAPI_PATH = "/admin/openapi.json";

/** A page, or bull-board's own: not described. */
const isPage = (method: string, url: string) => PUBLIC_ROUTES.has(`${method} ${url}`) || url === "/admin/queues" || url.startsWith("/admin/queues/");

interface Described {
  method: string;
  url: string;
  schema: RouteSpec;
}

export function describeStaffApi(scope: FastifyInstance): void {
  const routes: Described[] = [];
  scope.addHook("onRoute", (route: RouteOptions) => {
    // HEAD is a GET without its body: Fastify adds one for every GET.
    for (const method of [route.method].flat().filter((m) => m !== "HEAD")) {
      if (!route.url.startsWith("/admin") || isPage(method, route.url)) continue;
      if (!route.schema?.response) throw new Error(`${method} ${route.url}: a staff API route needs a schema with its answers (schema.ts)`);
      // Made by staffRoute or publicRoute (schema.ts): Fastify types a schema as unknown parts.
      routes.push({ method, url: route.url, schema: route.schema as RouteSpec });
    }
  });

  let document: JsonSchema | undefined;
  scope.withTypeProvider<ZodParts>().get(
    OPENAPI_PATH,
    {
      schema: staffRoute("GET", {
        operationId: "openApiDocument",
        summary: "This document",
        tags: ["document"],
        response: { 200: answer(z.looseObject({ openapi: z.string(), paths: z.record(z.string(), z.unknown()) }), "the staff API as OpenAPI 3.1") },
      }),
    },
    // Every route is registered before the first request is served.
    async () => (document ??= openApiDocument(routes)),
  );
}

function openApiDocument(routes: Described[]): JsonSchema {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const path = route.url.replace(/:(\w+)/g, "{$1}");
    paths[path] = { ...paths[path], [route.method.toLowerCase()]: operation(route) };
  }
  return {
    openapi: "3.1.1",
    // Plain JSON Schema 2020-12: the schemas use none of OpenAPI's own keywords.
    jsonSchemaDialect: "https://json-schema.org/draft/2020-12/schema",
    info: {
      title: "WhatsApp AI reply: staff API",
      version: "1",
      description:
        "The dead-letter queue and human handoff, for staff. Pages are not described here: the staff page (`/admin`) and BullMQ's queues (`/admin/queues`, for operators).",
    },
    paths,
    components: {
      securitySchemes: {
        bearer: { type: "http", scheme: "bearer", description: "`ADMIN_TOKEN`, for automation: its actions are attributed to `api`." },
        session: {
          type: "apiKey",
          in: "cookie",
          name: SESSION_COOKIE,
          description: "A person's session, set by `POST /admin/session` (httpOnly, SameSite=Strict); actions are attributed to their email.",
        },
        csrf: {
          type: "apiKey",
          in: "header",
          name: CSRF_HEADER,
          description: "With a session, every request but a GET carries the session's CSRF token (from `POST` or `GET /admin/session`).",
        },
      },
    },
  };
}

function operation({ method, url, schema }: Described) {
  const { operationId, summary, description, tags } = schema;
  const body = schema.body;
  return {
    operationId,
    summary,
    ...(description ? { description } : {}),
    tags,
    // Either way in: the bearer, or the session cookie (and, for a change, its CSRF token).
    security: isPublicRoute(method, url) ? [] : [{ bearer: [] }, method === "GET" ? { session: [] } : { session: [], csrf: [] }],
    parameters: [...parameters(schema.params, "path"), ...parameters(schema.querystring, "query"), ...parameters(schema.headers, "header")],
    ...(body ? { requestBody: { required: Array.isArray(body.required) && body.required.length > 0, content: { "application/json": { schema: body } } } } : {}),
    responses: Object.fromEntries(
      Object.entries(schema.response).map(([status, { description: meaning, ...answerSchema }]) => [
        status,
        { description: meaning, content: { [status === "200" && schema.produces ? schema.produces : "application/json"]: { schema: answerSchema } } },
      ]),
    ),
  };
}

/** An object schema's properties as OpenAPI parameters. */
function parameters(schema: JsonSchema | undefined, where: "path" | "query" | "header") {
  if (!schema) return [];
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required ?? []) as string[]);
  return Object.entries(properties).map(([name, { description, ...property }]) => ({
    name,
    in: where,
    required: where === "path" || required.has(name),
    ...(description ? { description } : {}),
    schema: property,
  }));
}
