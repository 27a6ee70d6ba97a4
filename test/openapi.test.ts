import { randomUUID } from "node:crypto";
import { Validator } from "@seriousme/openapi-schema-validator";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import type { LightMyRequestResponse } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { graphError } from "./support/fake-graph.ts";
import { anotherWeb, eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 11: the staff API describes itself as OpenAPI 3.1 at GET /admin/openapi.json, and its answers are what it says. */

type Schema = Record<string, unknown>;
interface Operation {
  security: Record<string, string[]>[];
  parameters: { name: string; in: string; schema: Schema }[];
  requestBody?: { content: { "application/json": { schema: Schema } } };
  /** JSON, but for the live queue's event stream (text/event-stream). */
  responses: Record<string, { content: Record<string, { schema: Schema }> }>;
}
interface Document {
  openapi: string;
  jsonSchemaDialect: string;
  paths: Record<string, Record<string, Operation>>;
}

let h: Harness;
let doc: Document;
beforeAll(async () => {
  h = await startHarness();
  const res = await h.app.inject({ method: "GET", url: "/admin/openapi.json", headers: bearer });
  expect(res.statusCode).toBe(200);
  doc = res.json<Document>();
});
afterAll(async () => h?.close());

const bearer = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };

// ajv-formats is CommonJS: under NodeNext its default import is the module, whose `default` is the plugin.
const ajv = addFormats.default(new Ajv2020({ strict: true, allErrors: true }));

/** The document's schema for this answer of `METHOD /path/{param}`. */
function documentedSchema(method: string, path: string, status: number): Schema {
  const answer = doc.paths[path]?.[method.toLowerCase()]?.responses[String(status)];
  if (!answer) throw new Error(`${method} ${path} does not document a ${status}`);
  const media = answer.content["application/json"];
  if (!media) throw new Error(`${method} ${path} ${status} is not JSON`);
  return media.schema;
}

/** The answer is JSON and fits what the document says of its status. */
function expectDocumented(method: string, path: string, res: LightMyRequestResponse): void {
  expect(res.headers["content-type"]).toMatch(/^application\/json/);
  const validate = ajv.compile(documentedSchema(method, path, res.statusCode));
  const body: unknown = res.json();
  expect(validate(body) ? [] : validate.errors, `${method} ${path} ${res.statusCode}: ${res.body}`).toEqual([]);
}

/** A real dead letter: Meta refuses the reply with 131047. */
async function deadLetter(): Promise<string> {
  h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
  const from = `1555${Math.floor(Math.random() * 1e7)}`;
  await h.deliver(textWebhook({ text: "hello", from }).body);
  return (await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: from } } } }), "a dead letter", 25_000)).id;
}

/** With the bearer and, for a POST, a fresh Idempotency-Key, as the page sends (a route that sends to a customer requires one). */
const call = (
  method: "GET" | "POST" | "DELETE",
  url: string,
  payload?: Record<string, unknown>,
  headers: Record<string, string> = method === "POST" ? { ...bearer, "idempotency-key": randomUUID() } : bearer,
) => h.app.inject({ method, url, headers, ...(payload ? { payload } : {}) });

/** The routes that write to a customer: an Idempotency-Key is required there, optional on every other POST. */
const SENDING = ["/admin/dlq/{id}/retry", "/admin/dlq/{id}/regenerate", "/admin/dlq/bulk-retry", "/admin/dlq/{id}/answer", "/admin/dlq/{id}/template"];

