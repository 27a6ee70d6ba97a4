import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 3: every inbound type Meta sends gets a deliberate outcome (law 6), from fixtures in Meta's wire format. */

const harness = harnessPerTest();

const MEDIA_REPLY = "I read text, images and PDFs: please write your question.";
const DOCUMENT_REPLY = "Please send it as a PDF.";
const FALLBACK_REPLY = "I can't open that kind of message.";
const env = { MEDIA_REPLY, DOCUMENT_REPLY, FALLBACK_REPLY };

/** A fixture as Meta would send it now (the 24-hour window counts from the message's timestamp). */
function fixture(name: string): string {
  const now = String(Math.floor(Date.now() / 1000));
  return readFileSync(`fixtures/messages/${name}.json`, "utf8").replaceAll('"timestamp":"1764470000"', `"timestamp":"${now}"`);
}

const repliedTo = async (h: Harness, wamid: string) => (await h.db.inboundMessage.findUnique({ where: { wamid }, include: { reply: true } }))?.reply ?? null;

describe("answered by Claude, as readable text", () => {
  it.each([
    ["interactive-button-reply", 'Chose the option "Track my order"', "id track-order"],
    ["interactive-list-reply", 'Chose the option "Size M" — Chest 96–101 cm', "id size-m"],
    ["button", 'Tapped the button "Yes, confirm"', "payload CONFIRM_APPOINTMENT"],
    ["location", "Shared a location: Café Tacuba, Tacuba 28, Centro, CDMX, latitude 19.4326, longitude -99.1332", "maps.example"],
    ["contacts", "Shared a contact: Lucía Gómez, Flores Lucía, CELL +52 55 1234 5678, lucia@example.com", "Lucía"],
    ["order", "Sent an order: 6 × sku-croissant at 35 MXN; 2 × sku-cafe at 48.5 MXN", "Para el sábado"],
  ])("%s", async (name, expected, alsoExpected) => {
    const h = await harness({ env });
    expect((await h.deliver(fixture(name))).statusCode).toBe(200);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain(expected);
    expect(h.claude.userText(0)).toContain(alsoExpected);
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
  });

  it("a reply to an earlier message carries that message's text to Claude", async () => {
    const h = await harness({ env });
    const earlier = textWebhook({ id: "wamid.FIXTURE.EARLIER", text: "I'd like the blue jacket", from: "5215512345678" });
    await h.deliver(earlier.body);
    await eventually(() => h.graph.sends.length === 1, "the first reply");
    await h.deliver(fixture("text-replying-to-earlier"));
    await eventually(() => h.graph.sends.length === 2, "the second reply");
    expect(h.claude.userText(1)).toContain(`[Replying to their earlier message: "I'd like the blue jacket"]\n¿Y eso cuánto cuesta?`);
  });

  it("a reply quoting another customer's message (its wamid, from anyone) never shows Claude that message's words", async () => {
    const h = await harness({ env });
    const stranger = textWebhook({ id: "wamid.FIXTURE.EARLIER", text: "my card ends in 4242", from: "34699999999" });
    await h.deliver(stranger.body);
    await eventually(() => h.graph.sends.length === 1, "the stranger's reply");
    await h.deliver(fixture("text-replying-to-earlier")); // from 5215512345678, quoting the stranger's wamid
    await eventually(() => h.graph.sends.length === 2, "the quoting customer's reply");
    expect(h.claude.userText(1)).toContain("¿Y eso cuánto cuesta?");
    expect(h.claude.userText(1)).not.toContain("4242");
  });
});

interface Block {
  type: string;
  text?: string;
  source?: { type: string; media_type: string; data: string };
}
const blocksOf = (h: Harness, i: number) => h.claude.requests[i]!.messages.flatMap((m) => m.content as Block[]);

describe("images and PDFs are shown to Claude", () => {
  const PNG = Buffer.from("89504e470d0a1a0a0000000d4948445200000001000000010806000000", "hex");
  const WEBP = Buffer.from("524946461a000000574542505650384c0d0000002f0000001007101111888808", "hex");
  const PDF = Buffer.from("%PDF-1.4\n1 0 obj<</Type/Catalog>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n");

  it.each([
    ["image", "1234567890123456", "image/png", PNG, "image", "[Sent an image]\n¿Tienen este modelo?"],
    ["sticker", "9876543210", "image/webp", WEBP, "image", "[Sent a sticker]"],
    ["document", "1122334455", "application/pdf", PDF, "document", '[Sent a PDF "factura-0042.pdf"]\nFactura'],
  ] as const)("%s: downloaded through Meta's media flow and passed to Claude with its caption", async (name, id, mimeType, bytes, block, text) => {
    const h = await harness({ env });
    h.graph.media.set(id, { mimeType, bytes });
    await h.deliver(fixture(name));
    await eventually(() => h.graph.sends.length === 1, "the reply");
    const blocks = blocksOf(h, 0);
    expect(blocks.map((b) => b.type)).toEqual([block, "text"]);
    expect(blocks[0]!.source).toEqual({ type: "base64", media_type: mimeType, data: bytes.toString("base64") });
    expect(blocks[1]!.text).toBe(text);
    // Both steps carried the token: the metadata GET, then the short-lived URL.
    expect(h.graph.requests.filter((r) => r.method === "GET").map((r) => r.authorization)).toEqual(["Bearer test-access-token", "Bearer test-access-token"]);
  });

  it("an image over MEDIA_MAX_BYTES is not downloaded; Claude is told, and the customer still gets an answer", async () => {
    const h = await harness({ env: { ...env, MEDIA_MAX_BYTES: "1024" } });
    h.graph.media.set("1234567890123456", { mimeType: "image/jpeg", bytes: Buffer.alloc(4096) });
    await h.deliver(fixture("image"));
    await eventually(() => h.graph.sends.length === 1, "the reply");
    expect(blocksOf(h, 0).map((b) => b.type)).toEqual(["text"]);
    expect(h.claude.userText(0)).toMatch(/\[The file could not be opened: The file is 4096 bytes; the limit is 1024\]/);
    expect(h.graph.requests.filter((r) => r.path.startsWith("/download/"))).toHaveLength(0);
  });

  it("an expired media id leaves a note for Claude instead of failing the reply", async () => {
    const h = await harness({ env });
    await h.deliver(fixture("image")); // nothing stored under its id: Meta answers (#100)
    await eventually(() => h.graph.sends.length === 1, "the reply");
    expect(h.claude.userText(0)).toContain("[The file could not be opened:");
    expect(await h.db.deadLetter.count()).toBe(0);
  });
});

