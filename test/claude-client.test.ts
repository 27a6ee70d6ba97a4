import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ClaudeClient } from "../src/ai/claude.ts";
import { PermanentError, RetryableError } from "../src/errors.ts";
import { freePort } from "./support/ports.ts";

/**
 * The Claude client's answers and failures through the real Anthropic SDK over real HTTP: the
 * SDK makes its call with undici's request (src/ai/claude.ts), and must still see what fetch
 * would have shown it.
 */

let server: Server | undefined;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

async function anthropicAt(handle: (request: IncomingMessage, body: string, response: ServerResponse) => void): Promise<string> {
  server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => handle(request, body, response));
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const client = (baseUrl: string, timeoutMs = 2000) =>
  new ClaudeClient({ apiKey: "test-key", baseUrl, model: "claude-test", maxTokens: 100, timeoutMs, systemPrompt: "Be brief." });

const turns = [{ role: "user" as const, text: "Are you open on Sunday?" }];

const message = {
  id: "msg_1",
  type: "message",
  role: "assistant",
  model: "claude-test-20261201",
  content: [{ type: "text", text: "Yes, from 10 to 4." }],
  stop_reason: "end_turn",
  stop_sequence: null,
  usage: { input_tokens: 12, output_tokens: 7, cache_read_input_tokens: 3, cache_creation_input_tokens: 0 },
};

const json = (response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  response.writeHead(status, { "content-type": "application/json", "request-id": "req_test", ...headers });
  response.end(JSON.stringify(body));
};

describe("the Claude client over HTTP", () => {
  it("sends the SDK's request (key, version, body) and reads Claude's answer and usage", async () => {
    let seen: { headers: IncomingMessage["headers"]; body: unknown } | undefined;
    const url = await anthropicAt((request, body, response) => {
      seen = { headers: request.headers, body: JSON.parse(body) };
      json(response, 200, message);
    });
    const reply = await client(url).generate(turns);
    expect(reply).toEqual({
      text: "Yes, from 10 to 4.",
      model: "claude-test-20261201",
      inputTokens: 12,
      outputTokens: 7,
      cacheReadTokens: 3,
      cacheCreationTokens: 0,
      cacheCreation1hTokens: 0,
    });
    expect(seen?.headers["x-api-key"] ?? seen?.headers.authorization).toMatch(/test-key/); // the SDK's choice of header
    expect(seen?.headers["anthropic-version"]).toBeTruthy();
    expect(seen?.body).toMatchObject({ model: "claude-test", max_tokens: 100, messages: [{ role: "user" }] });
  });

  it("asks Haiku 5.5 for no thinking (it thinks by default, sharing max_tokens with the reply); to Haiku 4.5 and Opus 5.5 it says nothing of thinking", async () => {
    const bodies: { model: string; thinking?: unknown }[] = [];
    const url = await anthropicAt((_request, body, response) => {
      bodies.push(JSON.parse(body) as { model: string; thinking?: unknown });
      json(response, 200, message);
    });
    const ask = (model: string) =>
      new ClaudeClient({ apiKey: "k", baseUrl: url, model, maxTokens: 100, timeoutMs: 2000, systemPrompt: "Be brief." }).generate(turns);
    await ask("claude-haiku-5-5");
    await ask("claude-haiku-4-5"); // off unless asked for
    await ask("claude-opus-5-5"); // cannot be turned off
    await ask("claude-sonnet-5-5"); // the least it goes: none up front
    expect(bodies.map((b) => [b.model, b.thinking])).toEqual([
      ["claude-haiku-5-5", { type: "disabled" }],
      ["claude-haiku-4-5", undefined],
      ["claude-opus-5-5", undefined],
      ["claude-sonnet-5-5", { type: "between_tools" }],
    ]);
  });

  it("reads the hour-long part of the cache writes from usage.cache_creation", async () => {
    const usage = { ...message.usage, cache_creation_input_tokens: 30, cache_creation: { ephemeral_5m_input_tokens: 10, ephemeral_1h_input_tokens: 20 } };
    const url = await anthropicAt((_request, _body, response) => json(response, 200, { ...message, usage }));
    expect(await client(url).generate(turns)).toMatchObject({ cacheCreationTokens: 30, cacheCreation1hTokens: 20 });
  });

  it("an answer slower than the timeout is a retryable timeout", async () => {
    const url = await anthropicAt((_request, _body, response) => setTimeout(() => json(response, 200, message), 1500));
    const error = await client(url, 200)
      .generate(turns)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RetryableError);
    expect(error).toMatchObject({ source: "anthropic", code: "timeout" });
  });

  it("nobody listening is a retryable network failure", async () => {
    const error = await client(`http://127.0.0.1:${await freePort()}`)
      .generate(turns)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RetryableError);
    expect(error).toMatchObject({ source: "anthropic", code: "network" });
  });

  it("Anthropic's 529 overloaded is retryable, with its type and request id", async () => {
    const url = await anthropicAt((_request, _body, response) =>
      json(response, 529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }),
    );
    const error = await client(url)
      .generate(turns)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RetryableError);
    expect(error).toMatchObject({ code: "529", detail: { status: 529, type: "overloaded_error", requestId: "req_test" } });
  });

  it("a 400 invalid request is permanent, in Claude's own words", async () => {
    const url = await anthropicAt((_request, _body, response) =>
      json(response, 400, { type: "error", error: { type: "invalid_request_error", message: "max_tokens: too large" } }),
    );
    const error = await client(url)
      .generate(turns)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PermanentError);
    expect((error as PermanentError).message).toContain("max_tokens: too large");
  });
});
