import { type TranscriptionAnswer, TranscriptionApiServer, type TranscriptionRequest } from "./transcription-api.ts";

/**
 * The demo's transcriber when TRANSCRIBE_BASE_URL is not set: it speaks OpenAI's transcription
 * API, so the backend's real client posts to it as to OpenAI, but hears no real audio. The
 * demo's voice notes carry the words the demo user typed for them (`spokenVoiceNote`), and
 * those are what it "hears"; any other audio gets a sentence saying so.
 */

const MARK = Buffer.from("\0DEMO-VOICE-NOTE\0");

/** An Ogg-looking file that carries the words it "says", for the offline transcriber to find. */
export function spokenVoiceNote(words: string): Buffer {
  return Buffer.concat([Buffer.from("OggS"), MARK, Buffer.from(words, "utf8")]);
}

export class OfflineTranscriber extends TranscriptionApiServer {
  constructor(
    private readonly observe: (request: TranscriptionRequest, words: string) => void,
    onError?: (error: unknown) => void,
  ) {
    super(onError ? { onError } : {});
  }

  protected override respond(request: TranscriptionRequest): TranscriptionAnswer {
    const bytes = request.file?.bytes;
    if (!bytes) return { status: 400, body: { error: { message: "no file", type: "invalid_request_error" } } };
    const at = bytes.indexOf(MARK);
    const words =
      at >= 0
        ? bytes.subarray(at + MARK.length).toString("utf8")
        : `(The demo's offline transcriber cannot hear real audio: this voice note is ${Math.ceil(bytes.length / 1024)} KB.)`;
    this.observe(request, words);
    return { text: words };
  }
}
