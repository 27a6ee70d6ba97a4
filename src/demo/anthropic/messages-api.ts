import type { ServerResponse } from "node:http";
import { LocalServer, sendJson } from "../local-server.ts";

/**
 * Anthropic's Messages API (`POST /v1/messages`) over HTTP, as the real Anthropic SDK reaches
 * it through ANTHROPIC_BASE_URL: the demo's offline responder and the tests' fake Claude both
 * speak it, and differ only in what they answer. Answers carry Anthropic's message shape,
 * its error bodies and token usage, prompt caching included.
 */

export interface ClaudeRequest {
  model: string;
  system: unknown;
  messages: { role: string; content: unknown }[];
}

/** A message with this text, or an error of this HTTP status (Anthropic's error body unless given). */
export type ClaudeAnswer = { status: number; body?: unknown } | { text: string };

/** One request as it arrives: the path it came on, and a promise settled once it has been answered. */
export interface ClaudeArrival {
  path: string;
  request: ClaudeRequest;
  answered: Promise<void>;
}

/** Prompt prefixes remembered for the cache accounting; a long demo run forgets the oldest. */
const MAX_CACHED_PREFIXES = 2000;

export abstract class MessagesApiServer {
  inFlight = 0;
  maxInFlight = 0;
  /** Latency of every answer, to model Claude's seconds-long generations. */
  latencyMs = 0;
  /**
   * Told of every request as it arrives. Processes given their own base URL path (say
   * `${url}/w1`) can be told apart by it: the chaos runner uses this to find which worker
   * process is waiting on Claude.
   */
  onRequest: ((arrival: ClaudeArrival) => void) | undefined;
  private readonly server: LocalServer;
  private readonly cachedPrefixes = new Set<string>();
  private counter = 0;

  constructor(onError?: (error: unknown) => void) {
    this.server = new LocalServer(onError);
  }

  /** What to answer `request`; called once per request, after its arrival was announced. */
  protected abstract respond(request: ClaudeRequest, path: string): ClaudeAnswer | Promise<ClaudeAnswer>;

  /** Called with every request as it arrives, before onRequest (the fake records them here). */
  protected received(_request: ClaudeRequest): void {}

  get url(): string {
    return this.server.url;
  }

  async start(): Promise<this> {
    await this.server.start((req, body, res) => this.handle(req.url ?? "", body, res));
    return this;
  }

  stop(): Promise<void> {
    return this.server.stop();
  }

  /**
   * Token usage the way Anthropic reports it, at ~4 characters a token. The prompt up to its
   * last cache_control breakpoint is cached; a later prompt that starts with a cached prefix
   * reads that much back, writes the rest of its own prefix, and pays plain input after it.
   */
  private usage(request: ClaudeRequest) {
    const blocks = [...blocksOf(request.system), ...request.messages.flatMap((m) => blocksOf(m.content))];
    const tokens = (bs: Block[]) => Math.ceil(bs.reduce((n, b) => n + b.text.length, 0) / 4);
    const key = (bs: Block[]) => bs.map((b) => b.text).join("\u0000");
    const breakpoint = blocks.findLastIndex((b) => b.cache_control);
    let read = 0; // blocks read back from the cache
    for (let i = breakpoint; i >= 0 && read === 0; i--) if (this.cachedPrefixes.has(key(blocks.slice(0, i + 1)))) read = i + 1;
    if (this.cachedPrefixes.size > MAX_CACHED_PREFIXES) this.cachedPrefixes.clear();
    for (let i = 0; i <= breakpoint; i++) if (blocks[i]!.cache_control) this.cachedPrefixes.add(key(blocks.slice(0, i + 1)));
    return {
      input_tokens: tokens(blocks.slice(breakpoint + 1)),
      cache_read_input_tokens: tokens(blocks.slice(0, read)),
      cache_creation_input_tokens: tokens(blocks.slice(read, breakpoint + 1)),
      output_tokens: 20,
    };
  }

  private async handle(path: string, raw: Buffer, res: ServerResponse): Promise<void> {
    if (!path.split("?")[0]!.endsWith("/v1/messages")) return sendJson(res, 404, anthropicError(404), { "request-id": "req_sim" });
    let request: ClaudeRequest;
    try {
      request = JSON.parse(raw.toString("utf8")) as ClaudeRequest;
    } catch {
      return sendJson(res, 400, anthropicError(400), { "request-id": "req_sim" });
    }
    this.received(request);
    let answered!: () => void;
    const settled = new Promise<void>((resolve) => (answered = resolve));
    this.onRequest?.({ path, request, answered: settled });
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.latencyMs) await new Promise((r) => setTimeout(r, this.latencyMs));
      const answer = await this.respond(request, path);
      if ("status" in answer) {
        sendJson(res, answer.status, answer.body ?? anthropicError(answer.status), { "request-id": "req_sim" });
        return;
      }
      sendJson(
        res,
        200,
        {
          id: `msg_${++this.counter}`,
          type: "message",
          role: "assistant",
          model: request.model,
          content: [{ type: "text", text: answer.text }],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage: this.usage(request),
        },
        { "request-id": "req_sim" },
      );
    } finally {
      this.inFlight--;
      answered();
    }
  }
}

export interface Block {
  type?: string;
  text: string;
  cache_control?: unknown;
}

/** The text blocks of a system prompt or a message's content (a string is one block). */
export function blocksOf(content: unknown): Block[] {
  if (typeof content === "string") return [{ text: content }];
  return Array.isArray(content) ? (content as Block[]).filter((b) => typeof b.text === "string") : [];
}

/** Anthropic's error body for an HTTP status. */
export function anthropicError(status: number): unknown {
  const type =
    status === 529
      ? "overloaded_error"
      : status === 429
        ? "rate_limit_error"
        : status === 404
          ? "not_found_error"
          : status >= 500
            ? "api_error"
            : "invalid_request_error";
  return { type: "error", error: { type, message: `simulated ${type}` } };
}
