import type { IncomingMessage, ServerResponse } from "node:http";
import type Anthropic from "@anthropic-ai/sdk";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { systemClock } from "../src/clock.ts";
import { isPublicAddress } from "../src/tools/addresses.ts";
import { BusinessTool, type BusinessToolSpec } from "../src/tools/business-tool.ts";
import { callTool, pinnedDispatcher, type ToolOutcome } from "../src/tools/call.ts";
import { HANDOFF_TOOL, toolDefinitions } from "../src/tools/definitions.ts";
import { idempotencyKeyFor } from "../src/tools/idempotency.ts";
import { fillTemplate } from "../src/tools/url-template.ts";
import { LocalServer, sendJson } from "./support/local-server.ts";
import { freePort } from "./support/ports.ts";

/** Issue 19: the business's own tools, as Claude sees them and as they are called. */

const SHOP = "106540352242922";

function spec(overrides: Partial<BusinessToolSpec> = {}, request: Partial<BusinessToolSpec["request"]> = {}): BusinessToolSpec {
  return {
    name: "lookup_order",
    description: "Looks up one of the customer's orders by its number.",
    inputSchema: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
    allowPrivateNetwork: false,
    ...overrides,
    request: {
      method: "GET",
      url: "https://orders.shop.example/v1/orders/{orderId}",
      headers: { Authorization: "Bearer secret-token" },
      timeoutMs: 2000,
      ...request,
    },
  };
}

describe("what Claude is given", () => {
  it("is each tool's name, description and input_schema, and nothing of its request", () => {
    // Typed as the SDK takes them: the reply path hands them to messages.create as they are.
    const definitions: Anthropic.Tool[] = [...toolDefinitions([new BusinessTool(spec())]), HANDOFF_TOOL];
    expect(definitions).toEqual([
      {
        name: "lookup_order",
        description: "Looks up one of the customer's orders by its number.",
        input_schema: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
      },
      HANDOFF_TOOL,
    ]);
    expect(JSON.stringify(definitions)).not.toMatch(/secret-token|orders\.shop\.example|GET/);
  });

  it("handoff_to_human is built in: a reason in, for staff; Claude is told when to use it", () => {
    expect(HANDOFF_TOOL).toMatchObject({
      name: "handoff_to_human",
      input_schema: { type: "object", properties: { reason: { type: "string" } }, required: ["reason"] },
    });
    expect(HANDOFF_TOOL.description).toMatch(/person/);
    expect(HANDOFF_TOOL.description).toMatch(/knowledge and tools/);
    expect(HANDOFF_TOOL.description).toMatch(/guess/);
  });
});

describe("the Idempotency-Key", () => {
  it("is the same for the same number and tool_use.id, every time, and differs when either differs", () => {
    const key = idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lq9");
    expect(key).toMatch(/^[0-9a-f]{64}$/);
    expect(idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lq9")).toBe(key);
    expect(idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lqX")).not.toBe(key);
    expect(idempotencyKeyFor("106540352249999", "toolu_01A09q90qw90lq917835lq9")).not.toBe(key);
    // The parts never run into each other.
    expect(idempotencyKeyFor("1", "23")).not.toBe(idempotencyKeyFor("12", "3"));
  });
});

describe("a URL template filled from the input", () => {
  const template = "https://orders.shop.example/v1/orders/{orderId}/lines?sku={sku}";

  it("encodes each value, so no input changes the host, the path's shape or the query", () => {
    expect(fillTemplate(template, { orderId: "A-17", sku: 42 })).toEqual({ url: "https://orders.shop.example/v1/orders/A-17/lines?sku=42" });
    expect(fillTemplate(template, { orderId: "../../admin?all=1#x", sku: "a&b=c" })).toEqual({
      url: "https://orders.shop.example/v1/orders/..%2F..%2Fadmin%3Fall%3D1%23x/lines?sku=a%26b%3Dc",
    });
    expect(fillTemplate(template, { orderId: "@evil.example:80\\x", sku: "" })).toEqual({
      url: "https://orders.shop.example/v1/orders/%40evil.example%3A80%5Cx/lines?sku=",
    });
  });

  it("refuses a value that would be a whole '.' or '..' segment, an empty path value, or a value that is not a string or number", () => {
    expect(fillTemplate(template, { orderId: "..", sku: "1" })).toEqual({ problem: expect.stringMatching(/"\." or "\.\."/) });
    expect(fillTemplate(template, { orderId: "%2e%2E", sku: "1" })).toEqual({ url: expect.stringContaining("/orders/%252e%252E/") });
    expect(fillTemplate("https://x.example/files/.{ext}", { ext: "." })).toEqual({ problem: expect.stringMatching(/"\." or "\.\."/) });
    expect(fillTemplate(template, { orderId: "", sku: "1" })).toEqual({ problem: '"orderId" must not be empty: it is part of the URL\'s path' });
    expect(fillTemplate(template, { orderId: { id: 1 }, sku: "1" })).toEqual({
      problem: '"orderId" must be given as a string or a number: it goes into the URL',
    });
    expect(fillTemplate(template, { sku: "1" })).toEqual({ problem: '"orderId" must be given as a string or a number: it goes into the URL' });
  });
});

interface Received {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

/** The business's endpoint: a local HTTP server that keeps every request it is sent. */
async function business(answer: (req: IncomingMessage, res: ServerResponse, received: Received[]) => void) {
  const server = new LocalServer();
  const received: Received[] = [];
  await server.start((req, body, res) => {
    received.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: body.toString("utf8") });
    answer(req, res, received);
  });
  servers.push(server);
  return { url: server.url, received };
}

const servers: LocalServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.stop()));
});

