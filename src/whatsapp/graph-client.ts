import { Readable } from "node:stream";
import { SpanKind, type Tracer } from "@opentelemetry/api";
import { request as undiciRequest } from "undici";
import { z } from "zod";
import { type Clock, systemClock } from "../clock.ts";
import { PermanentError, RetryableError } from "../errors.ts";
import { inSpan, NO_TRACER } from "../tracing/tracing.ts";
import { describeAnswer, maskPhoneNumbers } from "./answer-shape.ts";
import { ruleForGraphCode } from "./error-codes.ts";
import { isPhoneNumberId } from "./webhook-payload.ts";

/** The WhatsApp Cloud API, as much of it as we use. Its failures arrive as typed errors. */

const graphErrorSchema = z.object({
  error: z.object({
    code: z.coerce.number(),
    message: z.string().optional(),
    type: z.string().optional(),
    error_subcode: z.coerce.number().optional(),
    error_data: z.object({ details: z.string().optional() }).passthrough().optional(),
    fbtrace_id: z.string().optional(),
  }),
});

const mediaInfoSchema = z.object({
  url: z.string().url(),
  mime_type: z.string(),
  // Seen both as a number and as a string (WHATSAPP.md §8).
  file_size: z.coerce.number().optional(),
});

export interface DownloadedMedia {
  mimeType: string;
  data: Buffer;
}

const sendResponseSchema = z.object({
  messages: z.array(z.object({ id: z.string().min(1) })).min(1),
});

const templatePageSchema = z.object({
  data: z.array(z.unknown()),
  paging: z.object({ cursors: z.object({ after: z.string().optional() }).optional(), next: z.string().optional() }).optional(),
});
/** A business has at most a few hundred templates: this many pages of 100 is every one. */
const MAX_TEMPLATE_PAGES = 20;

export interface GraphClientOptions {
  baseUrl: string;
  version: string;
  accessToken: string;
  timeoutMs: number;
  /** What a send's `startBy` is read on (the system's by default). */
  clock?: Clock | undefined;
}

/**
 * Whom a message goes to: the phone number whenever it is known, as Meta recommends, else the
 * business-scoped user id (`recipient`), the only address of a customer who hides their
 * number behind a username (WHATSAPP.md §9).
 */
export type Recipient = { phone: string } | { bsuid: string };

/**
 * A business number's messages endpoint. The webhook lets only digits through; this holds for
 * every other way an id reaches a send (a row written before it did, a staff resend): our
 * token is never sent to another path of the Graph API.
 */
function messagesPath(phoneNumberId: string): string {
  if (!isPhoneNumberId(phoneNumberId)) {
    throw new PermanentError({
      source: "graph",
      code: "bad_phone_number_id",
      reason: `The business number's id ${JSON.stringify(phoneNumberId.slice(0, 40))} is not digits: nothing was sent`,
    });
  }
  return `${phoneNumberId}/messages`;
}

const addressed = (to: Recipient) => ("phone" in to ? { to: to.phone } : { recipient: to.bsuid });

export interface SendTextInput {
  phoneNumberId: string;
  to: Recipient;
  text: string;
  /** Comes back in status webhooks: how we reconcile a send whose answer we never saw (law 5). */
  bizOpaqueCallbackData: string;
  /** Quote this message (the customer's) above ours. */
  replyTo?: string | undefined;
  /** The send must start by then (the clock's monotonic reading), or not at all: see SendTooLate. */
  startBy?: number | undefined;
}

/**
 * A send whose request was not written by its `startBy` (a slow connect or TLS handshake, a
 * process frozen on the way): nothing of it left, so Meta cannot have it; the caller may send
 * it again at once. Checked as the body is written, after the connection is up (law 5: a part
 * is sent only promptly after it was marked sending).
 */
export class SendTooLate extends Error {
  override readonly name = "SendTooLate";
}

/**
 * Where Graph's failures are counted by Meta's code (wa_graph_errors_total): "api" for the
 * answers to our requests, "status" for failed delivery webhooks (src/jobs/status.ts).
 */
export interface GraphErrorsCount {
  inc(labels: { code: string; via: "api" | "status" }): void;
}

export class GraphClient {
  /** `errors` counts every failed request by its code; a client used on its own may go without. `tracer`: a span per send. */
  constructor(
    private readonly options: GraphClientOptions,
    private readonly errors?: GraphErrorsCount,
    private readonly tracer: Tracer = NO_TRACER,
  ) {}

  async sendText(input: SendTextInput): Promise<{ wamid: string }> {
    return this.sent("text", input.phoneNumberId, input.bizOpaqueCallbackData, input.startBy, {
      messaging_product: "whatsapp",
      recipient_type: "individual",
      ...addressed(input.to),
      type: "text",
      text: { preview_url: false, body: input.text },
      biz_opaque_callback_data: input.bizOpaqueCallbackData,
      ...(input.replyTo ? { context: { message_id: input.replyTo } } : {}),
    });
  }

