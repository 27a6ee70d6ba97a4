import { describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { DISPLAY_NUMBER, envelope, metaWire, PHONE_NUMBER_ID, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 8, identity: since 31 March 2026 Meta names a customer by phone number, by
 * business-scoped user id (BSUID), or both (WHATSAPP.md §9). A customer who hides their number
 * behind a username is answered at their BSUID (`recipient`), and one person stays one
 * conversation however Meta names them from one message to the next.
 */

const harness = harnessPerTest();
const PHONE = "16505551234";
const BSUID = "US.13491208655302741918";
const USERNAME = "@maria.g";
const env = { REPLY_DEBOUNCE_MS: "0" };

/** One message as Meta sends it: `phone` and/or `bsuid` say what the customer lets the business see. */
function message(text: string, who: { phone?: string; bsuid?: string; username?: string }, id = uniqueWamid()) {
  const contact = {
    profile: { name: "María", ...(who.username ? { username: who.username } : {}) },
    ...(who.phone ? { wa_id: who.phone } : {}),
    ...(who.bsuid ? { user_id: who.bsuid } : {}),
  };
  const sent = {
    ...(who.phone ? { from: who.phone } : {}),
    ...(who.bsuid ? { from_user_id: who.bsuid } : {}),
    id,
    timestamp: String(Math.floor(Date.now() / 1000)),
    type: "text",
    text: { body: text },
  };
  const value = {
    messaging_product: "whatsapp",
    metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: PHONE_NUMBER_ID },
    contacts: [contact],
    messages: [sent],
  };
  return { body: metaWire(envelope([{ field: "messages", value }])), id };
}

async function answered(h: Harness, count: number) {
  await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === count, `${count} answer(s)`);
}

describe("a customer known only by a BSUID (a username, phone withheld)", () => {
  it("gets exactly one reply, addressed to recipient = their BSUID", async () => {
    const h = await harness({ env });
    expect((await h.deliver(message("hola, ¿tienen envío?", { bsuid: BSUID, username: USERNAME }).body)).statusCode).toBe(200);
    await answered(h, 1);
    const send = h.graph.sends[0]!;
    expect(send.body).toMatchObject({ recipient: BSUID, type: "text", text: { body: "Reply #1" } });
    expect(send.body).not.toHaveProperty("to");
    expect(await h.db.contact.findFirstOrThrow()).toMatchObject({ waId: null, userId: BSUID, username: USERNAME, name: "María" });
  });

  it("a duplicate storm of one BSUID message gets one Claude call and one send", async () => {
    const h = await harness({ env });
    const { body } = message("price?", { bsuid: BSUID });
    const answers = await Promise.all(Array.from({ length: 5 }, () => h.deliver(body)));
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200, 200, 200]);
    await answered(h, 1);
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.graph.sends).toHaveLength(1);
  });

  it("Meta's 131062 (no BSUID recipient for this message) is a dead letter after one attempt, with a reason staff can read", async () => {
    const h = await harness({ env });
    h.graph.answerSends({ status: 400, body: graphError(131062, "Business-scoped User ID recipients are not supported for this message") });
    await h.deliver(message("hi", { bsuid: BSUID, username: USERNAME }).body);
    const letter = await eventually(() => h.db.deadLetter.findFirst(), "the dead letter");
    expect(letter).toMatchObject({ code: "131062", attempts: 1, source: "graph" });
    expect(letter.reason).toMatch(/username \(BSUID\)/);
    expect(h.graph.sends).toHaveLength(1);
  });
});

describe("one person, however Meta names them", () => {
  it("phone-only, then both, then BSUID-only: one contact, one conversation, and Claude's history shows all of it", async () => {
    const h = await harness({ env });
    await h.deliver(message("first, by phone", { phone: PHONE }).body);
    await answered(h, 1);
    await h.deliver(message("second, with both", { phone: PHONE, bsuid: BSUID }).body);
    await answered(h, 2);
    await h.deliver(message("third, phone withheld", { bsuid: BSUID, username: USERNAME }).body);
    await answered(h, 3);

    expect(await h.db.contact.findMany()).toMatchObject([{ waId: PHONE, userId: BSUID, username: USERNAME }]);
    expect(await h.db.conversation.count()).toBe(1);
    const seen = h.claude.userText(2);
    expect(seen).toContain("first, by phone");
    expect(seen).toContain("second, with both");
    expect(seen).toContain("third, phone withheld");
    // The phone is known: Meta recommends it over the BSUID.
    expect(h.graph.sends.map((s) => s.body.to)).toEqual([PHONE, PHONE, PHONE]);
  });

  it("first by BSUID, then by phone (two contacts so far), then by both: they become one, with one conversation", async () => {
    const h = await harness({ env });
    await h.deliver(message("by BSUID", { bsuid: BSUID }).body);
    await answered(h, 1);
    await h.deliver(message("by phone", { phone: PHONE }).body);
    await answered(h, 2);
    expect(await h.db.contact.count()).toBe(2);

    await h.deliver(message("by both", { phone: PHONE, bsuid: BSUID }).body);
    await answered(h, 3);
    expect(await h.db.contact.findMany()).toMatchObject([{ waId: PHONE, userId: BSUID }]);
    const conversations = await h.db.conversation.findMany({ include: { messages: true, replies: true } });
    expect(conversations).toHaveLength(1);
    expect(conversations[0]!.messages).toHaveLength(3);
    expect(conversations[0]!.replies).toHaveLength(3);
  });
});

