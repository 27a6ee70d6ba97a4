import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stripVTControlCharacters } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { STAFF_JS } from "./support/build.ts";
import { type Business, startBusiness } from "./support/business-fixture.ts";
import { saysAndIsAnswered } from "./support/customer.ts";
import { everyKey, everyRow } from "./support/every-row.ts";
import { graphError } from "./support/fake-graph.ts";
import { FakeTranscriber } from "./support/fake-transcriber.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { PrivateRedis } from "./support/private-redis.ts";
import { untilQuiet } from "./support/quiet.ts";
import { envelope, messagesChange, metaWire, PHONE_NUMBER_ID, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 35: a customer's data (their words, a photo's caption, a voice note's transcript, a
 * business tool's input and answer, a dead letter's draft and note, a rating) found by staff,
 * exported whole and erased by operators, each audited; after the erase no row and no Redis key
 * holds them, the other customer's data is whole, and counts and costs are the same.
 */

const PASSWORD = "correct horse battery staple";
const ANA = { phone: "447700900123", name: "Ana Lima" };
const BEN = { phone: "351912000111", name: "Ben Costa" };
const bearer = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };

const VOICE_ID = "MEDIA-ana-voice";
const OGG = Buffer.concat([Buffer.from("OggS\0\x02"), Buffer.alloc(2048, 7)]);

let h: Harness;
let root: string;
let business: Business;
let transcriber: FakeTranscriber;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "customer-data-"));
  business = await startBusiness(root, { lookup_order: ["GET", "/orders/{orderId}", ["orderId"]] });
  transcriber = await new FakeTranscriber().start();
  transcriber.words = "I want to return my red boots";
  h = await startHarness({
    env: {
      REPLY_DEBOUNCE_MS: "0",
      JOB_ATTEMPTS: "1",
      PHONE_NUMBERS_FILE: business.numbersFile,
      TRANSCRIBE_BASE_URL: transcriber.url,
      TRANSCRIBE_API_KEY: "test-transcribe-key",
      CSAT_AFTER_SECONDS: "1",
    },
  });
  h.graph.media.set(VOICE_ID, { mimeType: "audio/ogg; codecs=opus", bytes: OGG });
  h.startWorkers();
  await addStaff(h.db, "sam@example.com", PASSWORD);
  // Ana: a question answered, a photo with a caption, and a reply Meta refuses, discarded with a note.
  h.claude.answer({ text: "Yes, we ship to Porto." });
  await say(ANA, "Do you ship to Porto?");
  const photo = {
    from: ANA.phone,
    id: uniqueWamid(),
    timestamp: String(Math.floor(Date.now() / 1000)),
    type: "image",
    image: { id: "MEDIA-ana-1", mime_type: "image/jpeg", caption: "my broken heel" },
  };
  h.claude.answer({ text: "Sorry about the heel: send your order id." });
  h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
  expect((await h.deliver(metaWire(envelope([messagesChange([photo as never], PHONE_NUMBER_ID, { [ANA.phone]: ANA.name })])))).statusCode).toBe(200);
  const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: ANA.phone } } } }), "Ana's item");
  await h.app.inject({ method: "POST", url: `/admin/dlq/${letter.id}/discard`, headers: bearer, payload: { note: "called Ana about the heel" } });
  // A voice note, heard; an order looked up through the business's tool; then asked how it went, and rated.
  h.claude.answer({ text: "Of course: the boots can go back within 30 days." });
  await deliverFromAna({ type: "audio", audio: { id: VOICE_ID, mime_type: "audio/ogg; codecs=opus", voice: true } });
  await eventually(async () => (await h.db.inboundMessage.findFirst({ where: { type: "audio" } }))?.replyId, "the voice note answered");
  h.claude.answer(
    { content: [{ type: "tool_use", id: "toolu_ana", name: "lookup_order", input: { orderId: "A1003" } }] },
    { text: "Order A1003 is delivered." },
  );
  await say(ANA, "Where is my order A1003?");
  await eventually(() => h.graph.interactiveSends.some((send) => send.body.to === ANA.phone), "Ana asked how it went");
  // Meta has the send before the worker records its wamid: waited for, not assumed.
  const ask = await eventually(
    () => h.db.outboundMessage.findFirst({ where: { reply: { kind: "csat", conversation: { contact: { waId: ANA.phone } } }, wamid: { not: null } } }),
    "Ana's ask taken by Meta",
  );
  await deliverFromAna({
    type: "interactive",
    interactive: { type: "button_reply", button_reply: { id: "csat:bad", title: "Bad" } },
    context: { from: "15550783881", id: ask.wamid },
  });
  await eventually(() => h.db.csatAsk.findFirst({ where: { rating: "bad" } }), "Ana's rating");
  h.claude.answer({ text: "Hello Ben." });
  await say(BEN, "Hello");
  await untilQuiet(h);
});
afterAll(async () => {
  await h?.close();
  await Promise.all([business?.stop(), transcriber?.stop()]);
  await rm(root, { recursive: true, force: true });
});

