import Anthropic from "@anthropic-ai/sdk";
import type { TracerProvider } from "@opentelemetry/api";
import { request } from "undici";
import { PermanentError, RetryableError } from "../errors.ts";
import { claudeModel } from "./models.ts";

/** Claude writes the replies. One call per answer (law 4): the caller stores the result before sending. */

export interface ChatTurn {
  role: "user" | "assistant";
  text: string;
  /** The end of the stable prefix (system prompt + history): cached by Anthropic for the next reply. */
  cacheBreakpoint?: boolean;
  /** An image or PDF the customer sent, shown to Claude before the turn's text. */
  media?: { kind: "image" | "pdf"; mimeType: string; data: Buffer };
}

const IMAGE_TYPES = new Set(["image/jpeg", "image/png", "image/gif", "image/webp"]);

function mediaBlock(media: NonNullable<ChatTurn["media"]>): Anthropic.ContentBlockParam | undefined {
  const data = media.data.toString("base64");
  if (media.kind === "pdf") return { type: "document", source: { type: "base64", media_type: "application/pdf", data } };
  const mimeType = media.mimeType.split(";")[0]!.trim();
  if (!IMAGE_TYPES.has(mimeType)) return undefined;
  return { type: "image", source: { type: "base64", media_type: mimeType as "image/jpeg" | "image/png" | "image/gif" | "image/webp", data } };
}

export interface GeneratedReply {
  text: string;
  model: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheCreationTokens: number;
  /** Of `cacheCreationTokens`, those written for an hour (priced 2× input, the rest 1.25×); absent when Anthropic gave no split. */
  cacheCreation1hTokens?: number;
}

export interface ClaudeOptions {
  apiKey: string;
  baseUrl: string;
  model: string;
  maxTokens: number;
  timeoutMs: number;
  systemPrompt: string;
}

/** Statuses whose answer has no body: a Response refuses one for them. */
const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

/**
 * The SDK's HTTP call, made with undici's request instead of fetch: one per reply, and fetch's
 * web streams cost about four times the CPU (bench/RESULTS.md). It answers what fetch would,
 * a Response, with the body read whole: the calls made here are never streamed. The SDK's own
 * signal (its timeout) aborts it, with the AbortError the SDK reads as a timeout, and a
 * failure to connect throws, as fetch's does, for the SDK to call a connection error.
 * Anything but a string body (an upload) goes to fetch itself.
 */
async function undiciFetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
  if (input instanceof Request || (init?.body != null && typeof init.body !== "string")) return fetch(input, init);
  const answer = await request(input, {
    method: (init?.method ?? "GET") as "GET" | "POST",
    headers: Object.fromEntries(new Headers(init?.headers)),
    body: init?.body ?? null,
    signal: init?.signal ?? undefined,
  });
  const headers = new Headers();
  for (const [name, value] of Object.entries(answer.headers)) for (const one of [value ?? []].flat()) headers.append(name, one);
  if (!NULL_BODY_STATUS.has(answer.statusCode)) return new Response(await answer.body.bytes(), { status: answer.statusCode, headers });
  await answer.body.dump();
  return new Response(null, { status: answer.statusCode, headers });
}

/** Anthropic's retryable statuses; every other 4xx is a request that will never succeed. */
const RETRYABLE_STATUS = new Set([408, 409, 429]);

export class ClaudeClient {
  private readonly client: Anthropic;
  /**
   * Thinking turned off where the model thinks by default and lets it be turned off (Haiku
   * 5.5: src/ai/models.ts). Its thinking would share max_tokens with the reply, and a reply cut
   * off after a thinking block has no text: one short answer is asked for as Haiku 4.5 gave it.
   */
  private readonly thinking: Anthropic.ThinkingConfigParam | undefined;

  /** The model every call asks for (Anthropic answers with its dated id). */
  get model(): string {
    return this.options.model;
  }

  /**
   * `tracerProvider` (traces on): the SDK's own span for each call ("anthropic.messages.create",
   * with the GenAI attributes: model, tokens, cache reads and writes; metadata only, never the
   * words). Set explicitly either way, so the SDK reads none of its environment variables, and
   * without propagation: Anthropic is sent no trace context of ours.
   */
  constructor(
    private readonly options: ClaudeOptions,
    tracerProvider?: TracerProvider,
  ) {
    this.client = new Anthropic({
      openTelemetry: tracerProvider ? { tracerProvider, propagation: false, traces: { enabled: true, contentMode: "metadata_only" } } : false,
      apiKey: options.apiKey,
      baseURL: options.baseUrl,
      timeout: options.timeoutMs,
      // BullMQ owns retries (with backoff, jitter and a dead letter at the end); SDK retries
      // would multiply them and hide the attempts from our records.
      maxRetries: 0,
      fetch: undiciFetch,
    });
    const thinking = claudeModel(options.model)?.thinking;
    this.thinking = thinking?.onByDefault && thinking.off ? { type: thinking.off } : undefined;
  }

