import type {
  FastifyBaseLogger,
  FastifyInstance,
  FastifySchemaCompiler,
  FastifySerializerCompiler,
  FastifyTypeProvider,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from "fastify";
import { z } from "zod";
import { IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_REFUSAL, IDEMPOTENCY_KEY_REQUIRED } from "./idempotency.ts";

/**
 * The staff API's route schemas. Each is written once, in zod, and handed to Fastify as JSON
 * Schema 2020-12 (OpenAPI 3.1's dialect), so the routes describe themselves (openapi.ts). zod
 * still decides what a request may be, because it also trims and coerces, and each route keeps
 * the refusal it has always answered (a malformed id is "not found", not a schema error).
 */

export type JsonSchema = Record<string, unknown>;

declare const parsed: unique symbol;
/** A request part's JSON Schema; for the types alone, it also carries what zod makes of the part. */
export type RequestPart<T> = JsonSchema & { readonly [parsed]?: T };

/** What a request that does not fit is answered: a status and the route's own words. */
interface Refusal {
  status: 400 | 404;
  error: string | ((error: z.ZodError) => string);
}

const parsers = new WeakMap<object, { schema: z.ZodType; refusal: Refusal }>();

function toJsonSchema(schema: z.ZodType, io: "input" | "output"): JsonSchema {
  const { $schema: _dialect, ...json } = z.toJSONSchema(schema, {
    io,
    // The format says it; zod's long regexes would only make the document hard to read.
    override: ({ jsonSchema }) => {
      if (jsonSchema.format === "date-time" || jsonSchema.format === "uuid") delete jsonSchema.pattern;
    },
  });
  return json;
}

/** The JSON Schema of a request's params, querystring, body or headers, validated by `schema`. */
export function requestPart<S extends z.ZodType>(schema: S, refusal: Refusal): RequestPart<z.output<S>> {
  const json = toJsonSchema(schema, "input");
  parsers.set(json, { schema, refusal });
  return json;
}

/** One status's answer: its body's schema and what it means. */
export function answer(schema: z.ZodType, description: string): JsonSchema {
  return { ...toJsonSchema(schema, "output"), description };
}

/** Every refusal's body. */
export const errorBody = z.object({ error: z.string() });
export const problem = (description: string) => answer(errorBody, description);

/** The admin scope's validator compiler: the zod schema behind each requestPart decides, and answers the route's refusal. */
export const validateWithZod: FastifySchemaCompiler<unknown> = ({ schema, method, url, httpPart }) => {
  const parser = typeof schema === "object" && schema !== null ? parsers.get(schema) : undefined;
  if (!parser) throw new Error(`${method} ${url}: its ${httpPart} schema must come from requestPart()`);
  return (data: unknown) => {
    // No body at all is {} like an empty one (routes.ts's JSON parser): a bare "discard" is fine.
    const result = parser.schema.safeParse(httpPart === "body" ? (data ?? {}) : data);
    if (!result.success) {
      const { status, error } = parser.refusal;
      return { error: Object.assign(new Error(typeof error === "string" ? error : error(result.error)), { statusCode: status }) };
    }
    // Headers stay as Node parsed them; the other parts become what zod made of them (trimmed, coerced).
    return httpPart === "headers" ? true : { value: result.data };
  };
};

/**
 * Answers are written as they always were, with JSON.stringify, not by fast-json-stringify from
 * the response schemas: that would silently drop a field a schema forgot, or coerce a wrong type
 * into a wrong value. The schemas describe; test/openapi.test.ts holds real answers to them.
 */
export const serializeAsJson: FastifySerializerCompiler<unknown> = () => (data) => JSON.stringify(data);

/** Types each handler's request from its route's requestParts. */
export interface ZodParts extends FastifyTypeProvider {
  validator: this["schema"] extends RequestPart<infer T> ? T : unknown;
  serializer: unknown;
}

/** The admin scope as its routes see it (`scope.withTypeProvider<ZodParts>()`): each request part typed by its zod schema. */
export type StaffApp = FastifyInstance<RawServerDefault, RawRequestDefaultExpression, RawReplyDefaultExpression, FastifyBaseLogger, ZodParts>;

/** What an /admin API route's schema says, beyond the request parts Fastify validates. */
export interface RouteSpec {
  operationId: string;
  summary: string;
  description?: string;
  tags: string[];
  /** The 200 answer's media type, when it is not JSON (the event stream). */
  produces?: string;
  params?: JsonSchema;
  querystring?: JsonSchema;
  headers?: JsonSchema;
  body?: JsonSchema;
  response: Record<number, JsonSchema>;
}

const idempotencyKeyHeader = requestPart(
  z.looseObject({
    "idempotency-key": IDEMPOTENCY_KEY.optional().describe(
      "Makes a repeated request act once: its first answer is replayed for 24 hours with `Idempotent-Replayed: true`. A 5xx answer releases the key.",
    ),
  }),
  { status: 400, error: IDEMPOTENCY_KEY_REFUSAL },
);

const requiredIdempotencyKeyHeader = requestPart(
  z.looseObject({
    "idempotency-key": IDEMPOTENCY_KEY.describe(
      "Required: this sends to a customer. One key per intended send: a repeated request with it sends once, and its first answer is replayed for 24 hours with `Idempotent-Replayed: true`. A 5xx answer releases the key.",
    ),
  }),
  { status: 400, error: IDEMPOTENCY_KEY_REQUIRED },
);

/**
 * Adds the answers every route of its kind can give. A status the route already answers keeps
 * the route's schema (every refusal's body is an errorBody or more) and gains the description.
 */
function withAnswers<S extends RouteSpec>(spec: S, common: Record<number, string>): S {
  const response = { ...spec.response };
  for (const [status, description] of Object.entries(common).map(([s, d]) => [Number(s), d] as const)) {
    const own = response[status];
    response[status] = own ? { ...own, description: `${String(own.description)}; or ${description}` } : problem(description);
  }
  return { ...spec, response };
}

const INTERNAL = { 500: "something failed on our side (the body says only `internal error`; the log has the rest)" };

/** A route anyone may call (signing in). */
export const publicRoute = <S extends RouteSpec>(spec: S): S => withAnswers(spec, INTERNAL);

/**
 * A route for staff: the ADMIN_TOKEN bearer or a session (auth.ts); with a session, anything but
 * a GET also needs the CSRF token, and every POST takes an Idempotency-Key (idempotency.ts),
 * which a POST that sends to a customer requires (`sendingRoute`).
 */
export function staffRoute<S extends RouteSpec>(method: "GET" | "POST" | "DELETE", spec: S, options: { sendsToCustomer?: boolean } = {}): S {
  const common: Record<number, string> = { ...INTERNAL, 401: "no valid ADMIN_TOKEN bearer and no live session (with `WWW-Authenticate: Bearer`)" };
  if (method !== "GET") common[403] = "a session without its X-CSRF-Token";
  if (method !== "POST") return withAnswers(spec, common);
  Object.assign(common, {
    400: options.sendsToCustomer
      ? "malformed JSON, or no Idempotency-Key (this sends to a customer: the key is required), or one that is empty or too long"
      : "malformed JSON, or an Idempotency-Key that is empty or too long",
    409: "a request with the same Idempotency-Key is still running",
    413: "a body over 1 MiB",
    415: "a body that is not JSON",
    422: "the Idempotency-Key was used for a different request",
  });
  return { ...withAnswers(spec, common), headers: options.sendsToCustomer ? requiredIdempotencyKeyHeader : idempotencyKeyHeader };
}

/**
 * A staff POST that writes to a customer: as staffRoute, and refused (400) without an
 * Idempotency-Key. Sent twice with none, the same words would reach the customer twice.
 */
export const sendingRoute = <S extends RouteSpec>(spec: S): S => staffRoute("POST", spec, { sendsToCustomer: true });
