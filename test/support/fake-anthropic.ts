import type { ServerResponse } from "node:http";
import { LocalServer, sendJson } from "./local-server.ts";

/**
 * A local stand-in for Anthropic's Messages API. The real Anthropic SDK calls it through
 * ANTHROPIC_BASE_URL. It records every request and how many were in flight at once.
 */

export interface ClaudeRequest {
  model: string;
  system: unknown;
  messages: { role: string; content: unknown }[];
}

export type ClaudeAnswer = { status: number; body?: unknown } | { text: string };

/** One request as it arrives: the path it came on, and a promise settled once it has been answered. */
export interface ClaudeArrival {
  path: string;
  request: ClaudeRequest;
  answered: Promise<void>;
}

export class FakeAnthropic {
  readonly requests: ClaudeRequest[] = [];
  private readonly script: ClaudeAnswer[] = [];
  private readonly server = new LocalServer();
  inFlight = 0;
  maxInFlight = 0;
  /** Latency of every answer, to model Claude's seconds-long generations. */
  latencyMs = 0;
  reply: (request: ClaudeRequest) => string = (request) => `Reply #${this.requests.indexOf(request) + 1}`;
  /**
   * Told of every request as it arrives. Processes given their own base URL path (say
   * `${url}/w1`) can be told apart by it: the chaos runner uses this to find which worker
   * process is waiting on Claude.
   */
  onRequest: ((arrival: ClaudeArrival) => void) | undefined;

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

  answer(...answers: ClaudeAnswer[]): void {
    this.script.push(...answers);
  }

  /** The text of every user turn the model was shown in request `i`. */
  userText(i: number): string {
    const request = this.requests[i];
    if (!request) return "";
    return request.messages
      .filter((m) => m.role === "user")
      .flatMap((m) => blocksOf(m.content).map((b) => b.text))
      .join("\n");
  }

  private readonly cachedPrefixes = new Set<string>();

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
    for (let i = 0; i <= breakpoint; i++) if (blocks[i]!.cache_control) this.cachedPrefixes.add(key(blocks.slice(0, i + 1)));
    return {
      input_tokens: tokens(blocks.slice(breakpoint + 1)),
      cache_read_input_tokens: tokens(blocks.slice(0, read)),
      cache_creation_input_tokens: tokens(blocks.slice(read, breakpoint + 1)),
      output_tokens: 20,
    };
  }

  private async handle(path: string, raw: Buffer, res: ServerResponse): Promise<void> {
    const request = JSON.parse(raw.toString("utf8")) as ClaudeRequest;
    this.requests.push(request);
    let answered!: () => void;
    const settled = new Promise<void>((resolve) => (answered = resolve));
    this.onRequest?.({ path, request, answered: settled });
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.latencyMs) await new Promise((r) => setTimeout(r, this.latencyMs));
      const scripted = this.script.shift();
      if (scripted && "status" in scripted) {
        sendJson(res, scripted.status, scripted.body ?? anthropicError(scripted.status), { "request-id": "req_fake" });
        return;
      }
      const text = scripted?.text ?? this.reply(request);
      sendJson(
        res,
        200,
        {
          id: `msg_${this.requests.length}`,
          type: "message",
          role: "assistant",
          model: request.model,
          content: [{ type: "text", text }],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage: this.usage(request),
        },
        { "request-id": "req_fake" },
      );
    } finally {
      this.inFlight--;
      answered();
    }
  }
}

interface Block {
  text: string;
  cache_control?: unknown;
}

function blocksOf(content: unknown): Block[] {
  if (typeof content === "string") return [{ text: content }];
  return Array.isArray(content) ? (content as Block[]).filter((b) => typeof b.text === "string") : [];
}

export function anthropicError(status: number): unknown {
  const type =
    status === 529 ? "overloaded_error" : status === 429 ? "rate_limit_error" : status >= 500 ? "api_error" : "invalid_request_error";
  return { type: "error", error: { type, message: `fake ${type}` } };
}
