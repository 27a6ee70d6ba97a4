import { TRANSCRIBE_MAX_BYTES, type Transcriber } from "../ai/transcriber.ts";
import type { Db } from "../db/client.ts";
import { PermanentError, RetryableError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import { type DescribeSettings, voiceNoteFallback, voiceNoteMedia } from "../messages/describe.ts";
import { storeTranscript, voiceNoteUnheard } from "../state/messages.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";

/**
 * A voice note's words, heard when its answer is about to be planned: the audio is downloaded
 * as images are (Meta's URLs last 5 minutes; the media id, 7 days) and posted to the
 * transcriber. The words are stored with the message before anything else happens, so a retry,
 * a crash or a takeover never asks for them again. A passing failure (429, 5xx, a timeout, a
 * download that broke off) fails the reply job, which BullMQ retries with backoff before Claude
 * is paid (law 7); a permanent one, no transcriber, or retries spent gives the note today's
 * honest MEDIA_REPLY with a logged reason (law 6): a customer's voice note alone never becomes
 * a dead letter.
 */

export interface VoiceNoteDeps {
  db: Db;
  graph: GraphClient;
  transcriber: Transcriber | undefined;
}

/**
 * The reply job's ears: the transcriber, and what a voice note that cannot be heard is
 * answered (MEDIA_REPLY, `reading`), given once at start.
 */
export class VoiceNotes {
  constructor(
    private readonly deps: VoiceNoteDeps,
    private readonly reading: Pick<DescribeSettings, "mediaReply">,
  ) {}

  /** Each note heard and its words stored, or settled with MEDIA_REPLY; a passing failure throws (the job retries) unless this is the last attempt. */
  async hear(voiceNotes: readonly { id: string; payload: unknown }[], lastAttempt: boolean, log: Logger): Promise<void> {
    const { deps } = this;
    for (const note of voiceNotes) {
      const noteLog = log.child({ message: note.id });
      try {
        const words = await transcribe(deps, note.payload);
        if (await storeTranscript(deps.db, note.id, words)) noteLog.info({ event: "voice_note.transcribed", chars: words.length }, "voice note transcribed");
      } catch (error) {
        const settled = error instanceof PermanentError || (error instanceof RetryableError && lastAttempt);
        if (!settled) {
          if (error instanceof RetryableError) {
            noteLog.warn({ event: "voice_note.retry", source: error.source, code: error.code, reason: error.reason }, "voice note not heard yet; will retry");
          }
          throw error; // passing failures retry the job; Postgres or Redis away waits (policy.ts)
        }
        const fallback = voiceNoteFallback(this.reading, error.reason);
        const outcome = fallback.kind === "canned" ? { cannedText: fallback.text } : { skipReason: fallback.reason };
        if (await voiceNoteUnheard(deps.db, note.id, outcome)) {
          noteLog.warn(
            {
              event: "voice_note.not_transcribed",
              source: error.source,
              code: error.code,
              reason: error.reason,
              retriesSpent: !(error instanceof PermanentError),
            },
            "voice note could not be heard; it gets MEDIA_REPLY",
          );
        }
      }
    }
  }
}

async function transcribe(deps: VoiceNoteDeps, payload: unknown): Promise<string> {
  if (!deps.transcriber) {
    // Stored while TRANSCRIBE_BASE_URL was set, answered after a restart without it.
    throw new PermanentError({ source: "transcriber", code: "not_configured", reason: "no transcriber is configured (TRANSCRIBE_BASE_URL)" });
  }
  const media = voiceNoteMedia(payload as Record<string, unknown>);
  if (!media) throw new PermanentError({ source: "transcriber", code: "no_media", reason: "the voice note names no media id" });
  // Larger than the transcriber takes: refused before a byte is posted (graph-client.ts).
  const audio = await deps.graph.downloadMedia(media.id, TRANSCRIBE_MAX_BYTES);
  const words = (await deps.transcriber.transcribe(audio.data)).trim();
  if (!words) throw new PermanentError({ source: "transcriber", code: "no_words", reason: "the transcriber heard no words in it" });
  return words;
}