  /** An approved template: the only thing Meta delivers once the 24-hour window has closed. */
  async sendTemplate(input: {
    phoneNumberId: string;
    to: Recipient;
    name: string;
    language: string;
    /** The body's {{1}}, {{2}}… in order; none: the template is sent without components. */
    parameters?: readonly string[] | undefined;
    bizOpaqueCallbackData: string;
    startBy?: number | undefined;
  }): Promise<{ wamid: string }> {
    const parameters = input.parameters ?? [];
    return this.sent("template", input.phoneNumberId, input.bizOpaqueCallbackData, input.startBy, {
      messaging_product: "whatsapp",
      recipient_type: "individual",
      ...addressed(input.to),
      type: "template",
      template: {
        name: input.name,
        language: { code: input.language },
        ...(parameters.length > 0 ? { components: [{ type: "body", parameters: parameters.map((text) => ({ type: "text", text })) }] } : {}),
      },
      biz_opaque_callback_data: input.bizOpaqueCallbackData,
    });
  }

  /** An interactive message (reply buttons: a CSAT ask), Graph's `interactive` object as given; free-form, so inside the 24-hour window only. */
  async sendInteractive(input: {
    phoneNumberId: string;
    to: Recipient;
    interactive: Record<string, unknown>;
    bizOpaqueCallbackData: string;
    startBy?: number | undefined;
  }): Promise<{ wamid: string }> {
    return this.sent("interactive", input.phoneNumberId, input.bizOpaqueCallbackData, input.startBy, {
      messaging_product: "whatsapp",
      recipient_type: "individual",
      ...addressed(input.to),
      type: "interactive",
      interactive: input.interactive,
      biz_opaque_callback_data: input.bizOpaqueCallbackData,
    });
  }

  /**
   * The business account's message templates (WHATSAPP.md §12), every page. Pages are followed
   * by their `after` cursor on our own base URL rather than by `paging.next`'s URL: the token
   * never goes anywhere but GRAPH_API_BASE_URL.
   */
  async listTemplates(businessAccountId: string): Promise<unknown[]> {
    if (!/^\d+$/.test(businessAccountId)) throw new PermanentError({ source: "graph", code: "bad_waba_id", reason: "The business account id is not digits" });
    const templates: unknown[] = [];
    let after: string | undefined;
    for (let page = 0; page < MAX_TEMPLATE_PAGES; page++) {
      const query = new URLSearchParams({ fields: "name,language,category,status,components", limit: "100", ...(after ? { after } : {}) });
      const parsed = templatePageSchema.safeParse((await this.request("GET", `${businessAccountId}/message_templates?${query}`)).body);
      if (!parsed.success) throw new PermanentError({ source: "graph", code: "templates_shape", reason: "Meta's list of templates had an unexpected shape" });
      templates.push(...parsed.data.data);
      after = parsed.data.paging?.next ? parsed.data.paging.cursors?.after : undefined;
      if (!after) break;
    }
    return templates;
  }

  /** One send, in a span of its own (ids only: no text, no phone number). */
  private sent(
    type: "text" | "template" | "interactive",
    phoneNumberId: string,
    partId: string,
    startBy: number | undefined,
    message: Record<string, unknown>,
  ): Promise<{ wamid: string }> {
    const attributes = { "messaging.system": "whatsapp", "messaging.operation.name": "send", "whatsapp.message.type": type, "whatsapp.part.id": partId };
    return inSpan(this.tracer, "whatsapp send", { kind: SpanKind.CLIENT, attributes }, async (span) => {
      const accepted = acceptedWamid(await this.request("POST", messagesPath(phoneNumberId), message, startBy));
      span.setAttribute("messaging.message.id", accepted.wamid);
      return accepted;
    });
  }

