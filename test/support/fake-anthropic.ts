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

export class FakeAnthropic {
  readonly requests: ClaudeRequest[] = [];
  private readonly script: ClaudeAnswer[] = [];
  private readonly server = new LocalServer();
  inFlight = 0;
  maxInFlight = 0;
  /** Latency of every answer, to model Claude's seconds-long generations. */
  latencyMs = 0;
  reply: (request: ClaudeRequest) => string = (request) => `Reply #${this.requests.indexOf(request) + 1}`;

  get url(): string {
    return this.server.url;
  }

  async start(): Promise<this> {
    await this.server.start((_req, body, res) => this.handle(body, res));
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
      .map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)))
      .join("\n");
  }

  private async handle(raw: Buffer, res: ServerResponse): Promise<void> {
    const request = JSON.parse(raw.toString("utf8")) as ClaudeRequest;
    this.requests.push(request);
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
          usage: { input_tokens: 100, output_tokens: 20 },
        },
        { "request-id": "req_fake" },
      );
    } finally {
      this.inFlight--;
    }
  }
}

export function anthropicError(status: number): unknown {
  const type =
    status === 529 ? "overloaded_error" : status === 429 ? "rate_limit_error" : status >= 500 ? "api_error" : "invalid_request_error";
  return { type: "error", error: { type, message: `fake ${type}` } };
}