describe("the OpenAPI document", () => {
  it("lists every /admin route Fastify registered, with its method; only the pages are left out", async () => {
    // The same app, built again, with a hook that sees every route as it is registered.
    const app = anotherWeb(h);
    const registered: string[] = [];
    app.addHook("onRoute", (route) => {
      for (const method of [route.method].flat()) registered.push(`${method} ${route.url}`);
    });
    await app.ready();
    await app.close();

    // Pages, not API: the staff page and its assets, and bull-board's UI under /admin/queues.
    // HEAD is a GET without its body.
    const page = /^(GET \/admin(\/assets\/:file)?|[A-Z]+ \/admin\/queues(\/.*)?)$/;
    const api = registered.filter((route) => route.split(" ")[1]!.startsWith("/admin") && !route.startsWith("HEAD ") && !page.test(route));
    const documented = Object.entries(doc.paths).flatMap(([path, operations]) =>
      Object.keys(operations).map((method) => `${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`),
    );
    expect(documented.sort()).toEqual([...new Set(api)].sort());
    expect(documented).toEqual(expect.arrayContaining(["GET /admin/dlq", "GET /admin/dlq/:id", "POST /admin/dlq/:id/retry", "POST /admin/dlq/:id/discard"]));
    expect(registered).toContain("GET /admin/queues/api/queues");
  });

  it("describes the live queue's stream as an event stream, not JSON", () => {
    const events = doc.paths["/admin/events"]?.get;
    expect(Object.keys(events?.responses["200"]?.content ?? {})).toEqual(["text/event-stream"]);
    expect(Object.keys(events?.responses["503"]?.content ?? {})).toEqual(["application/json"]);
  });

  it("says how to get in: the ADMIN_TOKEN bearer, or the session cookie with its CSRF token for a change", () => {
    const document = doc as Document & { components: { securitySchemes: Record<string, Schema> } };
    expect(document.components.securitySchemes).toEqual({
      bearer: expect.objectContaining({ type: "http", scheme: "bearer" }),
      session: expect.objectContaining({ type: "apiKey", in: "cookie", name: "wa_staff" }),
      csrf: expect.objectContaining({ type: "apiKey", in: "header", name: "X-CSRF-Token" }),
    });
    expect(doc.paths["/admin/session"]!.post!.security).toEqual([]);
    expect(doc.paths["/admin/dlq"]!.get!.security).toEqual([{ bearer: [] }, { session: [] }]);
    expect(doc.paths["/admin/dlq/{id}/retry"]!.post!.security).toEqual([{ bearer: [] }, { session: [], csrf: [] }]);
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (operation.security.length > 0) expect(Object.keys(operation.responses), `${method} ${path}`).toContain("401");
        if (method === "post" && operation.security.length > 0) {
          expect(operation.parameters, `${method} ${path}`).toContainEqual(
            expect.objectContaining({ name: "idempotency-key", in: "header", required: SENDING.includes(path) }),
          );
        }
      }
    }
  });

  it("is itself for staff only: without the bearer or a session it is 401", async () => {
    const res = await call("GET", "/admin/openapi.json", undefined, {});
    expect(res.statusCode).toBe(401);
    expectDocumented("GET", "/admin/openapi.json", res);
  });

  it("declares OpenAPI 3.1, passes the official 3.1 schema, and every schema in it is JSON Schema 2020-12", async () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.jsonSchemaDialect).toBe("https://json-schema.org/draft/2020-12/schema");
    const official = await new Validator().validate(structuredClone(doc) as unknown as Record<string, unknown>);
    expect(official.errors ?? []).toEqual([]);
    expect(official.valid).toBe(true);

    const schemas = Object.values(doc.paths).flatMap((operations) =>
      Object.values(operations).flatMap((operation) => [
        ...operation.parameters.map((parameter) => parameter.schema),
        ...(operation.requestBody ? [operation.requestBody.content["application/json"].schema] : []),
        ...Object.values(operation.responses).flatMap((answer) => Object.values(answer.content).map((media) => media.schema)),
      ]),
    );
    expect(schemas.length).toBeGreaterThan(50);
    for (const schema of schemas) {
      expect(ajv.validateSchema(schema), JSON.stringify(ajv.errors)).toBe(true);
      // Strict mode also refuses keywords 2020-12 does not know.
      expect(() => ajv.compile(schema)).not.toThrow();
    }
  });
});

