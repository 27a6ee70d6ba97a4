import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

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
  private server: Server | undefined;
  inFlight = 0;
  maxInFlight = 0;
  /** Latency of every answer, to model Claude's seconds-long generations. */
  latencyMs = 0;
  url = "";
  reply: (request: ClaudeRequest) => string = (request) => `Reply #${this.requests.indexOf(request) + 1}`;

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
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

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const request = JSON.parse(Buffer.concat(chunks).toString("utf8")) as ClaudeRequest;
    this.requests.push(request);
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.latencyMs) await new Promise((r) => setTimeout(r, this.latencyMs));
      const scripted = this.script.shift();
      if (scripted && "status" in scripted) {
        res.writeHead(scripted.status, { "content-type": "application/json", "request-id": "req_fake" });
        res.end(JSON.stringify(scripted.body ?? anthropicError(scripted.status)));
        return;
      }
      const text = scripted?.text ?? this.reply(request);
      res.writeHead(200, { "content-type": "application/json", "request-id": "req_fake" });
      res.end(
        JSON.stringify({
          id: `msg_${this.requests.length}`,
          type: "message",
          role: "assistant",
          model: request.model,
          content: [{ type: "text", text }],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage: { input_tokens: 100, output_tokens: 20 },
        }),
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
