// biome-ignore-all lint/suspicious/noTemplateCurlyInString: "${NAME}" in a header is the tools file's own syntax for an environment variable.
import type { ChildProcess } from "node:child_process";
import { EventEmitter } from "node:events";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import { deserialize, serialize } from "node:v8";
import { describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.ts";
import { createMetrics } from "../src/metrics/metrics.ts";
import { superviseWorkerChild } from "../src/process/supervisor.ts";
import { answerParent, type ToWorkerChild } from "../src/process/worker-child.ts";
import { loadSettings } from "../src/settings.ts";
import { BusinessTool } from "../src/tools/business-tool.ts";
import { problemsOf } from "./support/config-problems.ts";
import { runEntryPoint } from "./support/entry-point.ts";
import { testEnv } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { freePort } from "./support/ports.ts";

/** Issue 19: each business number's knowledge and tools, as start-up reads and checks them. */

const SHOP = "106540352242922";
const CLINIC = "106540352249999";

/** A PHONE_NUMBERS_FILE in a directory of its own, beside the given files (paths relative to it). */
async function numbersFile(numbers: unknown, files: Record<string, string> = {}): Promise<{ dir: string; path: string }> {
  const dir = await mkdtemp(join(tmpdir(), "tools-config-"));
  for (const [name, content] of Object.entries(files)) {
    await mkdir(join(dir, name, ".."), { recursive: true });
    await writeFile(join(dir, name), content);
  }
  const path = join(dir, "numbers.json");
  await writeFile(path, JSON.stringify(numbers));
  return { dir, path };
}

describe("the tool loop's bounds and the knowledge budget", () => {
  it("default to 5 tool calls in 30 s per reply, answers cut at 16 KiB, 30000 tokens of knowledge whole", () => {
    const config = loadSettings(testEnv());
    expect(config.tools).toEqual({ maxSteps: 5, maxMs: 30_000, answerMaxBytes: 16_384 });
    expect(config.knowledge.tokenBudget).toBe(30_000);
  });

  it("are read from the environment, and a bad one is named", () => {
    const config = loadSettings(testEnv({ TOOL_MAX_STEPS: "3", TOOL_MAX_MS: "5000", TOOL_ANSWER_MAX_BYTES: "1024", KNOWLEDGE_TOKEN_BUDGET: "0" }));
    expect(config.tools).toEqual({ maxSteps: 3, maxMs: 5000, answerMaxBytes: 1024 });
    expect(config.knowledge.tokenBudget).toBe(0);
    expect(problemsOf(testEnv({ TOOL_MAX_STEPS: "0", TOOL_MAX_MS: "soon", TOOL_ANSWER_MAX_BYTES: "10", KNOWLEDGE_TOKEN_BUDGET: "-1" }))).toEqual([
      'KNOWLEDGE_TOKEN_BUDGET must be an integer from 0 to 150000, got "-1"',
      'TOOL_MAX_STEPS must be an integer from 1 to 50, got "0"',
      'TOOL_MAX_MS must be an integer from 1000 to 600000, got "soon"',
      'TOOL_ANSWER_MAX_BYTES must be an integer from 256 to 1048576, got "10"',
    ]);
  });
});

describe("a number's knowledgeDir", () => {
  it("is resolved against PHONE_NUMBERS_FILE's directory, absolute", async () => {
    const { dir, path } = await numbersFile({ [SHOP]: { knowledgeDir: "shop/knowledge" }, [CLINIC]: {} }, { "shop/knowledge/prices.md": "# Prices" });
    const config = loadSettings(testEnv({ PHONE_NUMBERS_FILE: path }));
    expect(config.numbers.get(SHOP)?.knowledgeDir).toBe(join(dir, "shop/knowledge"));
    expect(config.numbers.get(CLINIC)?.knowledgeDir).toBeUndefined();
  });

  it("that does not exist, or is a file, stops start-up naming the number and the path", async () => {
    const { dir, path } = await numbersFile(
      { [SHOP]: { knowledgeDir: "shop/knowledge" }, [CLINIC]: { knowledgeDir: "clinic.md" } },
      { "clinic.md": "# Hours" },
    );
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: path }))).toEqual([
      `PHONE_NUMBERS_FILE ${SHOP}.knowledgeDir: ${join(dir, "shop/knowledge")} does not exist`,
      `PHONE_NUMBERS_FILE ${CLINIC}.knowledgeDir: ${join(dir, "clinic.md")} is not a directory`,
    ]);
  });
});

