import { readFileSync } from "node:fs";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { FakeTranscriber, openAiError } from "./support/fake-transcriber.ts";
import { eventually, type Harness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { envelope, messagesChange, metaWire, type textMessage, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 20, point 3: a voice note is heard through an OpenAI-compatible transcriber, its words
 * stored with the message once and answered by Claude; a transcriber that refuses, or none at
 * all, leaves today's honest MEDIA_REPLY, with a logged reason.
 */

const harness = harnessPerTest();
let transcribers: FakeTranscriber[] = [];
afterEach(async () => {
  await Promise.all(transcribers.map((t) => t.stop()));
  transcribers = [];
});

const MEDIA_REPLY = "I can't listen to voice notes: please write.";
const MEDIA_ID = "2468013579"; // the fixture's
const WAMID = "wamid.FIXTURE.VOICE";
const CUSTOMER = "5215512345678";
const OGG = Buffer.concat([Buffer.from("OggS\0\x02"), Buffer.alloc(2048, 7)]);

/** The voice-note fixture as Meta would send it now (the 24-hour window counts from its timestamp). */
function voiceNote(): string {
  const now = String(Math.floor(Date.now() / 1000));
  return readFileSync("fixtures/messages/audio-voice.json", "utf8").replaceAll('"timestamp":"1764470000"', `"timestamp":"${now}"`);
}

interface LogLine {
  event?: string;
  reason?: string;
  [key: string]: unknown;
}

async function system(options: { transcribe?: boolean; env?: Record<string, string> } = {}) {
  const lines: LogLine[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as LogLine) });
  const transcriber = await new FakeTranscriber().start();
  transcribers.push(transcriber);
  const transcribe = options.transcribe ?? true;
  const h = await harness({
    logger,
    env: {
      MEDIA_REPLY,
      ...(transcribe ? { TRANSCRIBE_BASE_URL: transcriber.url, TRANSCRIBE_API_KEY: "test-transcribe-key", TRANSCRIBE_MODEL: "whisper-large-v3" } : {}),
      ...options.env,
    },
  });
  h.graph.media.set(MEDIA_ID, { mimeType: "audio/ogg; codecs=opus", bytes: OGG });
  return { h, transcriber, lines };
}

const stored = (h: Harness) => h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: WAMID } });