/** One message from Ana, as Meta delivers it. */
async function deliverFromAna(message: Record<string, unknown>): Promise<void> {
  const full = { from: ANA.phone, id: uniqueWamid(), timestamp: String(Math.floor(Date.now() / 1000)), ...message };
  expect((await h.deliver(metaWire(envelope([messagesChange([full as never], PHONE_NUMBER_ID, { [ANA.phone]: ANA.name })])))).statusCode).toBe(200);
}

const say = (who: { phone: string; name: string }, text: string) => saysAndIsAnswered(h, who, text);

async function staffCookie(): Promise<Record<string, string>> {
  const signIn = await h.app.inject({ method: "POST", url: "/admin/session", payload: { email: "sam@example.com", password: PASSWORD } });
  return { cookie: String(signIn.headers["set-cookie"]).split(";")[0]! };
}

describe("GET /admin/contacts", () => {
  it("finds customers by any part of their name, phone (as people write it), for staff too", async () => {
    const found = await h.app.inject({ method: "GET", url: "/admin/contacts?q=lima", headers: await staffCookie() });
    expect(found.statusCode).toBe(200);
    expect(found.json().contacts).toEqual([
      {
        id: expect.any(String),
        label: `+${ANA.phone}`,
        name: ANA.name,
        phone: ANA.phone,
        bsuid: null,
        username: null,
        conversations: 1,
        lastMessageAt: expect.any(String),
      },
    ]);
    const byPhone = await h.app.inject({ method: "GET", url: `/admin/contacts?q=${encodeURIComponent("+351 912-000")}`, headers: bearer });
    expect(byPhone.json().contacts.map((c: { name: string }) => c.name)).toEqual([BEN.name]);
    expect((await h.app.inject({ method: "GET", url: "/admin/contacts?q=nobody", headers: bearer })).json()).toEqual({ contacts: [] });
    expect((await h.app.inject({ method: "GET", url: "/admin/contacts", headers: bearer })).statusCode).toBe(400);
  });
});