  /** `systemPrompt` overrides the configured one (a business number's own prompt). */
  async generate(turns: ChatTurn[], systemPrompt = this.options.systemPrompt): Promise<GeneratedReply> {
    let message: Anthropic.Message;
    try {
      message = await this.client.messages.create({
        model: this.options.model,
        max_tokens: this.options.maxTokens,
        ...(this.thinking ? { thinking: this.thinking } : {}),
        // The system prompt and the history repeat from one reply to the next: prompt caching
        // bills them at a tenth of the price when they are read back.
        system: [{ type: "text", text: systemPrompt, cache_control: { type: "ephemeral" } }],
        messages: toAlternatingMessages(turns),
      });
    } catch (error) {
      throw classifyAnthropicError(error);
    }
    const text = message.content
      .flatMap((block) => (block.type === "text" ? [block.text] : []))
      .join("")
      .trim();
    if (!text) {
      throw new PermanentError({ source: "anthropic", code: "empty", reason: `Claude returned no text (stop reason ${message.stop_reason})` });
    }
    return {
      text,
      model: message.model,
      inputTokens: message.usage.input_tokens,
      outputTokens: message.usage.output_tokens,
      cacheReadTokens: message.usage.cache_read_input_tokens ?? 0,
      cacheCreationTokens: message.usage.cache_creation_input_tokens ?? 0,
      ...(message.usage.cache_creation ? { cacheCreation1hTokens: message.usage.cache_creation.ephemeral_1h_input_tokens } : {}),
    };
  }
}

/**
 * Claude wants alternating roles starting with the user: consecutive turns of one role
 * become text blocks of one message. History that opens with the business speaking (a person
 * wrote first from the WhatsApp Business app, or the window slid past the customer's first
 * message) is kept as a note at the start of the first user message.
 */
export function toAlternatingMessages(turns: ChatTurn[]): Anthropic.MessageParam[] {
  const out: { role: "user" | "assistant"; content: Anthropic.ContentBlockParam[] }[] = [];
  for (const turn of turns) {
    const opening = out.length === 0 && turn.role === "assistant";
    const words = opening ? `[Earlier in this chat, the business wrote: "${turn.text}"]` : turn.text;
    const text: Anthropic.TextBlockParam = turn.cacheBreakpoint
      ? { type: "text", text: words, cache_control: { type: "ephemeral" } }
      : { type: "text", text: words };
    const media = turn.media ? mediaBlock(turn.media) : undefined;
    const blocks = media ? [media, text] : [text];
    const role = opening ? "user" : turn.role;
    const last = out.at(-1);
    if (last && last.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  }
  return out;
}

export function classifyAnthropicError(error: unknown): RetryableError | PermanentError {
  if (error instanceof Anthropic.APIConnectionError) {
    const timedOut = error instanceof Anthropic.APIConnectionTimeoutError;
    return new RetryableError({
      source: "anthropic",
      code: timedOut ? "timeout" : "network",
      reason: timedOut ? "Claude did not answer in time" : "Could not reach the Anthropic API",
      // A call that timed out reached Anthropic, which may have written (and billed) an answer we never read.
      ambiguous: timedOut,
      cause: error,
    });
  }
  if (error instanceof Anthropic.APIError && typeof error.status === "number") {
    const status = error.status;
    const body = error.error as { error?: { type?: string; message?: string } } | undefined;
    const type = body?.error?.type;
    const init = {
      source: "anthropic" as const,
      code: String(status),
      reason: `Claude answered ${status}${type ? ` (${type})` : ""}: ${body?.error?.message ?? error.message}`,
      detail: { status, type, requestId: error.requestID },
      cause: error,
    };
    return status >= 500 || RETRYABLE_STATUS.has(status) ? new RetryableError(init) : new PermanentError(init);
  }
  return new RetryableError({ source: "anthropic", reason: error instanceof Error ? error.message : String(error), cause: error });
}
