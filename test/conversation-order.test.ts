import { describe, expect, it } from "vitest";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { envelope, messagesChange, metaWire, PHONE_NUMBER_ID, textMessage, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Law 8, for every kind of answer: configured answers (a voice note, an opt-out confirmation)
 * take the same ordered, debounced path as Claude's. Messages are stored concurrently; what the
 * bot does about them is decided in the order the customer wrote them.
 */

const harness = harnessPerTest();

const MEDIA_REPLY = "I can't listen to voice notes: please write.";
const OPT_OUT_REPLY = "You won't hear from us again. Send START to come back.";
// A burst is stored by concurrent inbound jobs: the debounce gives the slowest of them time, even on a loaded CI machine.
const env = { MEDIA_REPLY, OPT_OUT_REPLY, REPLY_DEBOUNCE_MS: "500" };
const FROM = "34600000001";
const OTHER_NUMBER_ID = "106540352249999";

const now = () => String(Math.floor(Date.now() / 1000));
const voiceNote = () => ({
  from: FROM,
  id: uniqueWamid(),
  timestamp: now(),
  type: "audio",
  audio: { id: `media.${uniqueWamid()}`, mime_type: "audio/ogg; codecs=opus", voice: true },
});
const sticker = (mediaId: string) => ({
  from: FROM,
  id: uniqueWamid(),
  timestamp: now(),
  type: "sticker",
  sticker: { id: mediaId, mime_type: "image/webp", animated: false },
});
const text = (body: string) => textMessage({ text: body, from: FROM });

/** One POST carrying these messages, in this order, as Meta batches a burst. */
function burst(messages: object[], phoneNumberId = PHONE_NUMBER_ID): string {
  return metaWire(envelope([messagesChange(messages as ReturnType<typeof textMessage>[], phoneNumberId)]));
}

const replies = (h: Harness) => h.db.reply.findMany({ orderBy: { createdAt: "asc" }, include: { messages: true } });

describe("a burst gets one answer, whatever kind", () => {
  it("three voice notes in a burst get one configured answer, and Claude is not paid", async () => {
    const h = await harness({ env });
    expect((await h.deliver(burst([voiceNote(), voiceNote(), voiceNote()]))).statusCode).toBe(200);
    await eventually(() => h.graph.sends.length === 1, "the answer");
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
    const [reply] = await replies(h);
    expect(reply).toMatchObject({ kind: "canned", state: "sent" });
    expect(reply!.messages).toHaveLength(3);
  });

  it("three stickers in a burst get one answer from Claude, which sees all three", async () => {
    const h = await harness({ env });
    for (const id of ["st1", "st2", "st3"]) h.graph.media.set(id, { mimeType: "image/webp", bytes: Buffer.from(`webp-${id}`) });
    await h.deliver(burst(["st1", "st2", "st3"].map(sticker)));
    await eventually(() => h.graph.sends.length === 1, "the answer");
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0).match(/\[Sent a sticker\]/g)).toHaveLength(3);
  });
});

describe("answers leave in the order the customer wrote", () => {
  it('"price?" then a voice note in one delivery: Claude\'s answer first, then the voice-note answer', async () => {
    const h = await harness({ env });
    await h.deliver(burst([text("price?"), voiceNote()]));
    await eventually(() => h.graph.sends.length === 2, "both answers");
    expect(h.graph.sentTexts).toEqual(["Reply #1", MEDIA_REPLY]);
    expect(h.claude.userText(0)).toContain("price?");
  });

  it('a voice note then "price?" in one delivery: the voice-note answer first, and Claude answers only the question', async () => {
    const h = await harness({ env });
    await h.deliver(burst([voiceNote(), text("price?")]));
    await eventually(() => h.graph.sends.length === 2, "both answers");
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY, "Reply #1"]);
    expect(h.claude.requests).toHaveLength(1);
  });

  it('"STOP" then "hi" in one delivery: the confirmation, and nothing after it', async () => {
    const h = await harness({ env });
    await h.deliver(burst([text("STOP"), text("hi")]));
    await eventually(() => h.graph.sends.length === 1, "the confirmation");
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual([OPT_OUT_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
    const hi = await h.db.inboundMessage.findFirstOrThrow({ where: { text: "hi" } });
    expect(hi).toMatchObject({ replyId: null, skipReason: "customer opted out" });
  });

  it('"hi" then "STOP" in one delivery: an answer to "hi", then the confirmation', async () => {
    const h = await harness({ env });
    await h.deliver(burst([text("hi"), text("STOP")]));
    await eventually(() => h.graph.sends.length === 2, "both answers");
    expect(h.graph.sentTexts).toEqual(["Reply #1", OPT_OUT_REPLY]);
  });
});

describe("opt-out belongs to one business number", () => {
  it("STOP to one number leaves the customer's conversation with another number answered", async () => {
    const h = await harness({ env });
    await h.deliver(burst([text("STOP")]));
    await eventually(() => h.graph.sends.length === 1, "the confirmation");
    await h.deliver(burst([text("hello?")], OTHER_NUMBER_ID));
    await eventually(() => h.graph.sends.length === 2, "the other number's answer");
    expect(h.graph.sends[1]!.path).toContain(OTHER_NUMBER_ID);
    expect(h.graph.sentTexts[1]).toBe("Reply #1");
    const conversations = await h.db.conversation.findMany({ orderBy: { createdAt: "asc" } });
    expect(conversations.map((c) => [c.phoneNumberId, c.optedOutAt !== null])).toEqual([
      [PHONE_NUMBER_ID, true],
      [OTHER_NUMBER_ID, false],
    ]);
  });
});
