import { describe, expect, it } from "vitest";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { DISPLAY_NUMBER, envelope, metaWire, PHONE_NUMBER_ID, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Law 11 against hostile but validly signed input: data Postgres cannot store as it came (a NUL
 * character, a lone UTF-16 surrogate, a timestamp no clock could write) is cleaned and
 * answered; data that can never succeed is settled at once, never retried, its message kept
 * for staff when it can be named; and none of it keeps any other customer from an answer.
 */

const harness = harnessPerTest();
const env = { REPLY_DEBOUNCE_MS: "0" };
const now = () => String(Math.floor(Date.now() / 1000));

/** One `messages` change carrying these raw message objects, each sender with the contact entry Meta gives. */
function rawBatch(messages: Record<string, unknown>[], names: Record<string, string> = {}): string {
  const senders = [...new Set(messages.map((m) => m.from).filter((f): f is string => typeof f === "string"))];
  const value = {
    messaging_product: "whatsapp",
    metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: PHONE_NUMBER_ID },
    contacts: senders.map((wa_id) => ({ profile: { name: names[wa_id] ?? "Ana" }, wa_id })),
    messages,
  };
  return metaWire(envelope([{ field: "messages", value }]));
}

const text = (from: string, body: unknown, extra: Record<string, unknown> = {}) => ({
  from,
  id: uniqueWamid(),
  timestamp: now(),
  type: "text",
  text: { body },
  ...extra,
});

async function failedJobs(h: Harness): Promise<number> {
  const counts = await Promise.all([h.queues.inbound, h.queues.reply, h.queues.status, h.queues.events].map((q) => q.getJobCounts("failed")));
  return counts.reduce((sum, c) => sum + (c.failed ?? 0), 0);
}

const repliesTo = (h: Harness, phone: string) => h.graph.sends.filter((s) => s.body.to === phone).length;

describe("data Postgres could not store as it came is cleaned, and answered", () => {
  it("a NUL in the text and in the customer's name: answered, stored without it, and no job fails", async () => {
    const h = await harness({ env });
    const message = text("34600000001", "can I\u0000 pay later?");
    expect((await h.deliver(rawBatch([message], { "34600000001": "Jo\u0000sé" }))).statusCode).toBe(200);
    await eventually(() => repliesTo(h, "34600000001") === 1, "the answer");
    expect(h.claude.userText(0)).toContain("can I pay later?");
    expect(await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: message.id } })).toMatchObject({ text: "can I pay later?" });
    expect(await h.db.contact.findFirstOrThrow()).toMatchObject({ name: "José" });
    expect(await failedJobs(h)).toBe(0);
  });

  it("a timestamp no clock could write is read as the time the webhook received it: answered, and the 24-hour window is not stretched to the year 5138", async () => {
    const h = await harness({ env });
    const message = text("34600000002", "hello?", { timestamp: "99999999999999" });
    const before = Date.now();
    expect((await h.deliver(rawBatch([message]))).statusCode).toBe(200);
    await eventually(() => repliesTo(h, "34600000002") === 1, "the answer");
    const stored = await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: message.id }, include: { conversation: true } });
    expect(stored.sentAt.getTime()).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
    expect(stored.sentAt.getTime()).toBeLessThanOrEqual(Date.now());
    expect(stored.conversation.lastInboundAt!.getTime()).toBe(stored.sentAt.getTime());
    expect(await failedJobs(h)).toBe(0);
  });

  it("a timestamp that is no time at all (negative, a word, a number) is read as the time received too: each message answered, none ignored at the webhook (issue 32.5)", async () => {
    const h = await harness({ env });
    const stamps: unknown[] = ["-5", "soon", 1.5, Number(now())];
    const phones = stamps.map((_, i) => `3460000001${i}`);
    const messages = stamps.map((timestamp, i) => text(phones[i]!, `hello ${i}`, { timestamp }));
    const before = Date.now();
    expect((await h.deliver(rawBatch(messages))).statusCode).toBe(200);
    for (const phone of phones) await eventually(() => repliesTo(h, phone) === 1, `the answer to ${phone}`);
    for (const message of messages) {
      const stored = await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: message.id } });
      expect(stored.sentAt.getTime()).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 - 1000);
      expect(stored.sentAt.getTime()).toBeLessThanOrEqual(Date.now());
    }
    expect(await failedJobs(h)).toBe(0);
  });
});

