import { randomUUID } from "node:crypto";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/** How long to wait for the system to get somewhere: generous, for loaded CI machines (a bound, not a timing assertion). */
const WAIT = 20_000;

/**
 * The staff API over the dead-letter queue (DESIGN.md §2, §4): list, retry (optionally with
 * edited text), discard. Dead letters are made the real way: a message is delivered while
 * Meta or Anthropic answers with a permanent error.
 */

const AUTH = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };

interface DlqItem {
  id: string;
  source: string;
  code: string | null;
  reason: string;
  state: string;
  conversation: { id: string; phoneNumberId: string; contact: { waId: string; name: string | null } };
  reply: { id: string; draft: string | null; state: string } | null;
  messages: { wamid: string; type: string; text: string | null }[];
}

const reengagement = () => ({ status: 400, body: graphError(131047, "Re-engagement message") });

interface MadeDeadLetter {
  id: string;
  replyId: string;
  conversationId: string;
  wamid: string;
  from: string;
}

let phoneCounter = 0;
const newPhone = () => `1650555${(1000 + ++phoneCounter).toString()}`;

/** A user writes; Claude drafts `draft`; Meta refuses the send with 131047 (permanent). */
async function deadLetterFromGraph(h: Harness, input: { text: string; draft: string; from?: string }): Promise<MadeDeadLetter> {
  h.claude.answer({ text: input.draft });
  h.graph.answerSends(reengagement());
  return deliverAndAwaitDeadLetter(h, input.text, input.from ?? newPhone());
}

/** A user writes; Anthropic answers 400 (permanent): a dead letter with no draft. */
async function deadLetterFromClaude(h: Harness, input: { text: string; from?: string }): Promise<MadeDeadLetter> {
  h.claude.answer({ status: 400 });
  return deliverAndAwaitDeadLetter(h, input.text, input.from ?? newPhone());
}

async function deliverAndAwaitDeadLetter(h: Harness, text: string, from: string): Promise<MadeDeadLetter> {
  const { body, wamids } = textWebhook({ from, text });
  const delivered = await h.deliver(body);
  expect(delivered.statusCode).toBe(200);
  const letter = await eventually(
    () => h.db.deadLetter.findFirst({ where: { state: "open", conversation: { contact: { waId: from } } } }),
    `a dead letter for ${from}`,
    WAIT,
  );
  expect(letter.replyId).not.toBeNull();
  return { id: letter.id, replyId: letter.replyId!, conversationId: letter.conversationId, wamid: wamids[0]!, from };
}

const list = async (h: Harness) => {
  const res = await h.app.inject({ method: "GET", url: "/admin/dlq", headers: AUTH });
  expect(res.statusCode).toBe(200);
  return res.json<{ items: DlqItem[] }>().items;
};

/** A resend sends to a customer: one Idempotency-Key per intended resend, as the page sends. */
const retry = (h: Harness, id: string, body?: unknown) =>
  h.app.inject({
    method: "POST",
    url: `/admin/dlq/${id}/retry`,
    headers: { ...AUTH, "idempotency-key": randomUUID() },
    ...(body === undefined ? {} : { payload: body as object }),
  });

const discard = (h: Harness, id: string, body?: unknown) =>
  h.app.inject({ method: "POST", url: `/admin/dlq/${id}/discard`, headers: AUTH, ...(body === undefined ? {} : { payload: body as object }) });

const sendsTo = (h: Harness, waId: string) => h.graph.sends.filter((s) => s.body.to === waId);
const textsTo = (h: Harness, waId: string) => sendsTo(h, waId).map((s) => (s.body.text as { body: string }).body);

async function replyState(h: Harness, replyId: string) {
  return (await h.db.reply.findUniqueOrThrow({ where: { id: replyId } })).state;
}