  /**
   * A customer's media (WHATSAPP.md §8): its id gives a URL that expires after 5 minutes, so
   * both steps run when the media is needed. Larger than `maxBytes` is refused unread when
   * Meta or the download says its size, and otherwise as soon as the bytes pass the limit:
   * never buffered whole, however large the file.
   */
  async downloadMedia(mediaId: string, maxBytes: number): Promise<DownloadedMedia> {
    const info = mediaInfoSchema.safeParse((await this.request("GET", encodeURIComponent(mediaId))).body);
    if (!info.success) throw new PermanentError({ source: "graph", code: "media_info", reason: "Meta returned no download URL for the media" });
    const { url, mime_type: mimeType, file_size: size } = info.data;
    const tooLarge = (reason: string) => new PermanentError({ source: "graph", code: "media_too_large", reason });
    if (size !== undefined && size > maxBytes) throw tooLarge(`The file is ${size} bytes; the limit is ${maxBytes}`);
    const response = await this.fetchMedia(url);
    if (!response.ok) {
      const text = await response.text().catch(() => "");
      throw this.counted(graphFailure(fetchAnswer(response), safeJson(text), text));
    }
    const announced = Number(response.headers.get("content-length") ?? Number.NaN);
    if (announced > maxBytes) {
      await response.body?.cancel(); // closes the connection: nothing more is downloaded
      throw tooLarge(`The file is ${announced} bytes; the limit is ${maxBytes}`);
    }
    const data = await readWithin(response.body, maxBytes);
    if (!data) throw tooLarge(`The file is larger than the limit of ${maxBytes} bytes`);
    return { mimeType, data };
  }

  /** Marks the message read and shows "typing…" until we reply (or 25 s pass). */
  async markReadWithTyping(phoneNumberId: string, wamid: string): Promise<void> {
    await this.request("POST", messagesPath(phoneNumberId), {
      messaging_product: "whatsapp",
      status: "read",
      message_id: wamid,
      typing_indicator: { type: "text" },
    });
  }

