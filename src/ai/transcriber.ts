import { z } from "zod";
import { PermanentError, RetryableError } from "../errors.ts";

/**
 * Voice notes heard through any OpenAI-compatible `POST /v1/audio/transcriptions` (OpenAI,
 * Groq, speaches, LocalAI). Its failures arrive as typed errors, as Claude's and Meta's do:
 * 408, 409, 429, 5xx, timeouts and broken connections are retryable; any other answer is not.
 */

export interface TranscriberOptions {
  /** Without `/v1`: the path is added (TRANSCRIBE_BASE_URL). */
  baseUrl: string;
  apiKey: string | undefined;
  model: string;
  timeoutMs: number;
}

/** A minute of speech takes a hosted Whisper seconds; a local one on a CPU, longer. */
export const TRANSCRIBE_TIMEOUT_MS = 120_000;

/** OpenAI's own upload limit, which the others keep too. */
export const TRANSCRIBE_MAX_BYTES = 25 * 1024 * 1024;

const answerSchema = z.object({ text: z.string() });
const errorSchema = z.object({ error: z.object({ message: z.string() }) });

const RETRYABLE_STATUS = new Set([408, 409, 429]);

export class Transcriber {
  constructor(private readonly options: TranscriberOptions) {}

  /** The words of a voice note. Never logged here: they are the customer's (law 10). */
  async transcribe(audio: Buffer): Promise<string> {
    const form = new FormData();
    // WhatsApp's voice notes are Ogg Opus. The name matters: OpenAI's newer models read the
    // format from it and refuse `.oga`, the extension Meta's own file names carry.
    form.append("file", new Blob([new Uint8Array(audio)], { type: "audio/ogg" }), "voice.ogg");
    form.append("model", this.options.model);
    form.append("response_format", "json");
    const url = `${this.options.baseUrl.replace(/\/+$/, "")}/v1/audio/transcriptions`;
    let response: Response;
    let text: string;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: this.options.apiKey ? { authorization: `Bearer ${this.options.apiKey}` } : {},
        body: form,
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
      text = await response.text();
    } catch (error) {
      const timedOut = error instanceof Error && error.name === "TimeoutError";
      throw new RetryableError({
        source: "transcriber",
        code: timedOut ? "timeout" : "network",
        reason: timedOut ? `The transcriber did not answer within ${this.options.timeoutMs} ms` : "Could not reach the transcriber",
        cause: error,
      });
    }
    if (response.ok) {
      const answer = answerSchema.safeParse(safeJson(text));
      if (answer.success) return answer.data.text;
      throw new PermanentError({
        source: "transcriber",
        code: "bad_answer",
        reason: `The transcriber answered HTTP ${response.status} without the words (no "text")`,
      });
    }
    const said = errorSchema.safeParse(safeJson(text));
    const reason = `The transcriber answered HTTP ${response.status}${said.success ? `: ${said.data.error.message.slice(0, 300)}` : ""}`;
    const init = { source: "transcriber" as const, code: `http_${response.status}`, reason };
    if (response.status >= 500 || RETRYABLE_STATUS.has(response.status)) {
      throw new RetryableError({ ...init, minDelayMs: retryAfterMs(response.headers.get("retry-after")) });
    }
    throw new PermanentError(init);
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** Retry-After in seconds (the form these APIs use), capped: a transcriber's hint, not an order to wait an hour. */
function retryAfterMs(header: string | null): number | undefined {
  const seconds = Number(header);
  return header !== null && Number.isFinite(seconds) && seconds >= 0 ? Math.min(seconds, 60) * 1000 : undefined;
}
