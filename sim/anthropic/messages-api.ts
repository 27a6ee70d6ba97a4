import { randomBytes } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { LocalService, sendJson } from "../local-server.ts";
import { PromptCache } from "./prompt-cache.ts";

/**
 * Anthropic's Messages API (`POST /v1/messages`) over HTTP, as the real Anthropic SDK reaches
 * it through ANTHROPIC_BASE_URL: the demo's offline responder and the tests' fake Claude both
 * speak it, and differ only in what they answer. Answers carry Anthropic's message shape,
 * its error bodies and token usage, prompt caching included (by Anthropic's rules: prompt-cache.ts).
 */

export interface ClaudeRequest {
  model: string;
  system: unknown;
  messages: { role: string; content: unknown }[];
  tools?: unknown;
  tool_choice?: { type?: string; name?: string } | undefined;
  /** Automatic caching: a breakpoint on the prompt's last block. */
  cache_control?: unknown;
}

/** A block of a scripted answer, as Anthropic returns it (a tool call's id is made up when not given). */
export type AnswerBlock =
  | { type: "text"; text: string; citations?: unknown[] }
  | { type: "tool_use"; id?: string; name: string; input: unknown }
  | { type: "thinking"; thinking?: string; signature?: string };

export type StopReason = "end_turn" | "tool_use" | "max_tokens" | "refusal" | "pause_turn" | "model_context_window_exceeded";

/**
 * What to answer: a message with this text; a message of these blocks, with this stop reason
 * (default: "tool_use" when it calls a tool, else "end_turn"); or an error of this HTTP status
 * (Anthropic's error body unless given).
 */
export type ClaudeAnswer = { status: number; body?: unknown } | { text: string } | { content: AnswerBlock[]; stopReason?: StopReason };

/** One request as it arrives: the path it came on, and a promise settled once it has been answered. */
export interface ClaudeArrival {
  path: string;
  request: ClaudeRequest;
  answered: Promise<void>;
}

export abstract class MessagesApiServer extends LocalService {
  inFlight = 0;
  maxInFlight = 0;
  /** Latency of every answer, to model Claude's seconds-long generations. */
  latencyMs = 0;
  /** Set: each answer's latency is drawn from it instead (a benchmark's spread of generation times). */
  latencyDraw: (() => number) | undefined;
  /**
   * Told of every request as it arrives. Processes given their own base URL path (say
   * `${url}/w1`) can be told apart by it: the chaos runner uses this to find which worker
   * process is waiting on Claude.
   */
  onRequest: ((arrival: ClaudeArrival) => void) | undefined;
  /** The clock the prompt cache's TTLs run on; a test moves it to expire entries. */
  now: () => number;
  private readonly cache = new PromptCache(() => this.now());
  private counter = 0;

  constructor(options: { onError?: (error: unknown) => void; now?: () => number } = {}) {
    super(options.onError);
    this.now = options.now ?? Date.now;
  }

  /** What to answer `request`; called once per request, after its arrival was announced. */
  protected abstract respond(request: ClaudeRequest, path: string): ClaudeAnswer | Promise<ClaudeAnswer>;

  /** Called with every request as it arrives, before onRequest (the fake records them here). */
  protected received(_request: ClaudeRequest): void {}

  /**
   * Called with the usage of every answer, as Anthropic would bill it (the fake keeps them, for
   * the tests' hand counts); `read` false when the caller had hung up before it (a client's
   * timeout, a killed worker): billed, and never read.
   */
  protected billed(_usage: Record<string, unknown>, _read: boolean): void {}

  protected async handle(req: IncomingMessage, raw: Buffer, res: ServerResponse): Promise<void> {
    const path = req.url ?? "";
    if (!path.split("?")[0]!.endsWith("/v1/messages")) return sendJson(res, 404, anthropicError(404), { "request-id": "req_sim" });
    let request: ClaudeRequest;
    try {
      request = JSON.parse(raw.toString("utf8")) as ClaudeRequest;
    } catch {
      return sendJson(res, 400, anthropicError(400), { "request-id": "req_sim" });
    }
    this.received(request);
    // Refused before anyone is told of it, as Anthropic refuses it before any work.
    const refusal = this.cache.refusal(request);
    if (refusal) return sendJson(res, 400, { type: "error", error: { type: "invalid_request_error", message: refusal } }, { "request-id": "req_sim" });
    let answered!: () => void;
    const settled = new Promise<void>((resolve) => (answered = resolve));
    this.onRequest?.({ path, request, answered: settled });
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      const latencyMs = this.latencyDraw?.() ?? this.latencyMs;
      if (latencyMs) await new Promise((r) => setTimeout(r, latencyMs));
      const answer = await this.respond(request, path);
      if ("status" in answer) {
        sendJson(res, answer.status, answer.body ?? anthropicError(answer.status), { "request-id": "req_sim" });
        return;
      }
      const blocks: AnswerBlock[] = "text" in answer ? [{ type: "text", text: answer.text }] : answer.content;
      const stopReason = ("stopReason" in answer ? answer.stopReason : undefined) ?? (blocks.some((b) => b.type === "tool_use") ? "tool_use" : "end_turn");
      const usage = { ...this.cache.account(request), output_tokens: 20 };
      this.billed(usage, !(res.destroyed || !res.socket || res.socket.destroyed));
      sendJson(
        res,
        200,
        {
          id: `msg_${++this.counter}`,
          type: "message",
          role: "assistant",
          model: request.model,
          content: blocks.map(asReturned),
          stop_reason: stopReason,
          stop_sequence: null,
          usage,
        },
        { "request-id": "req_sim" },
      );
    } finally {
      this.inFlight--;
      answered();
    }
  }
}

/** A scripted block in the shape Anthropic's answers have (every field the SDK's types name). */
function asReturned(block: AnswerBlock): unknown {
  switch (block.type) {
    case "text":
      return { type: "text", text: block.text, citations: block.citations ?? null };
    case "tool_use":
      return {
        type: "tool_use",
        id: block.id ?? `toolu_01${randomBytes(11).toString("hex")}`,
        name: block.name,
        input: block.input,
        caller: { type: "direct" },
      };
    case "thinking":
      // Haiku 5.5 omits the thinking text by default: an empty field and a signature.
      return { type: "thinking", thinking: block.thinking ?? "", signature: block.signature ?? randomBytes(24).toString("base64") };
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