describe("GET /admin/contacts/:id/export", () => {
  it("gives operators everything held about the customer as one attached JSON document, and records who exported it", async () => {
    const ana = await h.db.contact.findUniqueOrThrow({ where: { waId: ANA.phone } });
    const staff = await h.app.inject({ method: "GET", url: `/admin/contacts/${ana.id}/export`, headers: await staffCookie() });
    expect(staff.statusCode).toBe(403);

    const exported = await h.app.inject({ method: "GET", url: `/admin/contacts/${ana.id}/export`, headers: bearer });
    expect(exported.statusCode).toBe(200);
    expect(exported.headers["content-disposition"]).toBe(`attachment; filename="customer-${ana.id}.json"`);
    const doc = exported.json();
    expect(doc.contact).toMatchObject({ id: ana.id, name: ANA.name, phone: ANA.phone });
    expect(doc.exportedBy).toBe("api");
    const [conversation] = doc.conversations;
    expect(doc.conversations).toHaveLength(1);
    expect(conversation.messages.map((m: { text: string | null }) => m.text)).toContain("Do you ship to Porto?");
    const image = conversation.messages.find((m: { type: string }) => m.type === "image");
    expect(image.payload.image).toMatchObject({ id: "MEDIA-ana-1", caption: "my broken heel" });
    expect(conversation.replies.map((r: { text: string | null }) => r.text)).toEqual(
      expect.arrayContaining(["Yes, we ship to Porto.", "Sorry about the heel: send your order id."]),
    );
    const answered = conversation.replies.find((r: { text: string | null }) => r.text === "Yes, we ship to Porto.");
    expect(answered.cost.claudeCalls).toBe(1);
    expect(answered.parts[0]).toMatchObject({ text: "Yes, we ship to Porto.", sendState: "accepted" });
    expect(conversation.items).toEqual([
      expect.objectContaining({
        state: "discarded",
        code: "131047",
        note: "called Ana about the heel",
        actions: [expect.objectContaining({ actor: "api", action: "discard", detail: { note: "called Ana about the heel" } })],
      }),
    ]);
    expect(conversation.cost.tokens.input).toBeGreaterThan(0);
    // Nothing of Ben's.
    expect(exported.body).not.toContain(BEN.phone);
    expect(exported.body).not.toContain("Hello Ben.");

    const audits = await h.db.dataRequest.findMany();
    expect(audits).toEqual([expect.objectContaining({ kind: "export", actor: "api", contactId: ana.id, identityHash: null, counts: null })]);
    expect((await h.app.inject({ method: "GET", url: `/admin/contacts/${randomUUID()}/export`, headers: bearer })).statusCode).toBe(404);
    expect(await h.db.dataRequest.count()).toBe(1);
  });
});