describe("answered honestly without Claude", () => {
  it("a document that is not a PDF gets the configured document reply", async () => {
    const h = await harness({ env });
    await h.deliver(fixture("document").replace("application\\/pdf", "application\\/vnd.ms-excel"));
    await eventually(() => h.graph.sends.length === 1, "the document reply");
    expect(h.graph.sentTexts).toEqual([DOCUMENT_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
  });

  it.each(["audio-voice", "video"])("%s gets the configured media reply, and Claude is not paid", async (name) => {
    const h = await harness({ env });
    await h.deliver(fixture(name));
    const wamid = JSON.parse(fixture(name)).entry[0].changes[0].value.messages[0].id as string;
    await eventually(async () => (await repliedTo(h, wamid))?.state === "sent", "the media reply to be sent");
    expect(h.graph.sentTexts).toEqual([MEDIA_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
    expect(await repliedTo(h, wamid)).toMatchObject({ kind: "canned", state: "sent", text: MEDIA_REPLY });
  });

  it("an unsupported message gets the fallback reply, once, and is not retried", async () => {
    const h = await harness({ env });
    await h.deliver(fixture("unsupported"));
    await eventually(() => h.graph.sends.length === 1, "the fallback reply");
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual([FALLBACK_REPLY]);
    expect(h.claude.requests).toHaveLength(0);
    expect(await h.queues.inbound.getJobCounts("failed")).toEqual({ failed: 0 });
  });

  it("with the fallback reply configured empty, an unsupported message is stored and deliberately left unanswered", async () => {
    const h = await harness({ env: { ...env, FALLBACK_REPLY: "" } });
    await h.deliver(fixture("unsupported"));
    const stored = await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: "wamid.FIXTURE.UNSUP" } }), "the message to be stored");
    expect(stored).toMatchObject({ type: "unsupported", replyId: null, skipReason: 'message type "unsupported" is not supported' });
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(0);
  });
});

describe("not answered, with a logged reason", () => {
  it.each([
    ["reaction", "reaction"],
    ["system-number-changed", "system notice (e.g. the customer changed number)"],
  ])("%s is stored and skipped", async (name, reason) => {
    const h = await harness({ env });
    await h.deliver(fixture(name));
    const wamid = JSON.parse(fixture(name)).entry[0].changes[0].value.messages[0].id as string;
    const stored = await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid } }), "the message to be stored");
    expect(stored.skipReason).toBe(reason);
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(0);
    expect(h.graph.readReceipts).toHaveLength(0); // no typing indicator for a message we will not answer
    expect(h.claude.requests).toHaveLength(0);
  });
});

describe("our reply", () => {
  it("quotes the message it answers when the customer has written again since", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    h.claude.latencyMs = 600;
    const first = textWebhook({ text: "Do you deliver on Sundays?" });
    await h.deliver(first.body);
    await eventually(() => h.claude.inFlight === 1, "Claude to be writing the first reply");
    await h.deliver(textWebhook({ text: "And what about holidays?" }).body);
    await eventually(() => h.graph.sends.length === 2, "both replies");
    expect(h.graph.sends[0]!.body.context).toEqual({ message_id: first.wamids[0] });
    expect(h.graph.sends[1]!.body.context).toBeUndefined(); // it answers the latest message
  });
});

describe("the 24-hour customer-service window", () => {
  it("a reply that would go out after the window closed is not sent, and Claude is not paid: a dead letter says why", async () => {
    const h = await harness();
    const dayAndAnHourAgo = Math.floor(Date.now() / 1000) - 25 * 3600;
    await h.deliver(textWebhook({ text: "late delivery of an old message", timestamp: dayAndAnHourAgo }).body);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open" } }), "a dead letter");
    expect(letter).toMatchObject({ source: "window", code: "window_closed" });
    expect(letter.reason).toMatch(/24-hour customer-service window closed/);
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(0);
    expect(h.claude.requests).toHaveLength(0);
  });

  it("counts from the customer's newest message by Meta's timestamp, not from when we process it", async () => {
    const h = await harness();
    const now = Math.floor(Date.now() / 1000);
    await h.deliver(textWebhook({ text: "new", timestamp: now - 60 }).body);
    await h.deliver(textWebhook({ text: "old, delivered late", timestamp: now - 30 * 3600 }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) >= 1, "a reply");
    const conversation = await h.db.conversation.findFirstOrThrow();
    expect(conversation.lastInboundAt?.getTime()).toBe((now - 60) * 1000);
  });
});
