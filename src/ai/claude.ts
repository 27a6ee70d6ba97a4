import Anthropic from "@anthropic-ai/sdk";
import type { TracerProvider } from "@opentelemetry/api";
import { request } from "undici";
import { PermanentError, RetryableError } from "../errors.ts";
import { claudeModel } from "./models.ts";
import { assembleRequest, type ChatTurn, type ClaudeAsk, type ContentBlockJson, promptTokensAtMost } from "./request.ts";

/** Claude writes the replies: each call is stored before anything it asks for runs (law 4). What a call is shown: request.ts. */

/** One call's answer: Claude's content blocks as they came, why it stopped, what it cost. */
export interface ClaudeAnswer {
  content: ContentBlockJson[];
  stopReason: string;
  usage: CallUsage;
  /** The call's row in the ledger (src/state/claude-calls.ts), set by the caller that reserved it. */
  callId?: string | undefined;
}

/** What one call cost, as Anthropic reported it. */
export interface CallUsage {
  model: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheCreationTokens: number;
  /** Of the cache writes, those for an hour (priced 2× input; the rest 1.25×). */
  cacheCreation1hTokens: number;
}

/** A passage of the business's knowledge Claude cited for its words, as staff see it beside the reply. */
export interface Citation {
  /** The file (or search result source) cited. */
  source: string;
  title: string | null;
  citedText: string;
  /** Where in it: "characters 120–240", "pages 2–3", "passage 4". */
  location: string | null;
}

/** The words of an answer, plain (what WhatsApp receives: citations are not marked in the text). */
export function textOf(content: readonly ContentBlockJson[]): string {
  return content
    .flatMap((block) => (block.type === "text" && typeof block.text === "string" ? [block.text] : []))
    .join("")
    .trim();
}

/** A business action Claude asks for (a tool_use block). */
export type ToolUse = { id: string; name: string; input: unknown };

/** The tool calls an answer asks for, in its order. */
export function toolUsesOf(content: readonly ContentBlockJson[]): ToolUse[] {
  return content.flatMap((block) =>
    block.type === "tool_use" && typeof block.id === "string" && typeof block.name === "string" ? [{ id: block.id, name: block.name, input: block.input }] : [],
  );
}

interface CitationJson {
  type?: string;
  cited_text?: string;
  document_title?: string | null;
  source?: string;
  title?: string | null;
  start_char_index?: number;
  end_char_index?: number;
  start_page_number?: number;
  end_page_number?: number;
  start_block_index?: number;
  search_result_index?: number;
}

/** What an answer's words rest on: every citation of its text blocks, once each. */
export function citationsOf(content: readonly ContentBlockJson[]): Citation[] {
  const seen = new Set<string>();
  const out: Citation[] = [];
  for (const block of content) {
    if (block.type !== "text" || !Array.isArray(block.citations)) continue;
    for (const c of block.citations as CitationJson[]) {
      const citation: Citation = {
        source: c.source ?? c.document_title ?? "(untitled)",
        title: c.title ?? c.document_title ?? null,
        citedText: c.cited_text ?? "",
        location:
          c.type === "char_location"
            ? `characters ${c.start_char_index}–${c.end_char_index}`
            : c.type === "page_location"
              ? c.start_page_number === (c.end_page_number ?? 0) - 1
                ? `page ${c.start_page_number}`
                : `pages ${c.start_page_number}–${(c.end_page_number ?? 1) - 1}`
              : c.type === "search_result_location"
                ? `passage ${(c.search_result_index ?? 0) + 1}`
                : null,
      };
      const key = JSON.stringify(citation);
      if (!seen.has(key)) {
        seen.add(key);
        out.push(citation);
      }
    }
  }
  return out;
}

export interface GeneratedReply {
  text: string;
  model: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheCreationTokens: number;
  /** Of `cacheCreationTokens`, those written for an hour (priced 2× input, the rest 1.25×); absent when Anthropic gave no split. */
  cacheCreation1hTokens?: number | undefined;
  /** The knowledge it cited (issue 19); absent for an answer without knowledge. */
  citations?: Citation[] | undefined;
  /** What its calls cost in USD, each priced as it answered (src/ai/pricing.ts); absent when a model has no price. */
  costUsd?: number | undefined;
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

  /** The most a call can count (src/ai/request.ts, promptTokensAtMost; MAX_TOKENS): what its greatest cost is reserved on. */
  boundOf(ask: ClaudeAsk): { promptTokens: number; maxTokens: number } {
    return { promptTokens: promptTokensAtMost(this.options.model, ask), maxTokens: this.options.maxTokens };
  }

  /** SYSTEM_PROMPT: what a number without a prompt of its own is told. */
  get systemPrompt(): string {
    return this.options.systemPrompt;
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

  /**
   * One call of a reply's conversation with Claude (src/ai/request.ts says what it is shown):
   * its content blocks whole, why it stopped, and what it cost. The caller stores it before
   * anything it asks for runs (law 4).
   */
  async ask(ask: ClaudeAsk): Promise<ClaudeAnswer> {
    let message: Anthropic.Message;
    try {
      message = await this.client.messages.create({
        model: this.options.model,
        max_tokens: this.options.maxTokens,
        ...(this.thinking ? { thinking: this.thinking } : {}),
        ...assembleRequest(this.options.model, ask),
      });
    } catch (error) {
      throw classifyAnthropicError(error);
    }
    return {
      content: message.content as unknown as ContentBlockJson[],
      stopReason: message.stop_reason ?? "end_turn",
      usage: {
        model: message.model,
        inputTokens: message.usage.input_tokens,
        outputTokens: message.usage.output_tokens,
        cacheReadTokens: message.usage.cache_read_input_tokens ?? 0,
        cacheCreationTokens: message.usage.cache_creation_input_tokens ?? 0,
        cacheCreation1hTokens: message.usage.cache_creation?.ephemeral_1h_input_tokens ?? 0,
      },
    };
  }

  /** One call for these turns alone (no knowledge, no tools): its words and what it cost. `systemPrompt` overrides the configured one. */
  async generate(turns: ChatTurn[], systemPrompt = this.options.systemPrompt): Promise<GeneratedReply> {
    const answer = await this.ask({ systemPrompt, turns });
    const text = textOf(answer.content);
    if (!text) {
      throw new PermanentError({ source: "anthropic", code: "empty", reason: `Claude returned no text (stop reason ${answer.stopReason})` });
    }
    return { text, ...answer.usage };
  }
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