/** A tool as a business would write it; `overrides` replace its top-level fields, `request` its request's. */
function lookupOrder(overrides: Record<string, unknown> = {}, request: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    name: "lookup_order",
    description: "Looks up one of the customer's orders by its number: its state and delivery date.",
    input_schema: { type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] },
    ...overrides,
    request: {
      method: "GET",
      url: "https://orders.shop.example/v1/orders/{orderId}",
      headers: { Authorization: "Bearer ${ORDERS_API_TOKEN}" },
      ...request,
    },
  };
}

const TOKEN = "orders-secret-0123456789";

/** Loads a config whose SHOP number has `tools` as its tools file (raw text when a string). */
async function withTools(tools: unknown, env: Record<string, string> = { ORDERS_API_TOKEN: TOKEN }) {
  const { path } = await numbersFile(
    { [SHOP]: { toolsFile: "shop/tools.json" } },
    { "shop/tools.json": typeof tools === "string" ? tools : JSON.stringify(tools) },
  );
  return testEnv({ PHONE_NUMBERS_FILE: path, ...env });
}

const WHERE = `PHONE_NUMBERS_FILE ${SHOP}.toolsFile (shop/tools.json)`;

describe("a number's toolsFile", () => {
  it("loads each tool with its headers' environment variables resolved, a 10 s timeout and the SSRF guard on by default", async () => {
    const config = loadSettings(
      await withTools(
        {
          tools: [
            lookupOrder(),
            lookupOrder(
              { name: "cancel_order", allowPrivateNetwork: true },
              { method: "POST", timeoutMs: 2500, headers: { "X-Shop": "${SHOP_ID}/${SHOP_REGION}", Accept: "application/json" } },
            ),
          ],
        },
        { ORDERS_API_TOKEN: TOKEN, SHOP_ID: "s1", SHOP_REGION: "eu" },
      ),
    );
    const tools = config.businessTools.get(SHOP) ?? [];
    expect(tools.map((t) => [t.name, t.request.method, t.request.timeoutMs, t.allowPrivateNetwork])).toEqual([
      ["lookup_order", "GET", 10_000, false],
      ["cancel_order", "POST", 2500, true],
    ]);
    expect(tools[0]?.request).toEqual({
      method: "GET",
      url: "https://orders.shop.example/v1/orders/{orderId}",
      timeoutMs: 10_000,
      headerNames: ["Authorization"],
    });
    expect(tools[0]?.headersToSend()).toEqual({ Authorization: `Bearer ${TOKEN}` });
    expect(tools[1]?.headersToSend()).toEqual({ "X-Shop": "s1/eu", Accept: "application/json" });
    expect(tools[0]?.inputSchema).toEqual({ type: "object", properties: { orderId: { type: "string" } }, required: ["orderId"] });
  });

  it("a tool with no request.headers (a public endpoint) is a tool, offered and called with none (issue 32.13)", async () => {
    const { headers: _none, ...request } = lookupOrder().request as Record<string, unknown>;
    const config = loadSettings(await withTools({ tools: [{ ...lookupOrder(), request }] }));
    const tools = config.businessTools.get(SHOP) ?? [];
    expect(tools.map((t) => t.name)).toEqual(["lookup_order"]);
    expect(tools[0]?.headersToSend()).toEqual({});
  });

  it("headers that are not an object are named, never skipped without a word", async () => {
    expect(problemsOf(await withTools({ tools: [lookupOrder({}, { headers: "Bearer x" })] }))).toEqual([
      `${WHERE}: tool "lookup_order" request.headers: Invalid input: expected record, received string`,
    ]);
  });

  it("that is not JSON, or not { tools: [...] }, is named", async () => {
    expect(problemsOf(await withTools("{ tools: "))[0]).toMatch(new RegExp(`^${escapeRegExp(WHERE)} cannot be read as JSON: `));
    expect(problemsOf(await withTools([lookupOrder()]))).toEqual([`${WHERE}: the file: Invalid input: expected object, received array`]);
    expect(problemsOf(await withTools({ tool: [] }))).toEqual([`${WHERE}: tools: is required`, `${WHERE}: tool: is not a known field`]);
  });

  it("that is not JSON is named without quoting the text, which may hold a secret", async () => {
    const problems = problemsOf(await withTools('{ "tools": [ { "request": { "headers": { "X-Api-Key": sk-live-0123456789 } } } ] }'));
    expect(problems).toEqual([`${WHERE} cannot be read as JSON: Unexpected token 's'`]);
  });

  it("that is missing is named", async () => {
    const { path } = await numbersFile({ [SHOP]: { toolsFile: "shop/tools.json" } });
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: path }))[0]).toMatch(new RegExp(`^${escapeRegExp(WHERE)} cannot be read as JSON: ENOENT`));
  });

  it("reports every problem at once, each naming the number, the tool and the field", async () => {
    const problems = problemsOf(
      await withTools({
        tools: [
          lookupOrder({ name: "look up order", extra: true }, { retries: 3, timeoutMs: 5 }),
          lookupOrder({ name: "handoff_to_human" }, { method: "get" }),
          lookupOrder({ name: "refund", description: "" }, { url: "ftp://orders.shop.example/{orderId}" }),
          lookupOrder({ name: "refund" }, { url: "/v1/orders/{orderId}" }),
          lookupOrder({ name: undefined }),
        ],
      }),
    );
    expect(problems).toEqual([
      `${WHERE}: tool "look up order" request.timeoutMs: must be from 100 to 120000`,
      `${WHERE}: tool "look up order" request.retries: is not a known field`,
      `${WHERE}: tool "look up order" extra: is not a known field`,
      `${WHERE}: tool "look up order" name: must be 1 to 64 letters, digits, _ or - (Anthropic's rule for tool names)`,
      `${WHERE}: tool "handoff_to_human" request.method: Invalid option: expected one of "GET"|"POST"|"PUT"|"PATCH"|"DELETE"`,
      `${WHERE}: tool "handoff_to_human" name: handoff_to_human is built in: choose another name`,
      `${WHERE}: tool "refund" description: must say what the tool does, for Claude`,
      `${WHERE}: tool "refund" request.url: must be an http:// or https:// URL, not ftp://`,
      `${WHERE}: tool "refund" request.url: must be an absolute http:// or https:// URL`,
      `${WHERE}: tool "refund" name: is used by another tool in this file`,
      `${WHERE}: tools[4] name: is required`,
    ]);
  });

  it("reports an input_schema that is not an object schema, or does not compile", async () => {
    const problems = problemsOf(
      await withTools({
        tools: [
          lookupOrder({ name: "a", input_schema: { type: "array" } }, { url: "https://x.example/a" }),
          lookupOrder({ name: "b", input_schema: { type: "object", properties: { orderId: { type: "strng" } }, required: ["orderId"] } }),
          lookupOrder({ name: "c", input_schema: { type: "object", propertys: { orderId: { type: "string" } } } }, { url: "https://x.example/c" }),
          lookupOrder(
            { name: "d", input_schema: { type: "object", properties: { day: { type: "string", format: "weekday" } } } },
            { url: "https://x.example/d" },
          ),
          lookupOrder({ name: "e", input_schema: "object" }, { url: "https://x.example/e" }),
        ],
      }),
    );
    expect(problems).toEqual([
      `${WHERE}: tool "a" input_schema: must have "type": "object"`,
      expect.stringMatching(
        new RegExp(
          `^${escapeRegExp(WHERE)}: tool "b" input_schema: schema is invalid: data/properties/orderId/type must be equal to one of the allowed values`,
        ),
      ),
      `${WHERE}: tool "c" input_schema: strict mode: unknown keyword: "propertys"`,
      `${WHERE}: tool "d" input_schema: unknown format "weekday" ignored in schema at path "#/properties/day"`,
      `${WHERE}: tool "e" input_schema: Invalid input: expected record, received string`,
    ]);
  });

  it("reports URL placeholders that the input cannot fill, in the host, and URLs with credentials", async () => {
    const problems = problemsOf(
      await withTools({
        tools: [
          lookupOrder({ name: "a" }, { url: "https://orders.shop.example/v1/orders/{order_id}" }),
          lookupOrder({ name: "b", input_schema: { type: "object", properties: { orderId: { type: "string" } } } }),
          lookupOrder(
            { name: "c", input_schema: { type: "object", properties: { shop: { type: "string" } }, required: ["shop"] } },
            { url: "https://{shop}.example/orders" },
          ),
          lookupOrder({ name: "d" }, { url: "https://user:pass@orders.shop.example/v1/orders/{orderId}" }),
          lookupOrder({ name: "e" }, { url: "https://orders.shop.example/v1/{orderId}/{" }),
          lookupOrder({ name: "f" }, { url: "https://orders.shop.example/v1/../admin/{orderId}" }),
        ],
      }),
    );
    expect(problems).toEqual([
      `${WHERE}: tool "a" request.url: placeholder {order_id} is not a property of input_schema`,
      `${WHERE}: tool "b" request.url: placeholder {orderId} must be in input_schema's "required": the URL cannot be made without it`,
      `${WHERE}: tool "c" request.url: must not have a placeholder in its host or port: input may only fill the path or the query`,
      `${WHERE}: tool "d" request.url: must not carry credentials: put them in a header, from an environment variable`,
      `${WHERE}: tool "e" request.url: has an unmatched "{" or "}"`,
      `${WHERE}: tool "f" request.url: must not have a "." or ".." path segment`,
    ]);
  });

  it("names a URL whose host is plainly private, unless the tool allows the private network", async () => {
    const problems = problemsOf(
      await withTools({
        tools: [
          lookupOrder({ name: "a" }, { url: "http://127.0.0.1:8080/orders/{orderId}" }),
          lookupOrder({ name: "b" }, { url: "http://169.254.169.254/latest/{orderId}" }),
          lookupOrder({ name: "c" }, { url: "http://[::1]/orders/{orderId}" }),
          lookupOrder({ name: "d" }, { url: "http://localhost/orders/{orderId}" }),
          lookupOrder({ name: "e", allowPrivateNetwork: true }, { url: "http://10.0.0.7/orders/{orderId}" }),
          lookupOrder({ name: "f" }, { url: "https://8.8.8.8/orders/{orderId}" }),
        ],
      }),
    );
    const said = (host: string) =>
      `${host} is a loopback, private or otherwise non-public address, which calls are refused; say "allowPrivateNetwork": true if that is meant`;
    expect(problems).toEqual([
      `${WHERE}: tool "a" request.url: ${said("127.0.0.1")}`,
      `${WHERE}: tool "b" request.url: ${said("169.254.169.254")}`,
      `${WHERE}: tool "c" request.url: ${said("[::1]")}`,
      `${WHERE}: tool "d" request.url: ${said("localhost")}`,
    ]);
  });

  it("names a header's missing environment variable and never shows a value", async () => {
    const problems = problemsOf(
      await withTools(
        {
          tools: [
            lookupOrder({ name: "a" }, { headers: { Authorization: "Bearer ${ORDERS_API_TOKEN}", "X-Shop": "${SHOP_ID}-${SHOP_REGION}" } }),
            lookupOrder({ name: "b" }, { headers: { "X-Key": "${ORDERS_API_TOKEN", "Idempotency-Key": "fixed", "bad header": "literal-secret-value" } }),
            lookupOrder({ name: "c" }, { headers: { Authorization: "Bearer ${MULTILINE_TOKEN}", "X-Count": 3 } }),
          ],
        },
        { ORDERS_API_TOKEN: TOKEN, SHOP_REGION: "", MULTILINE_TOKEN: "line-one\r\nX-Injected: yes" },
      ),
    );
    expect(problems).toEqual([
      `${WHERE}: tool "a" request.headers.X-Shop: environment variable SHOP_ID is not set`,
      `${WHERE}: tool "a" request.headers.X-Shop: environment variable SHOP_REGION is not set`,
      `${WHERE}: tool "b" request.headers.X-Key: has a "\${" without its closing "}"`,
      `${WHERE}: tool "b" request.headers.Idempotency-Key: is set by the call itself and cannot be configured`,
      `${WHERE}: tool "b" request.headers.bad header: is not a valid header name`,
      `${WHERE}: tool "c" request.headers.X-Count: Invalid input: expected string, received number`,
      `${WHERE}: tool "c" request.headers.Authorization: environment variable MULTILINE_TOKEN holds a line break or another character no header may carry`,
    ]);
    const said = problems.join("\n");
    for (const secret of [TOKEN, "literal-secret-value", "line-one", "X-Injected"]) expect(said).not.toContain(secret);
  });
});

