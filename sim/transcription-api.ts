import type { IncomingMessage, ServerResponse } from "node:http";
import { LocalService, sendJson } from "./local-server.ts";

/**
 * OpenAI's transcription API (`POST /v1/audio/transcriptions`, multipart) over HTTP, as the
 * backend's transcriber reaches it through TRANSCRIBE_BASE_URL: the demo's offline transcriber
 * and the tests' fake both speak it, and differ only in what they answer.
 */

/** One request as it arrived, its multipart form read. */
export interface TranscriptionRequest {
  path: string;
  authorization: string | undefined;
  /** The uploaded file's name and type as the form gave them, and its bytes. */
  file: { name: string; type: string; bytes: Buffer } | undefined;
  model: string | undefined;
  responseFormat: string | undefined;
}

/** The words (OpenAI's `{ "text" }`), or an error of this HTTP status (OpenAI's error body unless given). */
export type TranscriptionAnswer = { text: string } | { status: number; body?: unknown; headers?: Record<string, string> };

export abstract class TranscriptionApiServer extends LocalService {
  constructor(options: { onError?: (error: unknown) => void } = {}) {
    super(options.onError);
  }

  protected abstract respond(request: TranscriptionRequest): TranscriptionAnswer | Promise<TranscriptionAnswer>;

  protected async handle(req: IncomingMessage, body: Buffer, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "").split("?")[0]!;
    if (req.method !== "POST" || !path.endsWith("/v1/audio/transcriptions")) {
      sendJson(res, 404, openAiError(`no route ${req.method} ${path}`, "invalid_request_error"));
      return;
    }
    // Node's own multipart reader (undici's Request), as fetch would read the form.
    const form = await new Request("http://local/", {
      method: "POST",
      headers: { "content-type": req.headers["content-type"] ?? "" },
      body: new Uint8Array(body),
    })
      .formData()
      .catch(() => undefined);
    if (!form) {
      sendJson(res, 400, openAiError("could not parse multipart form", "invalid_request_error"));
      return;
    }
    const file = form.get("file");
    const field = (name: string) => {
      const value = form.get(name);
      return typeof value === "string" ? value : undefined;
    };
    const request: TranscriptionRequest = {
      path,
      authorization: req.headers.authorization,
      file: file instanceof File ? { name: file.name, type: file.type, bytes: Buffer.from(await file.arrayBuffer()) } : undefined,
      model: field("model"),
      responseFormat: field("response_format"),
    };
    const answer = await this.respond(request);
    if ("text" in answer) sendJson(res, 200, { text: answer.text });
    else sendJson(res, answer.status, answer.body ?? openAiError(`error ${answer.status}`, "server_error"), answer.headers);
  }
}

export const openAiError = (message: string, type: string) => ({ error: { message, type, param: null, code: null } });