const KEY = idempotencyKeyFor(SHOP, "toolu_01A09q90qw90lq917835lq9");
const call = (tool: BusinessTool, input: unknown, options: { signal?: AbortSignal; maxAnswerBytes?: number } = {}) =>
  callTool(tool, input, { idempotencyKey: KEY, maxAnswerBytes: 16_384, clock: systemClock, ...options });

/** A tool at a local server: the ordinary tests' servers are on 127.0.0.1, so the guard is told to allow it. */
function localTool(base: string, request: Partial<BusinessToolSpec["request"]> = {}, overrides: Partial<BusinessToolSpec> = {}): BusinessTool {
  return new BusinessTool(spec({ allowPrivateNetwork: true, ...overrides }, { url: `${base}/v1/orders/{orderId}`, ...request }));
}

/** Nothing in an outcome may show the tool's secret. */
function withoutSecrets(outcome: ToolOutcome): ToolOutcome {
  expect(JSON.stringify(outcome)).not.toContain("secret-token");
  return outcome;
}

describe("calling a business's tool", () => {
  it("fills the URL's placeholders URL-encoded: '../' and '?' in the input stay inside their path segment", async () => {
    const shop = await business((_req, res) => sendJson(res, 200, { state: "shipped" }));
    const outcome = withoutSecrets(await call(localTool(shop.url), { orderId: "../../admin?all=1" }));
    expect(shop.received.map((r) => r.url)).toEqual(["/v1/orders/..%2F..%2Fadmin%3Fall%3D1"]);
    expect(outcome).toMatchObject({ isError: false, request: { method: "GET", url: `${shop.url}/v1/orders/..%2F..%2Fadmin%3Fall%3D1` } });
  });

  it("sends the Idempotency-Key and the configured headers, and the same key again when the call is repeated", async () => {
    const shop = await business((_req, res) => sendJson(res, 201, { refund: "R-1" }));
    const refund = localTool(
      shop.url,
      { method: "POST", url: `${shop.url}/v1/orders/{orderId}/refunds` },
      {
        inputSchema: { type: "object", properties: { orderId: { type: "string" }, cents: { type: "integer" } }, required: ["orderId", "cents"] },
      },
    );
    const input = { orderId: "A-17", cents: 1250 };
    await call(refund, input);
    await call(refund, input); // a retry after a crash: same tool_use.id, same key
    expect(shop.received).toHaveLength(2);
    for (const got of shop.received) {
      expect(got).toMatchObject({ method: "POST", url: "/v1/orders/A-17/refunds" });
      expect(got.headers["idempotency-key"]).toBe(KEY);
      expect(got.headers.authorization).toBe("Bearer secret-token");
      expect(got.headers["content-type"]).toBe("application/json");
      expect(JSON.parse(got.body)).toEqual(input);
    }
  });

  it("a GET carries the input in its URL only: no body, no content-type", async () => {
    const shop = await business((_req, res) => sendJson(res, 200, {}));
    await call(localTool(shop.url), { orderId: "A-17" });
    expect(shop.received[0]).toMatchObject({ method: "GET", body: "" });
    expect(shop.received[0]?.headers["content-type"]).toBeUndefined();
    expect(shop.received[0]?.headers["idempotency-key"]).toBe(KEY);
  });

  it("a 2xx answer is Claude's text as the business wrote it", async () => {
    const shop = await business((_req, res) => sendJson(res, 200, { state: "shipped", eta: "2026-03-02" }));
    expect(withoutSecrets(await call(localTool(shop.url), { orderId: "A-17" }))).toMatchObject({
      isError: false,
      text: '{"state":"shipped","eta":"2026-03-02"}',
      status: 200,
      unsure: false,
    });
  });

  it("a 4xx or 5xx answer is an error with its status and body; it is an answer, so the business did not leave us guessing", async () => {
    const shop = await business((req, res) => {
      if (req.url?.endsWith("/A-404")) sendJson(res, 404, { error: "no such order" });
      else sendJson(res, 503, { error: "maintenance" });
    });
    expect(withoutSecrets(await call(localTool(shop.url), { orderId: "A-404" }))).toMatchObject({
      isError: true,
      text: 'HTTP 404: {"error":"no such order"}',
      status: 404,
      unsure: false,
    });
    expect(withoutSecrets(await call(localTool(shop.url), { orderId: "A-17" }))).toMatchObject({
      isError: true,
      text: 'HTTP 503: {"error":"maintenance"}',
      status: 503,
      unsure: false,
    });
  });

  it("an answer longer than maxAnswerBytes is cut at a character's boundary, and says so", async () => {
    const shop = await business((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
      res.end("é".repeat(10_000)); // two bytes each
    });
    const outcome = await call(localTool(shop.url), { orderId: "A-17" }, { maxAnswerBytes: 51 });
    expect(outcome).toMatchObject({ isError: false, status: 200, text: `${"é".repeat(25)}\n[answer cut at 51 bytes]` });
    const failing = await business((_req, res) => {
      res.writeHead(500);
      res.end("x".repeat(1000));
    });
    expect((await call(localTool(failing.url), { orderId: "A-17" }, { maxAnswerBytes: 300 })).text).toBe(
      `HTTP 500: ${"x".repeat(300)}\n[answer cut at 300 bytes]`,
    );
  });

  it("an input that does not fit the schema is an error Claude can read, and nothing is sent", async () => {
    const shop = await business((_req, res) => sendJson(res, 200, {}));
    const tool = localTool(shop.url);
    expect(await call(tool, { orderId: 17 })).toMatchObject({
      isError: true,
      unsure: false,
      text: "Not sent: the input does not fit lookup_order's input_schema: input/orderId must be string",
    });
    expect(await call(tool, {})).toMatchObject({ isError: true, unsure: false, text: expect.stringContaining("must have required property 'orderId'") });
    expect(await call(tool, "A-17")).toMatchObject({ isError: true, unsure: false, text: expect.stringContaining("input must be object") });
    expect(await call(tool, { orderId: ".." })).toMatchObject({ isError: true, unsure: false, text: expect.stringContaining('"." or ".."') });
    expect(shop.received).toHaveLength(0);
  });

  it("a timeout after the request went out is unsure, for the caller to repeat with the same key; a method that acts may have acted", async () => {
    const shop = await business(() => {}); // takes the request and never answers
    const outcome = withoutSecrets(await call(localTool(shop.url, { timeoutMs: 300 }), { orderId: "A-17" }));
    expect(shop.received).toHaveLength(1);
    expect(outcome).toMatchObject({
      isError: true,
      unsure: true,
      maybeActed: false,
      text: expect.stringContaining("lookup_order did not answer within 300 ms"),
    });
    expect(outcome.status).toBeUndefined();
    const posted = await call(localTool(shop.url, { method: "POST", timeoutMs: 300 }), { orderId: "A-17" });
    expect(posted).toMatchObject({ isError: true, unsure: true, maybeActed: true });
  });

  it("a proxy's 502, 503 or 504 page is unsure (the business may not have answered); the business's own JSON error with those statuses is its answer", async () => {
    const shop = await business((req, res) => {
      if (req.url?.endsWith("/json")) return sendJson(res, 503, { error: "maintenance" });
      const status = Number(req.url?.split("/").at(-1));
      res.writeHead(status, { "content-type": "text/html" });
      res.end(`<html><body><h1>${status} Bad Gateway</h1></body></html>`);
    });
    const refund = localTool(shop.url, { method: "POST" });
    for (const status of [502, 503, 504])
      expect(await call(refund, { orderId: String(status) })).toMatchObject({ isError: true, status, unsure: true, maybeActed: true });
    expect(await call(refund, { orderId: "500" })).toMatchObject({ isError: true, status: 500, unsure: false, maybeActed: false });
    expect(await call(refund, { orderId: "json" })).toMatchObject({ isError: true, status: 503, unsure: false, maybeActed: false });
  });

  it("the reply's own deadline (the caller's signal) ends a call in flight, which may have acted", async () => {
    const stop = new AbortController();
    const shop = await business(() => stop.abort());
    const outcome = await call(localTool(shop.url), { orderId: "A-17" }, { signal: stop.signal });
    expect(outcome).toMatchObject({ isError: true, unsure: true, text: expect.stringContaining("the reply's time for tool calls ran out") });
    // Run out before the call: nothing is sent.
    expect(await call(localTool(shop.url), { orderId: "A-17" }, { signal: AbortSignal.abort() })).toMatchObject({ isError: true, unsure: false });
    expect(shop.received).toHaveLength(1);
  });

  it("a connection reset after the request went out may have acted; so may an answer that broke off", async () => {
    const shop = await business((req, res) => {
      if (req.url?.endsWith("/reset")) return void req.socket.destroy();
      res.writeHead(200, { "content-length": "1000" });
      res.write("{ half");
      setImmediate(() => req.socket.destroy());
    });
    expect(withoutSecrets(await call(localTool(shop.url), { orderId: "reset" }))).toMatchObject({
      isError: true,
      unsure: true,
      text: expect.stringContaining("broke off before an answer"),
    });
    expect(withoutSecrets(await call(localTool(shop.url), { orderId: "A-17" }))).toMatchObject({
      isError: true,
      unsure: true,
      status: 200,
      text: expect.stringContaining("the answer (HTTP 200) broke off"),
    });
  });

  it("a connection never made (refused, or a host that does not resolve) did not act", async () => {
    const port = await freePort();
    const refused = await call(localTool(`http://127.0.0.1:${port}`), { orderId: "A-17" });
    expect(refused).toMatchObject({
      isError: true,
      unsure: false,
      text: expect.stringMatching(/^Not sent: could not connect to 127\.0\.0\.1:\d+ \(ECONNREFUSED\)/),
    });
    const unknown = await call(localTool("http://orders.shop.invalid", { timeoutMs: 5000 }), { orderId: "A-17" });
    expect(unknown).toMatchObject({ isError: true, unsure: false, text: expect.stringMatching(/^Not sent: /) });
  });
});