describe("a voice note, heard", () => {
  it("is posted to the transcriber as OpenAI's API wants it, transcribed once and answered by Claude from its words", async () => {
    const { h, transcriber } = await system();
    expect((await h.deliver(voiceNote())).statusCode).toBe(200);
    await eventually(() => h.graph.sends.length === 1, "the reply");

    expect(transcriber.requests).toHaveLength(1);
    const request = transcriber.requests[0]!;
    expect(request.path).toBe("/v1/audio/transcriptions");
    expect(request.authorization).toBe("Bearer test-transcribe-key");
    expect(request.file).toMatchObject({ name: "voice.ogg", type: "audio/ogg" });
    expect(request.file?.bytes.equals(OGG)).toBe(true);
    expect(request.model).toBe("whisper-large-v3");
    expect(request.responseFormat).toBe("json");

    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain(`[Voice note] ${transcriber.words}`);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect(await stored(h)).toMatchObject({ transcript: transcriber.words, text: `[Voice note] ${transcriber.words}`, cannedText: null });
  });

  it("keeps its words in the history Claude reads for the next message, without asking the transcriber again", async () => {
    const { h, transcriber } = await system();
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the first reply");
    await h.deliver(textWebhook({ text: "and in red?", from: CUSTOMER }).body);
    await eventually(() => h.graph.sends.length === 2, "the second reply");
    expect(h.claude.userText(1)).toContain(`[Voice note] ${transcriber.words}`);
    expect(h.claude.userText(1)).toContain("and in red?");
    expect(transcriber.requests).toHaveLength(1);
  });

  it("a stored transcript is never asked for again: Claude failing after it retries the reply, not the transcription", async () => {
    const { h, transcriber } = await system();
    h.claude.answer({ status: 529 }); // overloaded: the reply job retries
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the reply after the retry");
    expect(h.claude.requests).toHaveLength(2);
    expect(h.claude.userText(1)).toContain(transcriber.words);
    expect(transcriber.requests).toHaveLength(1);
    expect(h.graph.requests.filter((r) => r.path.startsWith("/download/"))).toHaveLength(1);
  });

  it("a retry after one voice note's words are stored asks only for the others'", async () => {
    const { h, transcriber } = await system();
    const notes = ["media.first", "media.second"].map((id, i) => {
      h.graph.media.set(id, { mimeType: "audio/ogg; codecs=opus", bytes: Buffer.concat([OGG, Buffer.from([i])]) });
      return { from: CUSTOMER, id: uniqueWamid(), timestamp: String(Math.floor(Date.now() / 1000)), type: "audio", audio: { id, voice: true } };
    });
    // The first is heard and stored; the second meets a 503, so the reply job fails and retries.
    transcriber.answer({ text: "the first words" }, { status: 503 }, { text: "the second words" });
    await h.deliver(metaWire(envelope([messagesChange(notes as unknown as ReturnType<typeof textMessage>[])])));
    await eventually(() => h.graph.sends.length === 1, "one reply to both");
    await untilQuiet(h, { also: [transcriber] });
    expect(transcriber.requests.map((r) => r.file?.bytes.at(-1))).toEqual([0, 1, 1]);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toMatch(/\[Voice note\] the first words[\s\S]*\[Voice note\] the second words/);
  });

  it("shows staff its words when its answer is dead-lettered", async () => {
    const { h, transcriber } = await system();
    h.claude.answer({ status: 400 }); // permanent: a dead letter at once
    await h.deliver(voiceNote());
    const letter = await eventually(() => h.db.deadLetter.findFirst(), "the dead letter");
    const detail = (await h.app.inject({ method: "GET", url: `/admin/dlq/${letter.id}`, headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).json() as {
      timeline: { direction: string; type: string; text: string | null }[];
    };
    expect(detail.timeline.find((t) => t.direction === "in")).toMatchObject({ type: "audio", text: `[Voice note] ${transcriber.words}` });
  });
});

describe("a voice note the transcriber cannot hear", () => {
  it("a 4xx gets MEDIA_REPLY with a logged reason, Claude is not paid, and the transcriber is asked once", async () => {
    const { h, transcriber, lines } = await system();
    transcriber.answer({ status: 400, body: openAiError("Invalid file format.", "invalid_request_error") });
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the media reply");
    await untilQuiet(h, { also: [transcriber] });
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
    expect(transcriber.requests).toHaveLength(1);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect(lines.find((l) => l.event === "voice_note.not_transcribed")).toMatchObject({
      code: "http_400",
      reason: "The transcriber answered HTTP 400: Invalid file format.",
    });
    expect(await stored(h)).toMatchObject({ transcript: null, cannedText: MEDIA_REPLY });
  });

  it("a 5xx is retried with backoff before Claude is asked; then the words are answered, Claude called once", async () => {
    const { h, transcriber, lines } = await system();
    transcriber.answer({ status: 503 });
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the reply");
    await untilQuiet(h, { also: [transcriber] });
    expect(transcriber.requests).toHaveLength(2);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain(transcriber.words);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect(lines.find((l) => l.event === "voice_note.retry")).toMatchObject({ code: "http_503" });
  });

  it("a transcriber down through every attempt leaves MEDIA_REPLY, never a dead letter", async () => {
    const { h, transcriber, lines } = await system();
    transcriber.answer(...Array.from({ length: 4 }, () => ({ status: 500 })));
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the media reply", 15_000);
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY]);
    expect(transcriber.requests).toHaveLength(Number(h.env.JOB_ATTEMPTS));
    expect(h.claude.requests).toHaveLength(0);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect(lines.find((l) => l.event === "voice_note.not_transcribed")).toMatchObject({ code: "http_500", retriesSpent: true });
  });

  it("over 25 MB gets MEDIA_REPLY without a byte posted to the transcriber", async () => {
    const { h, transcriber, lines } = await system();
    h.graph.media.set(MEDIA_ID, { mimeType: "audio/ogg; codecs=opus", bytes: Buffer.alloc(25 * 1024 * 1024 + 1) });
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the media reply");
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY]);
    expect(transcriber.requests).toHaveLength(0);
    expect(h.graph.requests.filter((r) => r.path.startsWith("/download/"))).toHaveLength(0);
    expect(lines.find((l) => l.event === "voice_note.not_transcribed")?.reason).toMatch(/limit is 26214400/);
  });

  it("with no transcriber configured, gets MEDIA_REPLY as before, Claude not paid", async () => {
    const { h, transcriber } = await system({ transcribe: false });
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the media reply");
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
    expect(transcriber.requests).toHaveLength(0);
  });
});

describe("the transcript stays out of logs (law 10)", () => {
  it("no log line carries the words or the API key", async () => {
    const { h, transcriber, lines } = await system();
    await h.deliver(voiceNote());
    await eventually(() => h.graph.sends.length === 1, "the reply");
    const all = JSON.stringify(lines);
    expect(all).not.toContain(transcriber.words);
    expect(all).not.toContain("test-transcribe-key");
    expect(lines.find((l) => l.event === "voice_note.transcribed")).toBeDefined();
  });
});