describe("a tool's secrets", () => {
  it("never show in JSON, a log line, util.inspect or a structured clone of the config or its tools", async () => {
    const config = loadSettings(
      await withTools({ tools: [lookupOrder(), lookupOrder({ name: "literal" }, { headers: { "X-Api-Key": "literal-secret-value" } })] }),
    );
    const tools = config.businessTools.get(SHOP)!;
    expect(tools[1]?.headersToSend()).toEqual({ "X-Api-Key": "literal-secret-value" });

    const { lines, destination } = logLines();
    const logger = createLogger({ level: "info", destination });
    logger.info({ config, businessTools: [...config.businessTools], tools, tool: tools[0] }, "everything");
    // JSON (and so pino) writes a Map as {}: the tools show only where the numbers are listed.
    expect(JSON.stringify(config)).not.toContain(TOKEN);
    const shown = [
      lines.join(""),
      JSON.stringify([...config.businessTools]),
      inspect(config, { depth: Number.POSITIVE_INFINITY, showHidden: true }),
      inspect(tools, { depth: Number.POSITIVE_INFINITY, showHidden: true }),
      JSON.stringify(deserialize(serialize([...config.businessTools]))),
      inspect(deserialize(serialize(config)), { depth: Number.POSITIVE_INFINITY }),
    ];
    for (const text of shown) {
      expect(text).toContain("lookup_order"); // the tool is there...
      expect(text).not.toContain(TOKEN); // ...without its secrets
      expect(text).not.toContain("literal-secret-value");
    }
    expect(JSON.parse(JSON.stringify(tools[0]))).toMatchObject({ request: { headerNames: ["Authorization"] } });
  });
});

