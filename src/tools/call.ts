import type { LookupAddress } from "node:dns";
import { lookup } from "node:dns/promises";
import type { LookupFunction } from "node:net";
import { Agent, buildConnector, type Dispatcher, request } from "undici";
import type { Clock } from "../clock.ts";
import { isPublicAddress } from "./addresses.ts";
import { type BusinessTool, METHODS_WITH_BODY } from "./business-tool.ts";
import { fillTemplate } from "./url-template.ts";

/**
 * One call of a business's tool, as Claude asked for it (tool_use), and what Claude is told
 * (tool_result). Never throws for anything the business, the network or the input does: every
 * way a call ends is a ToolOutcome, and `maybeActed` says whether the business may have acted
 * without our knowing its answer. Logs nothing; the outcome carries no header (law 10).
 */

export interface ToolOutcome {
  /** Claude's tool_result `is_error`. */
  readonly isError: boolean;
  /** What Claude reads: the answer's body (cut to maxAnswerBytes), or what went wrong. */
  readonly text: string;
  /** The HTTP status, when an answer came. */
  readonly status?: number;
  readonly ms: number;
  /**
   * No answer from the business itself was read, though the request may have reached it: a
   * timeout or a connection lost after it was made, or a proxy's 502/503/504 page (law 5's rule
   * for Meta, here for the business). Repeat the call with the same Idempotency-Key (law 12)
   * until the business answers. False when the business answered (whatever its status), and
   * when nothing was sent: a refused input, a refused address, a connection never made.
   */
  readonly unsure: boolean;
  /** Unsure, and the method acts (not GET or HEAD): the business may have done it. */
  readonly maybeActed: boolean;
  /** What was asked for, to store and show: the URL filled, never the headers. */
  readonly request: { readonly method: string; readonly url: string };
}

export interface CallOptions {
  /** idempotencyKeyFor(phoneNumberId, tool_use.id): the same on every repetition of this call. */
  readonly idempotencyKey: string;
  /** The answer is cut to this many bytes (Config.tools.answerMaxBytes). */
  readonly maxAnswerBytes: number;
  /** The reply's own deadline for its tool calls (TOOL_MAX_MS); the tool's timeoutMs applies as well. */
  readonly signal?: AbortSignal;
  /** What the call's time is measured on. */
  readonly clock: Clock;
}

export async function callTool(tool: BusinessTool, input: unknown, options: CallOptions): Promise<ToolOutcome> {
  const started = options.clock.monotonicMs();
  const { method, timeoutMs } = tool.request;
  let url = tool.request.url;
  const outcome = (ending: Omit<ToolOutcome, "ms" | "request" | "maybeActed">): ToolOutcome => ({
    ...ending,
    maybeActed: ending.unsure && !READ_ONLY.has(method),
    ms: Math.round(options.clock.monotonicMs() - started),
    request: { method, url },
  });
  const notSent = (why: string) => outcome({ isError: true, text: `Not sent: ${why}`, unsure: false });

  const inputProblem = tool.inputProblem(input);
  if (inputProblem) return notSent(`the input does not fit ${tool.name}'s input_schema: ${inputProblem}`);
  // The schema's "type": "object" has just held.
  const filled = fillTemplate(url, input as Record<string, unknown>);
  if ("problem" in filled) return notSent(filled.problem);
  url = filled.url;
  const target = new URL(url);

  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = options.signal ? AbortSignal.any([timeout, options.signal]) : timeout;
  const stopped = () => (timeout.aborted ? `${tool.name} did not answer within ${timeoutMs} ms` : "the reply's time for tool calls ran out");
  if (signal.aborted) return notSent(stopped());

  const hostname = target.hostname.replace(/^\[(.*)\]$/, "$1"); // an IPv6 address without its URL brackets
  let addresses: LookupAddress[];
  try {
    addresses = await resolve(hostname, signal);
  } catch (error) {
    return notSent(signal.aborted ? stopped() : `${target.hostname} could not be resolved (${codeOf(error)})`);
  }
  const refused = tool.allowPrivateNetwork ? undefined : addresses.find((a) => !isPublicAddress(a.address));
  if (refused) {
    const what = hostname === refused.address ? refused.address : `${target.hostname} is at ${refused.address}, which`;
    return notSent(`${what} is a loopback, private or otherwise non-public address; only a tool with allowPrivateNetwork may call one`);
  }

  const connection = pinnedDispatcher(addresses, timeoutMs);
  try {
    const headers: Record<string, string> = { ...tool.headersToSend(), "idempotency-key": options.idempotencyKey };
    let body: string | undefined;
    if (METHODS_WITH_BODY.has(method)) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(input);
    }
    let response: Dispatcher.ResponseData;
    try {
      response = await request(url, { method, headers, body, signal, dispatcher: connection.agent });
    } catch (error) {
      const made = connection.made();
      let failed: string;
      if (made) failed = signal.aborted ? stopped() : `the connection to ${target.host} broke off before an answer`;
      else if (timeout.aborted) failed = `Not sent: could not connect to ${target.host} within ${timeoutMs} ms`;
      else failed = signal.aborted ? `Not sent: ${stopped()} before a connection was made` : `Not sent: could not connect to ${target.host}`;
      return outcome({ isError: true, text: `${failed} (${codeOf(error)})`, unsure: made });
    }
    const status = response.statusCode;
    let answer: string;
    try {
      answer = await readAtMost(response.body, options.maxAnswerBytes);
    } catch (error) {
      const failed = signal.aborted ? stopped() : `the answer (HTTP ${status}) broke off before it was read`;
      return outcome({ isError: true, text: `${failed} (${codeOf(error)})`, status, unsure: true });
    }
    if (status >= 200 && status < 300) return outcome({ isError: false, text: answer === "" ? `(HTTP ${status}, no content)` : answer, status, unsure: false });
    // A gateway's page says the business was not reached or did not answer in time, not that it refused.
    const unsure = GATEWAY_STATUSES.has(status) && !isJson(answer);
    return outcome({ isError: true, text: `HTTP ${status}: ${answer}`, status, unsure });
  } finally {
    await connection.agent.destroy();
  }
}