describe("staff API authentication", () => {
  let h: Harness;
  let letter: MadeDeadLetter;

  beforeAll(async () => {
    h = await startHarness();
    letter = await deadLetterFromGraph(h, { text: "Where is my order?", draft: "It ships tomorrow." });
  });
  afterAll(async () => {
    await h?.close();
  });

  const routes = [
    { name: "GET /admin/dlq", method: "GET" as const, url: () => "/admin/dlq" },
    { name: "POST /admin/dlq/:id/retry", method: "POST" as const, url: () => `/admin/dlq/${letter.id}/retry` },
    { name: "POST /admin/dlq/:id/discard", method: "POST" as const, url: () => `/admin/dlq/${letter.id}/discard` },
  ];
  const credentials = [
    { name: "without a bearer token", headers: {} as Record<string, string> },
    { name: "with a wrong bearer token", headers: { authorization: "Bearer not-the-admin-token" } },
    { name: "with the wrong token of the same length", headers: { authorization: `Bearer ${"x".repeat(TEST_ADMIN_TOKEN.length)}` } },
    { name: "with the right token under another scheme", headers: { authorization: `Basic ${TEST_ADMIN_TOKEN}` } },
  ];
  const cases = routes.flatMap((route) => credentials.map((credential) => ({ route, credential })));

  it.each(cases)("$route.name refuses a request $credential.name with 401 and changes nothing", async ({ route, credential }) => {
    const sendsBefore = h.graph.sends.length;
    const res = await h.app.inject({
      method: route.method,
      url: route.url(),
      headers: credential.headers,
      ...(route.method === "POST" ? { payload: { text: "sneaky" } } : {}),
    });
    expect(res.statusCode).toBe(401);
    expect(res.body).not.toContain(letter.from);
    expect(res.body).not.toContain("It ships tomorrow.");

    await untilQuiet(h);
    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("open");
    expect(row.actedBy).toBeNull();
    expect(h.graph.sends.length).toBe(sendsBefore);
  });

  it("accepts the right bearer token", async () => {
    const res = await h.app.inject({ method: "GET", url: "/admin/dlq", headers: AUTH });
    expect(res.statusCode).toBe(200);
  });
});