describe("the worker child of npm start", () => {
  it("gets each tool whole: its secrets and its input check cross the IPC channel, which keeps no class", async () => {
    const config = loadSettings(await withTools({ tools: [lookupOrder()] }));
    const logger = createLogger({ level: "silent" });
    // The parent's end, with a stand-in child that keeps what it is sent.
    const sent: ToWorkerChild[] = [];
    const child = Object.assign(new EventEmitter(), {
      pid: 1000,
      connected: true,
      send: (message: ToWorkerChild, callback?: (error: Error | null) => void) => {
        sent.push(message);
        callback?.(null);
        return true;
      },
      kill: () => true,
    });
    const parent = superviseWorkerChild({ fork: () => child as unknown as ChildProcess, config, logger, metrics: createMetrics() });
    parent.start();
    // The child's end, given the message as the channel's "advanced" serialisation delivers it.
    const channel = new EventEmitter();
    let received: typeof config | undefined;
    answerParent(channel, {
      start(childConfig) {
        received = childConfig;
        return { metrics: createMetrics(), logger };
      },
      drain() {},
    });
    channel.emit("message", deserialize(serialize(sent[0])));

    const tool = received?.businessTools.get(SHOP)?.[0];
    expect(tool).toBeInstanceOf(BusinessTool);
    expect(tool?.headersToSend()).toEqual({ Authorization: `Bearer ${TOKEN}` });
    expect(tool?.inputProblem({ orderId: 17 })).toBe("input/orderId must be string");
    expect(tool?.inputProblem({ orderId: "A-17" })).toBeUndefined();
    expect(Object.isFrozen(received)).toBe(true);
    child.emit("exit", 0, null); // gone, so stop() has no child to drain and cancels the restart
    await parent.stop();
  });
});

describe("start-up", () => {
  it("warns of each tool allowed onto private networks, naming the number, the tool and the host, and never a secret", async () => {
    const env = await withTools({
      tools: [lookupOrder(), lookupOrder({ name: "stock", allowPrivateNetwork: true }, { url: "http://inventory.internal:8080/stock/{orderId}" })],
    });
    const web = runEntryPoint(["web"], { ...env, LOG_LEVEL: "info", PORT: String(await freePort()), QUEUE_PREFIX: `{tools-${process.pid}}` });
    try {
      const warning = await web.event("tools.private_network_allowed");
      expect(warning).toMatchObject({ level: 40, number: SHOP, tool: "stock", host: "inventory.internal:8080" });
      expect(web.events("tools.private_network_allowed")).toHaveLength(1);
    } finally {
      web.child.kill("SIGTERM");
      await web.exited;
    }
    expect(web.output).not.toContain(TOKEN);
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
