import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { z } from "zod";
import { isPublicAddress } from "./addresses.ts";
import { BusinessTool, compileInputSchema, type InputSchema, TOOL_METHODS } from "./business-tool.ts";
import { HANDOFF_TOOL_NAME } from "./definitions.ts";
import { placeholdersOf, templateProblems } from "./url-template.ts";

/**
 * A business number's tools file (`toolsFile` in PHONE_NUMBERS_FILE):
 *
 *   { "tools": [ { "name": "lookup_order", "description": "...",
 *                  "input_schema": { "type": "object", "properties": { "orderId": { "type": "string" } }, "required": ["orderId"] },
 *                  "request": { "method": "GET", "url": "https://shop.example/orders/{orderId}",
 *                               "headers": { "Authorization": "Bearer ${ORDERS_API_TOKEN}" }, "timeoutMs": 5000 },
 *                  "allowPrivateNetwork": false } ] }
 *
 * Read once at start-up; every problem in it is reported at once, each naming the number, the
 * tool and the field, and never the value of a header or of an environment variable (law 10).
 */

export const DEFAULT_TOOL_TIMEOUT_MS = 10_000;
const MIN_TOOL_TIMEOUT_MS = 100;
const MAX_TOOL_TIMEOUT_MS = 120_000;

/** Anthropic's rule for a tool's name. */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** What undici refuses in a header value (and what would split a request). */
const BAD_HEADER_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const ENV_REFERENCE = /\$\{([^}]*)\}/g;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Headers the call sets itself, or that would change how the request is framed. */
const OURS = new Set([
  "idempotency-key",
  "content-type",
  "content-length",
  "transfer-encoding",
  "host",
  "connection",
  "keep-alive",
  "upgrade",
  "expect",
  "te",
  "trailer",
]);

/** Zod's words for a missing field ("expected string, received undefined") say less than this. */
const parseOptions = { error: (issue: z.core.$ZodRawIssue) => (issue.code === "invalid_type" && issue.input === undefined ? "is required" : undefined) };

const fileSchema = z.object({ tools: z.array(z.unknown()) }).strict();
const toolSchema = z
  .object({
    name: z.string(),
    description: z.string().trim().min(1, { error: "must say what the tool does, for Claude" }),
    input_schema: z.record(z.string(), z.unknown()),
    request: z
      .object({
        method: z.enum(TOOL_METHODS),
        url: z.string(),
        headers: z.record(z.string(), z.string()).optional(),
        timeoutMs: z
          .number()
          .int()
          .min(MIN_TOOL_TIMEOUT_MS, { error: `must be from ${MIN_TOOL_TIMEOUT_MS} to ${MAX_TOOL_TIMEOUT_MS}` })
          .max(MAX_TOOL_TIMEOUT_MS, { error: `must be from ${MIN_TOOL_TIMEOUT_MS} to ${MAX_TOOL_TIMEOUT_MS}` })
          .optional(),
      })
      .strict(),
    allowPrivateNetwork: z.boolean().optional(),
  })
  .strict();

/**
 * The tools in `path`, environment variables in their headers resolved from `env`; undefined
 * when there is any problem, each pushed to `problems` after `where` (which names the number).
 */
export function loadToolsFile(path: string, where: string, env: Readonly<Record<string, string | undefined>>, problems: string[]): BusinessTool[] | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    // V8 quotes the text around a syntax error, and this file may hold a literal header value.
    const message = (error as Error).message.replace(/, (\.\.\.)?".*$/s, "");
    problems.push(`${where} cannot be read as JSON: ${message}`);
    return undefined;
  }
  const file = fileSchema.safeParse(raw, parseOptions);
  if (!file.success) {
    for (const issue of file.error.issues) for (const [field, message] of described(issue, "the file")) problems.push(`${where}: ${field}: ${message}`);
    return undefined;
  }
  const before = problems.length;
  const tools: BusinessTool[] = [];
  const names = new Set<string>();
  file.data.tools.forEach((entry, index) => {
    const name = (entry as { name?: unknown } | null)?.name;
    const label = typeof name === "string" && name !== "" ? `tool "${name}"` : `tools[${index}]`;
    const toolProblems: string[] = [];
    const report = (field: string, message: string) => toolProblems.push(`${where}: ${label} ${field}: ${message}`);
    const tool = checkTool(entry, env, report);
    if (typeof name === "string" && TOOL_NAME.test(name)) {
      if (names.has(name)) report("name", "is used by another tool in this file");
      names.add(name);
    }
    problems.push(...toolProblems);
    if (tool && toolProblems.length === 0) tools.push(tool);
  });
  return problems.length === before ? tools : undefined;
}