describe("POST /admin/contacts/:id/erase", () => {
  it("leaves no row and no key holding the customer, keeps the other's and every count and cost, and is audited", async () => {
    const ana = await h.db.contact.findUniqueOrThrow({ where: { waId: ANA.phone } });
    const totals = async () => ({
      insights: (await h.app.inject({ method: "GET", url: "/admin/insights", headers: bearer })).json().total,
      costs: (await h.app.inject({ method: "GET", url: "/admin/costs", headers: bearer })).json().total,
    });
    const before = await totals();
    const anasWords = [
      ANA.phone,
      ANA.name,
      "Do you ship to Porto?",
      "Yes, we ship to Porto.",
      "my broken heel",
      "MEDIA-ana-1",
      "Sorry about the heel",
      "called Ana about the heel",
    ];
    const bensWords = [BEN.phone, BEN.name, "Hello Ben."];
    const rowsBefore = await everyRow(h);
    for (const word of [...anasWords, ...bensWords]) expect(rowsBefore, word).toContain(word);

    const erase = (confirm: string, headers: Record<string, string> = bearer) =>
      h.app.inject({ method: "POST", url: `/admin/contacts/${ana.id}/erase`, headers: { ...headers, "idempotency-key": randomUUID() }, payload: { confirm } });
    expect((await erase(`+${ANA.phone}`, await staffCookie())).statusCode).toBe(403);
    const wrong = await erase("Ana");
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json().error).toBe("bad body: confirm (write the contact's label, as the page shows it, to erase it)");
    const erased = await erase(`+${ANA.phone}`);
    expect(erased.statusCode, erased.body).toBe(200);
    expect(erased.json().erased).toMatchObject({ conversations: 1, contacts: 1, messages: 5, items: 1, toolCalls: 1 });
    // The rating stays, linked to nobody: insights count it the same.
    expect(await h.db.csatAsk.count({ where: { rating: "bad" } })).toBe(1);

    const rows = await everyRow(h);
    for (const word of anasWords) expect(rows, `a row still holds "${word}"`).not.toContain(word);
    for (const word of bensWords) expect(rows, word).toContain(word);
    const keys = await everyKey(h);
    for (const word of anasWords) expect(keys, `a key still holds "${word}"`).not.toContain(word);
    expect(keys).toContain(BEN.phone);
    expect(await totals()).toEqual(before);

    const [audit] = await h.db.dataRequest.findMany({ where: { kind: "erase" } });
    expect(audit).toMatchObject({ actor: "api", contactId: ana.id, identityHash: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect(audit!.counts).toEqual(erased.json().erased);

    // Gone to every route; a second erase is a 404; the same number writing again is a new customer.
    expect((await erase(`+${ANA.phone}`)).statusCode).toBe(404);
    expect((await h.app.inject({ method: "GET", url: `/admin/contacts/${ana.id}/export`, headers: bearer })).statusCode).toBe(404);
    expect((await h.app.inject({ method: "GET", url: "/admin/contacts?q=lima", headers: bearer })).json()).toEqual({ contacts: [] });
    h.claude.answer({ text: "Hello again." });
    await say(ANA, "Hi, it's me again");
    const again = await h.db.contact.findUniqueOrThrow({ where: { waId: ANA.phone } });
    expect(again.id).not.toBe(ana.id);
    expect(
      h.claude.requests
        .at(-1)!
        .messages.map((m) => JSON.stringify(m.content))
        .join(),
    ).not.toContain("Porto");
  });
});

describe("an erase that lands while the bot writes to the customer", () => {
  it("leaves the answer unsent: the run that wrote it no longer holds the conversation, and nothing takes it up", async () => {
    const carl = { phone: "16505550142", name: "Carl Jones" };
    const asked = h.claude.requests.length;
    h.claude.latencyMs = 1500;
    try {
      h.claude.answer({ text: "Your refund is on its way, Carl." });
      const { body } = textWebhook({ text: "Where is my refund?", from: carl.phone, name: carl.name });
      expect((await h.deliver(body)).statusCode).toBe(200);
      await eventually(() => h.claude.requests.length > asked, "Claude asked");
      const contact = await h.db.contact.findUniqueOrThrow({ where: { waId: carl.phone } });
      const erased = await h.app.inject({
        method: "POST",
        url: `/admin/contacts/${contact.id}/erase`,
        headers: { ...bearer, "idempotency-key": randomUUID() },
        payload: { confirm: `+${carl.phone}` },
      });
      expect(erased.statusCode, erased.body).toBe(200);
    } finally {
      h.claude.latencyMs = 0;
    }
    await new Promise((resolve) => setTimeout(resolve, 2000));
    await untilQuiet(h);
    expect(h.graph.sends.filter((send) => send.body.to === carl.phone)).toEqual([]);
    expect(JSON.stringify(h.graph.sends)).not.toContain("Your refund is on its way, Carl.");
    expect(await everyRow(h)).not.toContain("Your refund is on its way, Carl.");
  });
});

describe("an erase while Redis is away", () => {
  it("holds, says Redis's clean-up is pending, and the workers' reconciler removes the jobs still holding the customer once Redis is back", async () => {
    const redis = await PrivateRedis.start({ aof: true });
    const own = await startHarness({ env: { REDIS_URL: redis.url, REPLY_DEBOUNCE_MS: "0", RECONCILE_AFTER_MS: "0" } });
    const eve = { phone: "12025550188", name: "Eve Park" };
    try {
      own.startWorkers();
      own.claude.answer({ text: "Hello Eve, how can I help?" });
      expect((await own.deliver(textWebhook({ text: "Hi, are you there?", from: eve.phone, name: eve.name }).body)).statusCode).toBe(200);
      await eventually(() => own.graph.sends.length === 1, "the answer");
      await untilQuiet(own);
      await own.stopWorkers();
      const contact = await own.db.contact.findUniqueOrThrow({ where: { waId: eve.phone } });

      await redis.kill();
      const erased = await own.app.inject({
        method: "POST",
        url: `/admin/contacts/${contact.id}/erase`,
        headers: bearer,
        payload: { confirm: `+${eve.phone}` },
      });
      expect(erased.statusCode, erased.body).toBe(200);
      expect(erased.json()).toMatchObject({ erased: { contacts: 1, conversations: 1 }, jobs: 0, redis: "pending" });
      expect(await everyRow(own)).not.toContain(eve.name);

      await redis.resume();
      await eventually(() => own.redis.status === "ready", "the test's Redis connection back", 15_000);
      expect(await everyKey(own)).toContain(eve.phone); // what the erase could not reach

      own.startWorkers(); // its start-up sweep finishes the erase
      await eventually(async () => !(await everyKey(own)).includes(eve.phone), "Redis clean of the customer", 15_000);
      for (const word of [eve.name, "Hi, are you there?"]) expect(await everyKey(own)).not.toContain(word);
      expect(await everyRow(own)).not.toContain(eve.phone);
    } finally {
      await redis.resume();
      await own.close();
      await redis.destroy();
    }
  }, 60_000);
});

describe("npm run staff -- erase", () => {
  /** The staff CLI as an operator runs it, with the system's own environment. */
  function staffCli(args: string[], input = ""): Promise<{ status: number | null; out: string }> {
    return new Promise((resolve) => {
      const child = spawn(process.execPath, [STAFF_JS, ...args], { env: { PATH: process.env.PATH ?? "", ...h.env } });
      let out = "";
      child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
      child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString()));
      child.once("close", (status) => resolve({ status, out }));
      child.stdin.end(input);
    });
  }

  it("finds the customer by phone, @username or BSUID, asks for their label unless --yes, and erases them as the API does", async () => {
    const dana = { phone: "4915112345678", name: "Dana Roth" };
    h.claude.answer({ text: "Hello Dana." });
    await say(dana, "Hello from Dana");
    expect(await staffCli(["erase", "+49 151 0000000"])).toMatchObject({ status: 1, out: "no customer is known as +49 151 0000000\n" });
    const refused = await staffCli(["erase", "+49 151 12345678"], "+4915100000000\n");
    expect(refused).toMatchObject({ status: 1, out: expect.stringContaining("not confirmed; nothing was erased") });
    expect(await h.db.contact.count({ where: { waId: dana.phone } })).toBe(1);

    const done = await staffCli(["erase", "+49 151 12345678"], `+${dana.phone}\n`);
    expect(done.status, done.out).toBe(0);
    expect(done.out).toMatch(/^erased \+4915112345678: .*conversations 1.*; \d+ queued job\(s\) removed\n$/);
    expect(await h.db.contact.count({ where: { waId: dana.phone } })).toBe(0);
    expect(await everyRow(h)).not.toContain("Hello from Dana");
    expect(await h.db.dataRequest.findFirst({ where: { kind: "erase", actor: { startsWith: "cli:" } } })).not.toBeNull();
    expect((await staffCli(["erase", `+${dana.phone}`, "--yes"])).status).toBe(1);
  });

  it("at a terminal the label is shown as it is typed (it is no secret, unlike a password), and a wrong one erases nothing", async () => {
    const eli = { phone: "4915187654321", name: "Eli Park" };
    h.claude.answer({ text: "Hello Eli." });
    await say(eli, "Hello from Eli");
    // A terminal of its own (util-linux's script), so the CLI reads the label as a person types it.
    const command = [process.execPath, STAFF_JS, "erase", `+${eli.phone}`].join(" ");
    const typed = "+4915100000001";
    const { status, out } = await new Promise<{ status: number | null; out: string }>((resolve) => {
      const child = spawn("script", ["-qec", command, "/dev/null"], { env: { PATH: process.env.PATH ?? "", ...h.env } });
      let out = "";
      let sent = false;
      child.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        if (sent || !out.includes("to confirm: ")) return;
        sent = true;
        child.stdin.write(`${typed}\r`);
      });
      child.once("close", (status) => resolve({ status, out }));
    });
    expect(status, out).toBe(1);
    // The terminal's cursor moves stripped: what a person sees on the line.
    const seen = stripVTControlCharacters(out);
    expect(seen).toContain(`Type +${eli.phone} to confirm: ${typed}`);
    expect(seen).toContain("not confirmed; nothing was erased");
    expect(await h.db.contact.count({ where: { waId: eli.phone } })).toBe(1);
  });
});