describe("the SSRF guard", () => {
  it.each([
    ["127.0.0.1", (port: number) => `http://127.0.0.1:${port}`],
    ["localhost", (port: number) => `http://localhost:${port}`],
    ["[::1]", (port: number) => `http://[::1]:${port}`],
    ["10.x", () => "http://10.0.0.1"],
    ["169.254.169.254, the cloud's metadata service", () => "http://169.254.169.254/latest/meta-data"],
    ["a mapped IPv6 loopback", (port: number) => `http://[::ffff:127.0.0.1]:${port}`],
  ])("refuses %s unless the tool allows the private network, and sends nothing", async (_name, base) => {
    const shop = await business((_req, res) => sendJson(res, 200, {}));
    const port = Number(new URL(shop.url).port);
    const outcome = withoutSecrets(await call(localTool(base(port), {}, { allowPrivateNetwork: false }), { orderId: "A-17" }));
    expect(outcome).toMatchObject({
      isError: true,
      unsure: false,
      text: expect.stringContaining("non-public address; only a tool with allowPrivateNetwork may call one"),
    });
    expect(shop.received).toHaveLength(0);
  });

  it("lets a tool with allowPrivateNetwork reach a server on this host, by name", async () => {
    const shop = await business((_req, res) => sendJson(res, 200, { ok: true }));
    const port = Number(new URL(shop.url).port);
    const outcome = await call(localTool(`http://localhost:${port}`), { orderId: "A-17" });
    expect(outcome).toMatchObject({ isError: false, text: '{"ok":true}' });
    expect(shop.received[0]?.headers.host).toBe(`localhost:${port}`);
  });

  it("connects to the address it checked, never to a second lookup's: the name is not resolved again", async () => {
    const shop = await business((_req, res) => sendJson(res, 200, { pinned: true }));
    const port = Number(new URL(shop.url).port);
    const { agent, made } = pinnedDispatcher([{ address: "127.0.0.1", family: 4 }], 2000);
    try {
      // .invalid never resolves (RFC 6761): the answer can only come through the pinned address.
      const response = await request(`http://orders.shop.invalid:${port}/v1/orders/A-17`, { dispatcher: agent });
      expect(await response.body.json()).toEqual({ pinned: true });
    } finally {
      await agent.destroy();
    }
    expect(made()).toBe(true);
    expect(shop.received[0]?.headers.host).toBe(`orders.shop.invalid:${port}`);
  });

  it("knows which addresses are the public internet", () => {
    const notPublic = [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "255.255.255.255",
      "::1",
      "::",
      "::ffff:127.0.0.1",
      "::ffff:7f00:1",
      "::ffff:a9fe:a9fe",
      "64:ff9b::a9fe:a9fe",
      "2002:0a00:0001::1",
      "fc00::1",
      "fd12:3456::1",
      "fe80::1",
      "fe80::1%eth0",
      "ff02::1",
      "2001:db8::1",
      "not an address",
    ];
    const isPublic = ["8.8.8.8", "93.184.216.34", "100.128.0.1", "172.32.0.1", "::ffff:8.8.8.8", "2606:4700:4700::1111", "2a00:1450:4001::200e"];
    expect(notPublic.filter(isPublicAddress)).toEqual([]);
    expect(isPublic.filter((a) => !isPublicAddress(a))).toEqual([]);
  });
});