/** Methods that only read: repeating them is harmless, and an unsure answer cannot have acted. */
const READ_ONLY = new Set(["GET", "HEAD"]);
/** What a proxy or load balancer in front of the business answers when the business did not. */
const GATEWAY_STATUSES = new Set([502, 503, 504]);

/** The business's own error bodies are JSON; a proxy's page is HTML or plain text. */
function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** Every address of the host, as the connection would find them; abandoned (not cancelled: it cannot be) when the signal fires. */
async function resolve(hostname: string, signal: AbortSignal): Promise<LookupAddress[]> {
  let onAbort = () => {};
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([lookup(hostname, { all: true, order: "verbatim" }), aborted]);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

/**
 * A dispatcher for one call whose connections go to `addresses` only: those the guard checked.
 * Looking the name up again to connect would let a DNS answer that changed in between (DNS
 * rebinding) reach an address never checked. The URL's host still names the server, in the
 * Host header and TLS's SNI, so certificates are verified as for any request. It also tells
 * whether a connection was made, which is when the business may have the request.
 */
export function pinnedDispatcher(addresses: readonly LookupAddress[], connectTimeoutMs: number): { agent: Agent; made: () => boolean } {
  let made = false;
  const pinned: LookupFunction = (_hostname, options, callback) => {
    const family = options.family === "IPv4" ? 4 : options.family === "IPv6" ? 6 : (options.family ?? 0);
    const candidates = addresses.filter((a) => family === 0 || a.family === family);
    const first = candidates[0];
    if (!first) return callback(Object.assign(new Error(`no IPv${family} address`), { code: "ENOTFOUND" }), "");
    if (options.all) callback(null, candidates);
    else callback(null, first.address, first.family);
  };
  const connect = buildConnector({ timeout: connectTimeoutMs, lookup: pinned });
  const agent = new Agent({
    connect: (connectOptions, callback) =>
      connect(connectOptions, (...args) => {
        if (args[0] === null) made = true;
        callback(...args);
      }),
  });
  return { agent, made: () => made };
}

/** The body as text, cut after `maxBytes` bytes (at a character's boundary) with a note saying so. */
async function readAtMost(body: AsyncIterable<Buffer>, maxBytes: number): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  for await (const chunk of body) {
    const room = maxBytes - size;
    size += chunk.length;
    if (chunk.length > room) {
      // Leaving the loop ends the stream: the rest is never read. A character split by the cut
      // stays in the streaming decoder, unsaid.
      return `${text}${decoder.decode(chunk.subarray(0, room), { stream: true })}\n[answer cut at ${maxBytes} bytes]`;
    }
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}

function codeOf(error: unknown): string {
  const failed = error as { code?: unknown; name?: unknown; cause?: { code?: unknown } };
  for (const code of [failed?.code, failed?.cause?.code, failed?.name]) if (typeof code === "string") return code;
  return "unknown error";
}