  /**
   * A call to the API itself: JSON both ways, through undici's request rather than fetch. This
   * is the reply path's hot call, twice per reply (the send, and read-with-typing), and fetch's
   * web streams cost four times its CPU (bench/RESULTS.md).
   */
  private async request(method: "GET" | "POST", path: string, payload?: unknown, startBy?: number): Promise<GraphAnswer> {
    let response: Awaited<ReturnType<typeof undiciRequest>>;
    const json = payload === undefined ? undefined : JSON.stringify(payload);
    try {
      response = await undiciRequest(`${this.options.baseUrl}/${this.options.version}/${path}`, {
        method,
        headers: {
          ...this.headers(),
          ...(json === undefined ? {} : { "content-type": "application/json", "content-length": String(Buffer.byteLength(json)) }),
        },
        ...(json === undefined ? {} : { body: startBy === undefined ? json : Readable.from(writtenBy(json, startBy, this.options.clock ?? systemClock)) }),
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (error) {
      if (error instanceof SendTooLate) throw error;
      throw this.counted(transportFailure(error, this.options.timeoutMs));
    }
    let text: string;
    try {
      text = await response.body.text();
    } catch (error) {
      // The answer broke off: whatever it said, Meta may have acted on the request.
      throw this.counted(
        new RetryableError({
          source: "graph",
          code: "answer_lost",
          reason: `Meta's answer (HTTP ${response.statusCode}) broke off before it was read`,
          ambiguous: true,
          cause: error,
        }),
      );
    }
    const body = safeJson(text);
    if (response.statusCode >= 200 && response.statusCode < 300) return { body, text };
    throw this.counted(graphFailure(undiciAnswer(response), body, text));
  }

  private counted<E extends RetryableError | PermanentError>(failure: E): E {
    this.errors?.inc({ code: failure.code ?? "unknown", via: "api" });
    return failure;
  }

  /** The media's own URL, through fetch: it follows redirects and streams the body within its limit. */
  private async fetchMedia(url: string): Promise<Response> {
    try {
      return await fetch(url, { method: "GET", headers: this.headers(), signal: AbortSignal.timeout(this.options.timeoutMs) });
    } catch (error) {
      throw this.counted(transportFailure(error, this.options.timeoutMs));
    }
  }

  /** Every call carries the token (and a timeout, set by each caller). */
  private headers(): Record<string, string> {
    return {
      authorization: `Bearer ${this.options.accessToken}`,
      // Media downloads fail without a browser-like agent (WHATSAPP.md §8, I9).
      "user-agent": "Mozilla/5.0 (compatible; whatsapp-ai-reply)",
    };
  }
}

/**
 * A body that undici reads once the connection (and TLS) is up, right before it writes the
 * request, headers included: the moment the send starts. Later than `startBy`, nothing is
 * written and the connection is dropped.
 */
async function* writtenBy(json: string, startBy: number, clock: Clock): AsyncGenerator<Buffer> {
  const lateMs = clock.monotonicMs() - startBy;
  if (lateMs > 0) throw new SendTooLate(`the send's start was due ${Math.round(lateMs)} ms ago`);
  yield Buffer.from(json);
}

/** Connection failures before a byte of the request could be written: Meta cannot have it. */
const NOT_CONNECTED = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "ENETUNREACH", "EHOSTUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

/**
 * A transport failure is retryable; for a send it is ambiguous (Meta may have taken the
 * message, law 5) unless the connection was never made, so nothing was written.
 */
function transportFailure(error: unknown, timeoutMs: number): RetryableError {
  const timedOut = error instanceof Error && error.name === "TimeoutError";
  // undici's request throws the system error itself; fetch wraps it as its cause.
  const failed = error as { code?: unknown; cause?: { code?: unknown } };
  const code = typeof failed.code === "string" ? failed.code : failed.cause?.code;
  const neverConnected = typeof code === "string" && NOT_CONNECTED.has(code);
  return new RetryableError({
    source: "graph",
    code: timedOut ? "timeout" : neverConnected ? "unreachable" : "network",
    reason: timedOut
      ? `Meta did not answer within ${timeoutMs} ms`
      : neverConnected
        ? "Could not connect to Meta's Graph API"
        : "The connection to Meta's Graph API broke off",
    detail: typeof code === "string" ? { cause: code } : undefined,
    ambiguous: !neverConnected,
    cause: error,
  });
}

function safeJson(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * A response body, read only while it stays within `maxBytes`: undefined as soon as it grows
 * past them, the stream cancelled (which closes the connection) rather than read to its end.
 */
async function readWithin(body: ReadableStream<Uint8Array> | null, maxBytes: number): Promise<Buffer | undefined> {
  if (!body) return Buffer.alloc(0);
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return Buffer.concat(chunks, received);
    received += value.byteLength;
    if (received > maxBytes) {
      await reader.cancel();
      return undefined;
    }
    chunks.push(value);
  }
}

/** A 2xx answer: its body parsed (undefined when it is not JSON), and as it came. */
interface GraphAnswer {
  body: unknown;
  text: string;
}

function acceptedWamid({ body, text }: GraphAnswer): { wamid: string } {
  const parsed = sendResponseSchema.safeParse(body);
  if (!parsed.success) {
    // Meta answered 2xx, so the message was probably taken, but we cannot tell which wamid it
    // has: a maybe-sent part, reconciled by its status webhook (law 5). The answer's shape, not
    // its values: a send's answer names the customer under `contacts` (law 10).
    throw new RetryableError({
      source: "graph",
      code: "unreadable_answer",
      reason: "Meta accepted the send but its answer carried no message id",
      detail: describeAnswer(text, body),
      ambiguous: true,
    });
  }
  return { wamid: parsed.data.messages[0]!.id };
}

/** What the failure rules read of an answer, whichever client got it. */
interface Answer {
  status: number;
  header(name: string): string | undefined;
}

const fetchAnswer = (response: Response): Answer => ({ status: response.status, header: (name) => response.headers.get(name) ?? undefined });

const undiciAnswer = (response: { statusCode: number; headers: Record<string, string | string[] | undefined> }): Answer => ({
  status: response.statusCode,
  header: (name) => {
    const value = response.headers[name]; // undici names them in lower case
    return Array.isArray(value) ? value[0] : value;
  },
});

/**
 * Meta refused, with its own error body: a proof that it did not take the message, keyed on
 * `error.code` (WHATSAPP.md §6). Any other answer (an edge proxy's HTML page, an empty 5xx)
 * proves nothing about the request behind it: ambiguous.
 */
function graphFailure(response: Answer, body: unknown, text: string): RetryableError | PermanentError {
  const parsed = graphErrorSchema.safeParse(body);
  if (!parsed.success) {
    const retry = response.status === 429 || response.status >= 500;
    const init = {
      source: "graph" as const,
      code: `http_${response.status}`,
      reason: `Meta answered HTTP ${response.status} without a Graph error body${text ? "" : " (empty)"}`,
      // Whatever answered may have echoed our request (the customer's number, the reply's text): its shape only (law 10).
      detail: { httpStatus: response.status, contentType: response.header("content-type"), ...describeAnswer(text, body) },
      minDelayMs: retryAfterMs(response),
      ambiguous: true,
    };
    return retry ? new RetryableError(init) : new PermanentError(init);
  }
  const { error } = parsed.data;
  const rule = ruleForGraphCode(error.code, response.status);
  const init = {
    source: "graph" as const,
    code: String(error.code),
    reason: rule.reason,
    detail: {
      httpStatus: response.status,
      message: maskPhoneNumbers(error.message),
      details: maskPhoneNumbers(error.error_data?.details),
      fbtraceId: error.fbtrace_id,
    },
    minDelayMs: Math.max(rule.minDelayMs ?? 0, retryAfterMs(response) ?? 0) || undefined,
    throttle: rule.throttle,
  };
  return rule.retry ? new RetryableError(init) : new PermanentError(init);
}

function retryAfterMs(response: Answer): number | undefined {
  const header = response.header("retry-after");
  if (!header) return undefined;
  const seconds = Number(header);
  return Number.isFinite(seconds) && seconds >= 0 ? Math.min(seconds * 1000, 3_600_000) : undefined;
}