describe("staff API over the dead-letter queue", () => {
  let h: Harness;

  beforeEach(async () => {
    h = await startHarness();
  });
  afterEach(async () => {
    await h?.close();
  });

  it("GET /admin/dlq lists an open dead letter with its code, a readable reason, the contact, the draft and the messages it answers", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Do you open on Sundays?", draft: "Yes, from 10 to 4." });

    const items = await list(h);
    const item = items.find((i) => i.id === letter.id);
    expect(item).toBeDefined();
    expect(item!.state).toBe("open");
    expect(item!.source).toBe("graph");
    expect(item!.code).toBe("131047");
    // Readable: words a person understands, not just the code.
    expect(item!.reason).toMatch(/24 hours/i);
    expect(item!.reason).not.toBe("131047");
    expect(item!.conversation.id).toBe(letter.conversationId);
    expect(item!.conversation.contact.waId).toBe(letter.from);
    expect(item!.reply?.id).toBe(letter.replyId);
    expect(item!.reply?.draft).toBe("Yes, from 10 to 4.");
    expect(item!.messages).toEqual([expect.objectContaining({ wamid: letter.wamid, type: "text", text: "Do you open on Sundays?" })]);
  });

  it("GET /admin/dlq shows a Claude failure with no draft", async () => {
    const letter = await deadLetterFromClaude(h, { text: "Hello?" });

    const item = (await list(h)).find((i) => i.id === letter.id);
    expect(item).toBeDefined();
    expect(item!.source).toBe("anthropic");
    expect(item!.code).toBe("400");
    expect(item!.reason.length).toBeGreaterThan(10);
    expect(item!.reply?.draft ?? null).toBeNull();
    expect(item!.messages.map((m) => m.text)).toEqual(["Hello?"]);
  });

  it("retry with edited text sends exactly that text once, closes the item as resent by api, and does not call Claude again", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Can I return shoes?", draft: "Sure thing." });
    expect(h.claude.requests).toHaveLength(1);
    const sendsBefore = h.graph.sends.length;
    const edited = "Yes: returns are free within 30 days. Reply with your order number and we'll send a label.";

    const res = await retry(h, letter.id, { text: edited });
    expect(res.statusCode).toBe(202);

    await eventually(() => h.graph.sends.length > sendsBefore, "the edited reply to be sent", WAIT);
    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the reply to be marked sent", WAIT);
    await untilQuiet(h);
    const newSends = h.graph.sends.slice(sendsBefore);
    expect(newSends).toHaveLength(1);
    expect((newSends[0]!.body.text as { body: string }).body).toBe(edited);
    expect(newSends[0]!.body.to).toBe(letter.from);
    expect(h.claude.requests).toHaveLength(1);

    expect((await list(h)).map((i) => i.id)).not.toContain(letter.id);
    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("resent");
    expect(row.actedBy).toBe("api");
    expect(row.actedAt).toBeInstanceOf(Date);
    expect(row.actedAt!.getTime()).toBeGreaterThanOrEqual(row.createdAt.getTime());
    const reply = await h.db.reply.findUniqueOrThrow({ where: { id: letter.replyId } });
    expect(reply.text).toBe(edited);
  });

  it("retry without text sends the stored draft once and does not call Claude again", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Is the blue one in stock?", draft: "The blue one is in stock." });
    const sendsBefore = h.graph.sends.length;

    const res = await retry(h, letter.id);
    expect(res.statusCode).toBe(202);

    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the draft to be sent", WAIT);
    await untilQuiet(h);
    const newSends = h.graph.sends.slice(sendsBefore);
    expect(newSends.map((s) => (s.body.text as { body: string }).body)).toEqual(["The blue one is in stock."]);
    expect(h.claude.requests).toHaveLength(1);
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } })).state).toBe("resent");
  });

  it("retry without text when there is no draft calls Claude once more and sends the new reply once", async () => {
    const letter = await deadLetterFromClaude(h, { text: "What are your hours?" });
    expect(h.claude.requests).toHaveLength(1);
    expect(sendsTo(h, letter.from)).toHaveLength(0);

    h.claude.answer({ text: "We are open 9 to 5, Monday to Friday." });
    const res = await retry(h, letter.id);
    expect(res.statusCode).toBe(202);

    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the regenerated reply to be sent", WAIT);
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(2);
    expect(h.claude.userText(1)).toContain("What are your hours?");
    expect(textsTo(h, letter.from)).toEqual(["We are open 9 to 5, Monday to Friday."]);
    expect((await list(h)).map((i) => i.id)).not.toContain(letter.id);
  });

  it("two concurrent retries of the same item: one 202, one 409, and exactly one send", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Cancel my order please", draft: "Your order is cancelled." });
    const sendsBefore = h.graph.sends.length;

    const [a, b] = await Promise.all([retry(h, letter.id, { text: "Done: order cancelled." }), retry(h, letter.id, { text: "Done: order cancelled." })]);
    expect([a.statusCode, b.statusCode].sort()).toEqual([202, 409]);

    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the reply to be sent", WAIT);
    await untilQuiet(h);
    const newSends = h.graph.sends.slice(sendsBefore);
    expect(newSends.map((s) => (s.body.text as { body: string }).body)).toEqual(["Done: order cancelled."]);
    expect(h.claude.requests).toHaveLength(1);
  });

  it("the losing concurrent retry is told the item was already resent (not that it is open)", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Refund?", draft: "Refund issued." });

    const answers = await Promise.all([retry(h, letter.id), retry(h, letter.id)]);
    const loser = answers.find((a) => a.statusCode === 409);
    expect(loser).toBeDefined();
    const error = loser!.json<{ error: string }>().error;
    expect(error).toMatch(/resent/);
    expect(error).not.toMatch(/\bopen\b/);
  });

  it("retry with text when there is no draft sends that text once and does not call Claude", async () => {
    const letter = await deadLetterFromClaude(h, { text: "Is anyone there?" });
    expect(h.claude.requests).toHaveLength(1);

    const res = await retry(h, letter.id, { text: "Yes! How can we help?" });
    expect(res.statusCode).toBe(202);

    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the staff reply to be sent", WAIT);
    await untilQuiet(h);
    expect(textsTo(h, letter.from)).toEqual(["Yes! How can we help?"]);
    expect(h.claude.requests).toHaveLength(1);
  });

  it("retry of a dead letter made by a failed status webhook sends the reply once more and does not call Claude", async () => {
    const from = newPhone();
    h.claude.answer({ text: "Your table is booked." });
    expect((await h.deliver(textWebhook({ from, text: "Table for two at 8?" }).body)).statusCode).toBe(200);
    const part = await eventually(
      () => h.db.outboundMessage.findFirst({ where: { wamid: { not: null }, reply: { state: "sent", conversation: { contact: { waId: from } } } } }),
      "the reply to be sent",
      WAIT,
    );
    const failed = statusWebhook({
      id: part.wamid!,
      status: "failed",
      errors: [{ code: 131026, title: "Message undeliverable", message: "Message undeliverable", error_data: { details: "Message Undeliverable." } }],
    });
    expect((await h.deliver(failed)).statusCode).toBe(200);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { replyId: part.replyId, state: "open" } }), "the status dead letter", WAIT);
    expect(letter.source).toBe("status");
    const item = (await list(h)).find((i) => i.id === letter.id);
    expect(item?.reply?.draft).toBe("Your table is booked.");

    expect((await retry(h, letter.id)).statusCode).toBe(202);
    await eventually(async () => (await replyState(h, part.replyId)) === "sent", "the reply to be resent", WAIT);
    await untilQuiet(h);
    expect(textsTo(h, from)).toEqual(["Your table is booked.", "Your table is booked."]);
    expect(h.claude.requests).toHaveLength(1);
    expect((await list(h)).map((i) => i.id)).not.toContain(letter.id);
  });

  it("retry of a dead letter that has no reply answers 409 and leaves it open for staff to discard", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Hey", draft: "Hey!" });
    // A dead letter recorded without a reply (replyId is optional in the schema).
    const orphan = await h.db.deadLetter.create({
      data: { conversationId: letter.conversationId, dedupKey: `test.${randomUUID()}`, source: "internal", reason: "something broke before a reply existed" },
    });

    const res = await retry(h, orphan.id);
    expect(res.statusCode).toBe(409);

    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: orphan.id } });
    expect(row.state).toBe("open");
    expect(row.actedBy).toBeNull();
    expect((await list(h)).map((i) => i.id)).toContain(orphan.id);
    expect((await discard(h, orphan.id, { note: "nothing to send" })).statusCode).toBe(200);
  });

  it("retry and discard of an item already resent answer 409 and send nothing more", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Hi", draft: "Hello!" });
    expect((await retry(h, letter.id)).statusCode).toBe(202);
    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the reply to be sent", WAIT);
    const sendsAfterFirst = h.graph.sends.length;

    const again = await retry(h, letter.id, { text: "Hello again!" });
    expect(again.statusCode).toBe(409);
    const discarded = await discard(h, letter.id, { note: "too late" });
    expect(discarded.statusCode).toBe(409);

    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sendsAfterFirst);
    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("resent");
    expect(row.note).toBeNull();
  });

  it("retry and discard of an item already discarded answer 409 and send nothing", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Hi there", draft: "Hello there!" });
    expect((await discard(h, letter.id)).statusCode).toBe(200);
    const sendsBefore = h.graph.sends.length;

    expect((await retry(h, letter.id)).statusCode).toBe(409);
    expect((await retry(h, letter.id, { text: "Sorry for the wait" })).statusCode).toBe(409);
    expect((await discard(h, letter.id, { note: "twice" })).statusCode).toBe(409);

    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sendsBefore);
    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("discarded");
    expect(row.note).toBeNull();
    expect(await replyState(h, letter.replyId)).toBe("dead");
  });

  it.each([
    { route: "retry", call: retry, body: { text: "hello" } },
    { route: "discard", call: discard, body: { note: "bye" } },
  ])("$route of an unknown uuid answers 404", async ({ call, body }) => {
    expect((await call(h, randomUUID(), body)).statusCode).toBe(404);
    expect((await call(h, randomUUID())).statusCode).toBe(404);
    expect((await call(h, "00000000-0000-0000-0000-000000000000")).statusCode).toBe(404);
  });

  it.each([
    { route: "retry", call: retry, id: "not-a-uuid" },
    { route: "discard", call: discard, id: "not-a-uuid" },
    { route: "retry", call: retry, id: "12345" },
    { route: "discard", call: discard, id: "12345" },
  ])("$route of a non-uuid id ($id) answers 404", async ({ call, id }) => {
    const res = await call(h, id);
    expect(res.statusCode).toBe(404);
  });

  it("retry and discard with a bad body answer 400 and leave the item open", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Price?", draft: "It is 20 euros." });
    const sendsBefore = h.graph.sends.length;

    const badRetries: unknown[] = [{ text: 5 }, { text: "ok", extra: true }, { txt: "typo" }, { text: "" }, { text: "   " }, { text: null }, ["text"]];
    for (const body of badRetries) {
      const res = await retry(h, letter.id, body);
      expect(res.statusCode, `retry with ${JSON.stringify(body)}`).toBe(400);
    }
    const badDiscards: unknown[] = [{ note: 5 }, { note: "ok", reason: "x" }, { text: "wrong key" }, ["note"]];
    for (const body of badDiscards) {
      const res = await discard(h, letter.id, body);
      expect(res.statusCode, `discard with ${JSON.stringify(body)}`).toBe(400);
    }
    const malformed = await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${letter.id}/retry`,
      headers: { ...AUTH, "content-type": "application/json", "idempotency-key": randomUUID() },
      payload: '{"text": "unterminated',
    });
    expect(malformed.statusCode).toBe(400);

    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sendsBefore);
    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("open");
    expect(row.actedBy).toBeNull();
    expect((await list(h)).map((i) => i.id)).toContain(letter.id);
  });

  it("retry with a text over 40 960 characters (ten WhatsApp messages) answers 400 naming the limit, and 40 960 go out in ten parts", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Terms?", draft: "See our website." });
    const sendsBefore = h.graph.sends.length;

    const tooLong = await retry(h, letter.id, { text: "a".repeat(40_961) });
    expect(tooLong.statusCode).toBe(400);
    expect(tooLong.json()).toEqual({ error: "text must be at most 40960 characters (ten WhatsApp messages)" });
    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sendsBefore);
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } })).state).toBe("open");

    const longest = `${"a".repeat(40_960)}\n`; // trimmed first
    expect((await retry(h, letter.id, { text: longest })).statusCode).toBe(202);
    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the ten parts to be sent", WAIT);
    await untilQuiet(h);
    expect(h.graph.sentTexts.slice(sendsBefore)).toEqual(Array.from({ length: 10 }, () => "a".repeat(4096)));
  });

  it("discard with a note answers 200, stores state, note and who acted, removes the item from the open list and sends nothing", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Please close my account", draft: "Your account is closed." });
    const sendsBefore = h.graph.sends.length;

    const res = await discard(h, letter.id, { note: "Customer called; handled by phone." });
    expect(res.statusCode).toBe(200);

    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("discarded");
    expect(row.note).toBe("Customer called; handled by phone.");
    expect(row.actedBy).toBe("api");
    expect(row.actedAt).toBeInstanceOf(Date);
    expect((await list(h)).map((i) => i.id)).not.toContain(letter.id);

    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sendsBefore);
    expect(h.claude.requests).toHaveLength(1);
    expect(await replyState(h, letter.replyId)).toBe("dead");
  });

  it("discard without a body answers 200", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Thanks", draft: "You're welcome!" });
    const res = await discard(h, letter.id);
    expect(res.statusCode).toBe(200);
    const row = await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } });
    expect(row.state).toBe("discarded");
    expect(row.note).toBeNull();
    expect(row.actedBy).toBe("api");
  });

  it("a resend that fails again opens a new dead letter, so the item stays visible with the new error", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Still there?", draft: "Yes, we are here." });
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });

    const res = await retry(h, letter.id, { text: "Yes, we are still here." });
    expect(res.statusCode).toBe(202);

    const again = await eventually(
      () => h.db.deadLetter.findFirst({ where: { state: "open", conversationId: letter.conversationId, NOT: { id: letter.id } } }),
      "a new open dead letter for the failed resend",
      WAIT,
    );
    expect(again.replyId).toBe(letter.replyId);
    expect(again.code).toBe("131026");
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } })).state).toBe("resent");

    const items = await list(h);
    expect(items.map((i) => i.id)).not.toContain(letter.id);
    const item = items.find((i) => i.id === again.id);
    expect(item).toBeDefined();
    expect(item!.code).toBe("131026");
    expect(item!.reason).toMatch(/undeliverable/i);
    expect(item!.conversation.contact.waId).toBe(letter.from);
    expect(item!.reply?.draft).toBe("Yes, we are still here.");
    expect(item!.messages.map((m) => m.wamid)).toEqual([letter.wamid]);

    await untilQuiet(h);
    expect(textsTo(h, letter.from)).toEqual(["Yes, we are here.", "Yes, we are still here."]);
    expect(h.claude.requests).toHaveLength(1);
    expect(await replyState(h, letter.replyId)).toBe("dead");
  });

  it("a resend that fails again with the same 131047 keeps the item open with that error", async () => {
    const letter = await deadLetterFromGraph(h, { text: "Hello??", draft: "Hi!" });
    h.graph.answerSends(reengagement());

    expect((await retry(h, letter.id)).statusCode).toBe(202);

    const again = await eventually(
      () => h.db.deadLetter.findFirst({ where: { state: "open", conversationId: letter.conversationId, NOT: { id: letter.id } } }),
      "a new open dead letter for the failed resend",
      WAIT,
    );
    const item = (await list(h)).find((i) => i.id === again.id);
    expect(item?.code).toBe("131047");
    expect(item?.reply?.draft).toBe("Hi!");

    // And it can be retried again, this time successfully.
    const sendsBefore = h.graph.sends.length;
    expect((await retry(h, again.id)).statusCode).toBe(202);
    await eventually(async () => (await replyState(h, letter.replyId)) === "sent", "the third attempt to be sent", WAIT);
    await untilQuiet(h);
    expect(h.graph.sends.slice(sendsBefore).map((s) => (s.body.text as { body: string }).body)).toEqual(["Hi!"]);
    expect(h.claude.requests).toHaveLength(1);
  });
});

describe("the queue by reason, in plain words (issue 9)", () => {
  let h: Harness;
  let windowA: MadeDeadLetter;
  let claude: MadeDeadLetter;

  beforeAll(async () => {
    h = await startHarness();
    windowA = await deadLetterFromGraph(h, { text: "Hello", draft: "Hi there!" });
    await deadLetterFromGraph(h, { text: "Hello again", draft: "Hi again!" });
    claude = await deadLetterFromClaude(h, { text: "Write me something rude" });
    h.claude.answer({ text: "Your parcel is on its way." });
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await deliverAndAwaitDeadLetter(h, "Where is my parcel?", newPhone());
  });
  afterAll(async () => {
    await h?.close();
  });

  const get = (url: string) => h.app.inject({ method: "GET", url, headers: AUTH });

  it("GET /admin/dlq/summary counts the open items by reason, largest first, with the oldest of each", async () => {
    const res = await get("/admin/dlq/summary");
    expect(res.statusCode).toBe(200);
    const summary = res.json();
    expect(summary).toMatchObject({ state: "open", total: 4, oldestAt: expect.any(String) });
    expect(summary.reasons.map((r: { kind: string; count: number }) => [r.kind, r.count])).toEqual([
      ["window_closed", 2],
      ["claude", 1],
      ["cannot_receive", 1],
    ]);
    expect(summary.reasons[0]).toMatchObject({ label: "24-hour window closed", oldestAt: expect.any(String) });
    expect(new Date(summary.oldestAt).getTime()).toBe(new Date(summary.reasons[0].oldestAt).getTime());
  });

  it("GET /admin/dlq?reason= lists one kind, and goes with the search", async () => {
    const windows = (await get("/admin/dlq?reason=window_closed")).json();
    expect(windows.total).toBe(2);
    expect(windows.items.map((i: { explanation: { kind: string } }) => i.explanation.kind)).toEqual(["window_closed", "window_closed"]);
    const one = (await get(`/admin/dlq?reason=window_closed&q=${windowA.from}`)).json();
    expect(one.items.map((i: { id: string }) => i.id)).toEqual([windowA.id]);
    // A number as people write it, with a plus, spaces and dashes.
    const written = `+${windowA.from.slice(0, 1)} ${windowA.from.slice(1, 4)}-${windowA.from.slice(4, 7)} ${windowA.from.slice(7)}`;
    expect((await get(`/admin/dlq?q=${encodeURIComponent(written)}`)).json().items.map((i: { id: string }) => i.id)).toEqual([windowA.id]);
    expect((await get(`/admin/dlq?reason=claude&q=${windowA.from}`)).json().total).toBe(0);
    expect((await get("/admin/dlq?reason=handoff")).json()).toEqual({ total: 0, items: [] });
    expect((await get("/admin/dlq?reason=bogus")).statusCode).toBe(400);
    expect((await get("/admin/dlq/summary?state=bogus")).statusCode).toBe(400);
  });

  it("every item says what happened and what to do, the customer's last message, and whether it may already have arrived", async () => {
    const items = (await get("/admin/dlq")).json().items;
    const byId = new Map<string, { explanation: unknown }>(items.map((i: { id: string; explanation: unknown }) => [i.id, i]));
    expect(byId.get(windowA.id)).toMatchObject({
      explanation: { kind: "window_closed", title: "The 24-hour window has closed", next: expect.stringMatching(/approved template/) },
      reply: { maybeSent: false },
      lastMessage: { type: "text", text: "Hello", deleted: false },
    });
    expect(byId.get(claude.id)).toMatchObject({
      explanation: { kind: "claude", said: "simulated invalid_request_error", text: expect.stringContaining("“simulated invalid_request_error”") },
    });
    const detail = (await get(`/admin/dlq/${claude.id}`)).json();
    expect(detail.explanation).toEqual(byId.get(claude.id)?.explanation); // the list and the item agree
  });

  it("counts another state when asked, and refuses the unauthenticated", async () => {
    expect((await discard(h, claude.id, { note: "not for us" })).statusCode).toBe(200);
    const discarded = (await get("/admin/dlq/summary?state=discarded")).json();
    expect(discarded).toMatchObject({ state: "discarded", total: 1, reasons: [{ kind: "claude", count: 1 }] });
    expect((await get("/admin/dlq/summary")).json().total).toBe(3);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq/summary" })).statusCode).toBe(401);
  });
});