describe("the staff API answers what the document says", () => {
  it("the list, the summary and one item", async () => {
    const id = await deadLetter();
    const list = await call("GET", "/admin/dlq?order=newest&limit=5");
    expect(list.statusCode).toBe(200);
    expect(list.json().items[0].id).toBe(id);
    expectDocumented("GET", "/admin/dlq", list);
    expectDocumented("GET", "/admin/dlq/summary", await call("GET", "/admin/dlq/summary"));
    const item = await call("GET", `/admin/dlq/${id}`);
    expect(item.statusCode).toBe(200);
    expect(item.json().timeline.length).toBeGreaterThan(0);
    expectDocumented("GET", "/admin/dlq/{id}", item);
  });

  it("a bad filter is 400, an unknown or malformed id 404, no credentials 401", async () => {
    const badFilter = await call("GET", "/admin/dlq?limit=0&colour=red");
    expect(badFilter.statusCode).toBe(400);
    expect(badFilter.json().error).toMatch(/^bad filter: limit/);
    expectDocumented("GET", "/admin/dlq", badFilter);
    for (const id of [randomUUID(), "not-an-id"]) {
      const missing = await call("GET", `/admin/dlq/${id}`);
      expect(missing.json()).toEqual({ error: "dead letter not found" });
      expectDocumented("GET", "/admin/dlq/{id}", missing);
      expectDocumented("POST", "/admin/dlq/{id}/retry", await call("POST", `/admin/dlq/${id}/retry`, {}));
    }
    const anonymous = await call("GET", "/admin/dlq", undefined, {});
    expect(anonymous.statusCode).toBe(401);
    expectDocumented("GET", "/admin/dlq", anonymous);
  });

  it("retry: 400 on a bad body, 202 with new text, then 409; discard: 200, then 409", async () => {
    const id = await deadLetter();
    for (const body of [{ text: "" }, { text: "hi", colour: "red" }, { confirmMaybeSent: "yes" }]) {
      const bad = await call("POST", `/admin/dlq/${id}/retry`, body);
      expect(bad.statusCode).toBe(400);
      expect(bad.json()).toEqual({ error: "body must be { text?: non-empty string, confirmMaybeSent?: boolean }" });
      expectDocumented("POST", "/admin/dlq/{id}/retry", bad);
    }
    const malformed = await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${id}/retry`,
      headers: { ...bearer, "content-type": "application/json", "idempotency-key": randomUUID() },
      payload: "{",
    });
    expect(malformed.statusCode).toBe(400);
    expectDocumented("POST", "/admin/dlq/{id}/retry", malformed);
    const retried = await call("POST", `/admin/dlq/${id}/retry`, { text: "  Sorry for the wait!  " });
    expect(retried.statusCode).toBe(202);
    expectDocumented("POST", "/admin/dlq/{id}/retry", retried);
    await eventually(() => h.graph.sentTexts.includes("Sorry for the wait!"), "the edited text, trimmed, sent");
    const again = await call("POST", `/admin/dlq/${id}/retry`, {});
    expect(again.statusCode).toBe(409);
    expectDocumented("POST", "/admin/dlq/{id}/retry", again);

    const other = await deadLetter();
    const discarded = await call("POST", `/admin/dlq/${other}/discard`, { note: "called them" });
    expect(discarded.statusCode).toBe(200);
    expectDocumented("POST", "/admin/dlq/{id}/discard", discarded);
    expectDocumented("POST", "/admin/dlq/{id}/discard", await call("POST", `/admin/dlq/${other}/discard`));
    expectDocumented("POST", "/admin/dlq/{id}/discard", await call("POST", `/admin/dlq/${other}/discard`, { note: 7 }));
    expectDocumented("POST", "/admin/dlq/bulk-retry", await call("POST", "/admin/dlq/bulk-retry", { code: "131047", spacingMs: 0 }));
    expectDocumented("POST", "/admin/dlq/bulk-retry", await call("POST", "/admin/dlq/bulk-retry", {}));
  });

  it("handoff: pause and resume, and 404 for a conversation that does not exist", async () => {
    const from = `1555${Math.floor(Math.random() * 1e7)}`;
    await h.deliver(textWebhook({ text: "can I talk to someone?", from }).body);
    const conversation = await eventually(() => h.db.conversation.findFirst({ where: { contact: { waId: from } } }), "the conversation");
    for (const body of [{ minutes: 30 }, {}]) {
      expectDocumented("POST", "/admin/conversations/{id}/pause", await call("POST", `/admin/conversations/${conversation.id}/pause`, body));
    }
    expectDocumented("POST", "/admin/conversations/{id}/pause", await call("POST", `/admin/conversations/${conversation.id}/pause`, { minutes: 0 }));
    expectDocumented("POST", "/admin/conversations/{id}/resume", await call("POST", `/admin/conversations/${conversation.id}/resume`));
    expectDocumented("POST", "/admin/conversations/{id}/resume", await call("POST", `/admin/conversations/${randomUUID()}/resume`));
  });

  it("a customer waiting for a person: answer (202, 400, 409), presence, take-over, leaving, give-back (200, then 409), and 404s", async () => {
    const from = `1555${Math.floor(Math.random() * 1e7)}`;
    await h.deliver(textWebhook({ text: "human", from }).body);
    const { id } = await eventually(
      () => h.db.deadLetter.findFirst({ where: { source: "handoff", conversation: { contact: { waId: from } } } }),
      "the customer's item",
    );
    expectDocumented("POST", "/admin/dlq/{id}/presence", await call("POST", `/admin/dlq/${id}/presence`, { answering: true }));
    expectDocumented("POST", "/admin/dlq/{id}/presence", await call("POST", `/admin/dlq/${id}/presence`, { answering: "yes" }));
    const answered = await call("POST", `/admin/dlq/${id}/answer`, { text: "Hello, a person here." });
    expect(answered.statusCode).toBe(202);
    expectDocumented("POST", "/admin/dlq/{id}/answer", answered);
    expectDocumented("POST", "/admin/dlq/{id}/answer", await call("POST", `/admin/dlq/${id}/answer`, { text: "" }));
    expectDocumented("POST", "/admin/dlq/{id}/take-over", await call("POST", `/admin/dlq/${id}/take-over`));
    expectDocumented("DELETE", "/admin/dlq/{id}/presence", await call("DELETE", `/admin/dlq/${id}/presence`));
    const givenBack = await call("POST", `/admin/dlq/${id}/give-back`);
    expect(givenBack.statusCode).toBe(200);
    expectDocumented("POST", "/admin/dlq/{id}/give-back", givenBack);
    for (const action of ["give-back", "answer"]) {
      const refused = await call("POST", `/admin/dlq/${id}/${action}`, action === "answer" ? { text: "again" } : undefined);
      expect(refused.statusCode).toBe(409);
      expectDocumented("POST", `/admin/dlq/{id}/${action}`, refused);
    }
    const unknown = randomUUID();
    for (const action of ["give-back", "take-over", "presence"]) {
      expectDocumented("POST", `/admin/dlq/{id}/${action}`, await call("POST", `/admin/dlq/${unknown}/${action}`, action === "presence" ? {} : undefined));
    }
  });

  it("costs: the days' figures (of the replies the tests before made), and 400 for a bad range", async () => {
    const res = await call("GET", "/admin/costs");
    expect(res.statusCode).toBe(200);
    expect(res.json().days.length).toBeGreaterThan(0);
    expectDocumented("GET", "/admin/costs", res);
    const bad = await call("GET", "/admin/costs?from=2026-12-02&to=2026-12-01");
    expect(bad.statusCode).toBe(400);
    expectDocumented("GET", "/admin/costs", bad);
    expectDocumented("GET", "/admin/costs", await call("GET", "/admin/costs?from=soon"));
  });

  it("insights: every day's figures and what lies behind them (of the replies the tests before made), and 400 for a bad range", async () => {
    const res = await call("GET", "/admin/insights");
    expect(res.statusCode).toBe(200);
    expect(res.json().total.conversations).toBeGreaterThan(0);
    expectDocumented("GET", "/admin/insights", res);
    const bad = await call("GET", "/admin/insights?from=2026-12-02&to=2026-12-01");
    expect(bad.statusCode).toBe(400);
    expectDocumented("GET", "/admin/insights", bad);
    expectDocumented("GET", "/admin/insights", await call("GET", "/admin/insights?from=soon"));
  });

  it("a person's session: sign in, who am I, a change without the CSRF token (403), sign out", async () => {
    await addStaff(h.db, "dee@example.com", "correct horse battery staple");
    const wrong = await call("POST", "/admin/session", { email: "dee@example.com", password: "wrong password!" }, {});
    expect(wrong.statusCode).toBe(401);
    expectDocumented("POST", "/admin/session", wrong);
    const signedIn = await call("POST", "/admin/session", { email: "dee@example.com", password: "correct horse battery staple" }, {});
    expectDocumented("POST", "/admin/session", signedIn);
    const cookie = String(signedIn.headers["set-cookie"]).split(";")[0]!;
    expectDocumented("GET", "/admin/session", await call("GET", "/admin/session", undefined, { cookie }));
    expectDocumented("GET", "/admin/session", await call("GET", "/admin/session"));
    const noCsrf = await call("POST", `/admin/dlq/${randomUUID()}/discard`, {}, { cookie });
    expect(noCsrf.statusCode).toBe(403);
    expectDocumented("POST", "/admin/dlq/{id}/discard", noCsrf);
    const signedOut = await call("DELETE", "/admin/session", undefined, { cookie, "x-csrf-token": signedIn.json().csrfToken as string });
    expect(signedOut.statusCode).toBe(200);
    expectDocumented("DELETE", "/admin/session", signedOut);
  });

  it("templates: the list (none without WHATSAPP_BUSINESS_ACCOUNT_ID), and a template send refused in words", async () => {
    const list = await call("GET", "/admin/templates");
    expect(list.statusCode).toBe(200);
    expect(list.json()).toEqual({ configured: false, fetchedAt: null, templates: [] });
    expectDocumented("GET", "/admin/templates", list);
    const badQuery = await call("GET", "/admin/templates?colour=red");
    expect(badQuery.statusCode).toBe(400);
    expectDocumented("GET", "/admin/templates", badQuery);
    const id = randomUUID();
    const refused = await call("POST", `/admin/dlq/${id}/template`, { name: "order_update", language: "en_US", parameters: ["Ada"] });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error).toMatch(/WHATSAPP_BUSINESS_ACCOUNT_ID/);
    expectDocumented("POST", "/admin/dlq/{id}/template", refused);
    const badBody = await call("POST", `/admin/dlq/${id}/template`, { name: "order_update" });
    expect(badBody.statusCode).toBe(400);
    expectDocumented("POST", "/admin/dlq/{id}/template", badBody);
  });

  it("the Idempotency-Key's refusals", async () => {
    const id = await deadLetter();
    const url = `/admin/dlq/${id}/discard`;
    expectDocumented("POST", "/admin/dlq/{id}/discard", await call("POST", url, {}, { ...bearer, "idempotency-key": "k".repeat(256) }));
    expectDocumented("POST", "/admin/dlq/{id}/discard", await call("POST", url, {}, { ...bearer, "idempotency-key": "press-1" }));
    const misuse = await call("POST", url, { note: "another" }, { ...bearer, "idempotency-key": "press-1" });
    expect(misuse.statusCode).toBe(422);
    expectDocumented("POST", "/admin/dlq/{id}/discard", misuse);
    const keyless = await call("POST", `/admin/dlq/${id}/retry`, { text: "Sorry!" }, bearer);
    expect(keyless.statusCode).toBe(400);
    expect(keyless.json().error).toMatch(/Idempotency-Key/);
    expectDocumented("POST", "/admin/dlq/{id}/retry", keyless);
  });
});