describe("statuses and staff, for BSUID customers", () => {
  it("statuses with recipient_user_id only reconcile a maybe-sent part, and a failed one without contacts dead-letters the reply", async () => {
    const h = await harness({ env: { ...env, GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "1000", JOB_LOCK_MS: "1000" } });
    h.graph.answerSends({ hang: true });
    await h.deliver(message("hello", { bsuid: BSUID }).body);
    const part = await eventually(() => h.db.outboundMessage.findFirst({ where: { sendState: "sending" } }), "the maybe-sent part");
    await h.deliver(status({ id: "wamid.OUT.BSUID1", status: "sent", recipient_user_id: BSUID, biz_opaque_callback_data: part.id }));
    await answered(h, 1);
    expect(h.graph.sends).toHaveLength(1);

    await h.deliver(status({ id: "wamid.OUT.BSUID1", status: "failed", recipient_user_id: BSUID, errors: [{ code: 131026, title: "Message undeliverable" }] }));
    const letter = await eventually(() => h.db.deadLetter.findFirst(), "the dead letter");
    expect(letter).toMatchObject({ source: "status", code: "131026" });
  });

  it("the staff queue finds a username customer's item by @username and by BSUID, and names them by it", async () => {
    const h = await harness({ env: { ...env, JOB_ATTEMPTS: "1" } });
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await h.deliver(message("hi", { bsuid: BSUID, username: USERNAME }).body);
    await eventually(() => h.db.deadLetter.findFirst(), "the dead letter");
    const list = async (q: string) =>
      (await h.app.inject({ method: "GET", url: `/admin/dlq?q=${encodeURIComponent(q)}`, headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).json();
    for (const q of [USERNAME, "maria", BSUID, "1349120865"]) expect((await list(q)).total, q).toBe(1);
    expect((await list("+4915100000000")).total).toBe(0);
    expect((await list(USERNAME)).items[0].conversation.contact).toMatchObject({ waId: null, userId: BSUID, username: USERNAME, label: USERNAME });
  });
});

/** A status webhook carrying only the BSUID of its recipient, the way Meta sends them for username customers. */
function status(s: Record<string, unknown>): string {
  const value = {
    messaging_product: "whatsapp",
    metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: PHONE_NUMBER_ID },
    statuses: [{ timestamp: String(Math.floor(Date.now() / 1000)), ...s }],
  };
  return metaWire(envelope([{ field: "messages", value }]));
}

describe("a recycled phone number: the same number with another BSUID is another person", () => {
  it("the newcomer gets a conversation of their own, never the earlier holder's history, and the earlier holder keeps their BSUID", async () => {
    const h = await harness({ env });
    const EARLIER = "US.11111111111111111111";
    const NEWCOMER = "US.22222222222222222222";
    await h.deliver(message("my order 4417 never arrived", { phone: PHONE, bsuid: EARLIER }).body);
    await answered(h, 1);

    // Months later the number belongs to someone else, whom Meta names by a BSUID of their own.
    await h.deliver(message("hi, do you sell gift cards?", { phone: PHONE, bsuid: NEWCOMER }).body);
    await answered(h, 2);

    expect(h.claude.userText(1)).toContain("gift cards");
    expect(h.claude.userText(1)).not.toContain("4417");
    const contacts = await h.db.contact.findMany({ orderBy: { createdAt: "asc" }, include: { conversations: true } });
    expect(contacts.map((c) => ({ waId: c.waId, userId: c.userId, conversations: c.conversations.length }))).toEqual([
      { waId: null, userId: EARLIER, conversations: 1 },
      { waId: PHONE, userId: NEWCOMER, conversations: 1 },
    ]);
    // The answer goes to the number, now the newcomer's.
    expect(h.graph.sends[1]!.body).toMatchObject({ to: PHONE });
  });

  it("a number first known without a BSUID is still one person when a BSUID comes along", async () => {
    const h = await harness({ env });
    await h.deliver(message("where is my parcel?", { phone: PHONE }).body);
    await answered(h, 1);
    await h.deliver(message("any news?", { phone: PHONE, bsuid: BSUID }).body);
    await answered(h, 2);
    expect(h.claude.userText(1)).toContain("where is my parcel?");
    expect(await h.db.contact.findMany()).toMatchObject([{ waId: PHONE, userId: BSUID }]);
  });
});
