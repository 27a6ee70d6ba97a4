import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

/**
 * One of a business's own HTTP endpoints, offered to Claude as a client tool (issue 19). Made
 * at start-up from a number's tools file (src/tools/tools-file.ts), called by callTool
 * (src/tools/call.ts).
 *
 * Law 10: the request's headers carry the business's credentials, resolved from environment
 * variables at start-up. They live in a private field, so neither JSON.stringify, nor a pino
 * line, nor util.inspect, nor a structured clone of a tool (or of the Config holding it) ever
 * shows them; only the request itself reads them (headersToSend).
 */

export const TOOL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const;
export type ToolMethod = (typeof TOOL_METHODS)[number];

/** The methods whose request carries the input as its JSON body; the others carry it in the URL only. */
export const METHODS_WITH_BODY: ReadonlySet<ToolMethod> = new Set(["POST", "PUT", "PATCH"]);

/** A JSON Schema for a tool's input: an object, as Anthropic requires of `input_schema`. */
export type InputSchema = { readonly type: "object"; readonly [keyword: string]: unknown };

/** Everything a tool is made of, secrets included: what the tools file gives, resolved. */
export interface BusinessToolSpec {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: InputSchema;
  readonly request: {
    readonly method: ToolMethod;
    /** An absolute http(s) URL whose `{placeholders}` the input fills (src/tools/url-template.ts). */
    readonly url: string;
    /** Header values as they are sent, environment variables resolved. */
    readonly headers: Readonly<Record<string, string>>;
    readonly timeoutMs: number;
  };
  /** Whether the host may resolve to a loopback, private or link-local address (the SSRF guard is off). */
  readonly allowPrivateNetwork: boolean;
}

// Anthropic's tool schemas are JSON Schema 2020-12. Strict: a misspelt keyword ("propertys")
// or an unknown format is a start-up problem, not a constraint silently dropped. No schema is
// registered by its $id, so two tools (or two numbers sharing a file) may use the same one.
const ajv = addFormats.default(new Ajv2020({ strict: true, strictTypes: false, strictTuples: false, allErrors: true, addUsedSchema: false }));

/** The schema compiled, or why it cannot be (for start-up to report). */
export function compileInputSchema(schema: Readonly<Record<string, unknown>>): { validate: ValidateFunction } | { problem: string } {
  if (schema.type !== "object") return { problem: 'must have "type": "object"' };
  try {
    return { validate: ajv.compile(schema) };
  } catch (error) {
    return { problem: (error as Error).message };
  }
}

export class BusinessTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: InputSchema;
  /** The request as it may be shown: the headers by name only. */
  readonly request: { readonly method: ToolMethod; readonly url: string; readonly timeoutMs: number; readonly headerNames: readonly string[] };
  readonly allowPrivateNetwork: boolean;
  readonly #headers: Readonly<Record<string, string>>;
  readonly #validate: ValidateFunction;

  /** Throws when the input schema does not compile; the tools file's loader reports that first, with its context. */
  constructor(spec: BusinessToolSpec) {
    const compiled = compileInputSchema(spec.inputSchema);
    if ("problem" in compiled) throw new Error(`tool "${spec.name}" input_schema: ${compiled.problem}`);
    this.#validate = compiled.validate;
    this.#headers = Object.freeze({ ...spec.request.headers });
    this.name = spec.name;
    this.description = spec.description;
    this.inputSchema = spec.inputSchema;
    this.request = Object.freeze({
      method: spec.request.method,
      url: spec.request.url,
      timeoutMs: spec.request.timeoutMs,
      headerNames: Object.freeze(Object.keys(spec.request.headers)),
    });
    this.allowPrivateNetwork = spec.allowPrivateNetwork;
    Object.freeze(this);
  }

  /** Why `input` does not fit the input schema, in words Claude can act on; undefined when it fits. */
  inputProblem(input: unknown): string | undefined {
    if (this.#validate(input)) return undefined;
    return ajv.errorsText(this.#validate.errors, { dataVar: "input" });
  }

  /** The headers as they are sent, secrets included: for the request alone, never for a log line or a stored row. */
  headersToSend(): Record<string, string> {
    return { ...this.#headers };
  }

  /**
   * The spec this tool was made from, secrets included: for the worker child, which receives the
   * Config by structured cloning, which keeps neither a class nor its private fields
   * (src/config/portable.ts). Nothing else has a reason to call it.
   */
  toSpec(): BusinessToolSpec {
    const { method, url, timeoutMs } = this.request;
    return {
      name: this.name,
      description: this.description,
      inputSchema: this.inputSchema,
      request: { method, url, timeoutMs, headers: this.headersToSend() },
      allowPrivateNetwork: this.allowPrivateNetwork,
    };
  }
}