/** One tool, or undefined after reporting every problem it has. */
function checkTool(
  entry: unknown,
  env: Readonly<Record<string, string | undefined>>,
  report: (field: string, message: string) => void,
): BusinessTool | undefined {
  const shape = toolSchema.safeParse(entry, parseOptions);
  if (!shape.success) for (const issue of shape.error.issues) for (const [field, message] of described(issue, "the tool")) report(field, message);
  // The checks below each look at what they can of the raw entry, so one wrong field does not
  // hide another's problem.
  const raw = (isRecord(entry) ? entry : {}) as Record<string, unknown>;
  const request = isRecord(raw.request) ? raw.request : {};

  if (typeof raw.name === "string") {
    if (!TOOL_NAME.test(raw.name)) report("name", "must be 1 to 64 letters, digits, _ or - (Anthropic's rule for tool names)");
    else if (raw.name === HANDOFF_TOOL_NAME) report("name", `${HANDOFF_TOOL_NAME} is built in: choose another name`);
  }

  let validSchema = false;
  if (isRecord(raw.input_schema)) {
    const compiled = compileInputSchema(raw.input_schema);
    if ("problem" in compiled) report("input_schema", compiled.problem);
    else validSchema = true;
  }

  if (typeof request.url === "string") {
    for (const problem of templateProblems(request.url)) report("request.url", problem);
    if (isRecord(raw.input_schema)) for (const problem of placeholderProblems(request.url, raw.input_schema)) report("request.url", problem);
    const host = privateHost(request.url);
    if (host && raw.allowPrivateNetwork !== true) {
      report(
        "request.url",
        `${host} is a loopback, private or otherwise non-public address, which calls are refused; say "allowPrivateNetwork": true if that is meant`,
      );
    }
  }

  // No headers at all is a public endpoint: a tool like any other. Headers of another shape are named by the shape's check.
  const headers = request.headers === undefined ? {} : isRecord(request.headers) ? resolveHeaders(request.headers, env, report) : undefined;

  if (!shape.success || !validSchema || headers === undefined) return undefined;
  const tool = shape.data;
  return new BusinessTool({
    name: tool.name,
    description: tool.description,
    inputSchema: tool.input_schema as InputSchema,
    request: { method: tool.request.method, url: tool.request.url, headers, timeoutMs: tool.request.timeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS },
    allowPrivateNetwork: tool.allowPrivateNetwork ?? false,
  });
}

/** The URL's host when it is plainly not public (an address, or localhost): every call would be refused, so it is said at start-up. */
function privateHost(url: string): string | undefined {
  let hostname: string;
  try {
    hostname = new URL(url.replace(/\{[^{}]*\}/g, "x")).hostname;
  } catch {
    return undefined; // reported by templateProblems
  }
  const address = hostname.replace(/^\[(.*)\]$/, "$1");
  if (isIP(address) !== 0) return isPublicAddress(address) ? undefined : hostname;
  return hostname === "localhost" || hostname.endsWith(".localhost") ? hostname : undefined;
}

/** Each placeholder must name a required property: else the URL could not be filled. */
function placeholderProblems(url: string, schema: Record<string, unknown>): string[] {
  const properties = isRecord(schema.properties) ? schema.properties : {};
  const required = Array.isArray(schema.required) ? schema.required : [];
  const problems: string[] = [];
  for (const name of placeholdersOf(url)) {
    if (name.trim() === "") continue; // reported by templateProblems
    if (!Object.hasOwn(properties, name)) problems.push(`placeholder {${name}} is not a property of input_schema`);
    else if (!required.includes(name)) problems.push(`placeholder {${name}} must be in input_schema's "required": the URL cannot be made without it`);
  }
  return problems;
}

/**
 * The headers as they are sent, each `${NAME}` replaced by that environment variable's value;
 * problems name the header and the variable, never a value. Missing headers are `{}`.
 */
function resolveHeaders(
  headers: Record<string, unknown>,
  env: Readonly<Record<string, string | undefined>>,
  report: (field: string, message: string) => void,
): Record<string, string> | undefined {
  const resolved: Record<string, string> = {};
  const seen = new Set<string>();
  let ok = true;
  let headerOk = true;
  const fail = (field: string, message: string) => {
    ok = false;
    headerOk = false;
    report(field, message);
  };
  for (const [name, value] of Object.entries(headers)) {
    const field = `request.headers.${name}`;
    headerOk = true;
    if (!HEADER_NAME.test(name)) fail(field, "is not a valid header name");
    else if (OURS.has(name.toLowerCase())) fail(field, "is set by the call itself and cannot be configured");
    else if (seen.has(name.toLowerCase())) fail(field, "is given twice (header names ignore case)");
    seen.add(name.toLowerCase());
    if (typeof value !== "string") continue; // reported by the shape's check
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the file's own syntax, quoted back to its author.
    if (value.replace(ENV_REFERENCE, "").includes("${")) fail(field, 'has a "${" without its closing "}"');
    const text = value.replace(ENV_REFERENCE, (_match, variable: string) => {
      if (!ENV_NAME.test(variable)) {
        fail(field, `\${${variable}} is not an environment variable's name`);
        return "";
      }
      const set = env[variable];
      if (set === undefined || set === "") {
        fail(field, `environment variable ${variable} is not set`);
        return "";
      }
      if (BAD_HEADER_VALUE.test(set)) fail(field, `environment variable ${variable} holds a line break or another character no header may carry`);
      return set;
    });
    if (headerOk && BAD_HEADER_VALUE.test(text)) fail(field, "holds a line break or another character no header may carry");
    resolved[name] = text;
  }
  return ok ? resolved : undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** An issue as [field, message] pairs, fields spelt as the file spells them (`request.timeoutMs`); one per unknown field. */
function described(issue: z.core.$ZodIssue, whole: string): [string, string][] {
  const path = issue.path.map(String);
  if (issue.code === "unrecognized_keys") return issue.keys.map((key) => [[...path, key].join("."), "is not a known field"]);
  return [[path.join(".") || whole, issue.message]];
}