describe("a job whose data can never succeed is settled at once", () => {
  it("an inbound job without a timestamp: never retried, and its message kept as a dead letter for staff", async () => {
    const h = await harness({ env });
    const id = uniqueWamid();
    const job = await h.queues.inbound.add("inbound", {
      phoneNumberId: PHONE_NUMBER_ID,
      sender: { waId: "34600000003" },
      message: { from: "34600000003", id, type: "text", text: { body: "where is my order?" } },
    } as never);
    await eventually(async () => (await job.getState()) === "completed", "the job to be settled");
    expect(await h.queues.inbound.getJob(job.id!)).toMatchObject({ returnvalue: "invalid", attemptsMade: 1 });
    const letter = await eventually(
      () => h.db.deadLetter.findFirst({ where: { code: "invalid_job" }, include: { reply: { include: { messages: true } } } }),
      "the dead letter",
    );
    expect(letter.reply!.messages.map((m) => [m.wamid, m.text])).toEqual([[id, "where is my order?"]]);
    expect(letter.reason).toContain("message.timestamp");
    expect(h.claude.requests).toHaveLength(0);
    expect(await failedJobs(h)).toBe(0);
  });

  it("a reply job that names no conversation: settled, never retried", async () => {
    const h = await harness({ env });
    const job = await h.queues.reply.add("reply", { conversationId: "not-a-uuid" });
    await eventually(async () => (await job.getState()) === "completed", "the job to be settled");
    expect((await h.queues.reply.getJob(job.id!))?.returnvalue).toBe("invalid");
    expect(await failedJobs(h)).toBe(0);
  });
});

describe("a delivery of hostile items beside good ones", () => {
  it("every good message in it is answered once, and so is a message written afterwards; nothing ends in the failed set", async () => {
    const h = await harness({ env });
    // A reply far beyond WhatsApp's 4096 units, for the message that asks for it: the worker splits it without stalling.
    h.claude.reply = (request) => (JSON.stringify(request.messages).includes("long please") ? "🙂".repeat(50_000) : "ok");
    const good = Array.from({ length: 12 }, (_, i) => `3461000${String(i).padStart(4, "0")}`);
    const hostile = [
      text(good[0]!, "nul \u0000 inside"),
      text(good[1]!, "lone \ud800 surrogate"),
      text(good[2]!, "from the far future", { timestamp: "99999999999999" }),
      text(good[3]!, "from 1970", { timestamp: "0" }),
      text(good[4]!, 12345),
      { from: good[5], timestamp: now(), type: "text", text: { body: "no id" } },
      { id: uniqueWamid(), timestamp: now(), type: "text", text: { body: "no sender" } },
      text(good[6]!, "a type that is an object", { type: { nested: true } }),
      text(good[7]!, "long please"),
      { ...text(good[8]!, "deep"), extra: JSON.parse(`${"[".repeat(200)}${"]".repeat(200)}`) as unknown },
    ];
    const goodOnes = good.map((from) => text(from, `a normal question from ${from}`));
    expect((await h.deliver(rawBatch([...hostile, ...goodOnes]))).statusCode).toBe(200);

    const askedAbout = (from: string) => h.claude.requests.filter((r) => JSON.stringify(r.messages).includes(`a normal question from ${from}`)).length;
    await eventually(() => good.every((from) => askedAbout(from) > 0), "Claude to be asked every good customer's question", 60_000);
    await eventually(async () => (await h.db.reply.count({ where: { state: { in: ["generating", "ready"] } } })) === 0, "every reply to be done", 60_000);
    for (const from of good) {
      expect(askedAbout(from), `Claude calls for ${from}'s question`).toBe(1);
      expect(repliesTo(h, from), `replies to ${from}`).toBeGreaterThanOrEqual(1);
    }
    const after = textWebhook({ text: "one more thing", from: "34699999999" });
    await h.deliver(after.body);
    await eventually(() => repliesTo(h, "34699999999") === 1, "the answer to a message written afterwards", 30_000);
    await untilQuiet(h);
    expect(await failedJobs(h)).toBe(0);
  }, 120_000);
});
