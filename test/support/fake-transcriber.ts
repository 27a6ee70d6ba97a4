import { type TranscriptionAnswer, TranscriptionApiServer, type TranscriptionRequest } from "../../sim/transcription-api.ts";

/**
 * A local stand-in for an OpenAI-compatible transcriber, on the protocol the demo's offline
 * transcriber speaks too (sim/transcription-api.ts). The backend's real client calls it
 * through TRANSCRIBE_BASE_URL. It records every request, multipart form read, and answers from
 * a script, else with `words`.
 */

export { openAiError } from "../../sim/transcription-api.ts";
export type { TranscriptionAnswer, TranscriptionRequest };

export class FakeTranscriber extends TranscriptionApiServer {
  readonly requests: TranscriptionRequest[] = [];
  private readonly script: TranscriptionAnswer[] = [];
  words = "hello, do you have the blue jacket in size M?";

  /** Queue answers for the next requests, in order; afterwards `words` answers again. */
  answer(...answers: TranscriptionAnswer[]): void {
    this.script.push(...answers);
  }

  protected override respond(request: TranscriptionRequest): TranscriptionAnswer {
    this.requests.push(request);
    return this.script.shift() ?? { text: this.words };
  }
}
