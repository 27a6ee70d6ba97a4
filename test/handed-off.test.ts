import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 21.2: a customer waiting for a person (they asked, Claude handed them over, or they
 * wrote to a paused bot) is an item staff answer from the page: the person's text is sent once
 * like any part, stored as the business's side, and the bot, given the conversation back,
 * answers the next message with it in its history. The bot never answers meanwhile.
 */

const HANDOFF_REPLY = "A person will answer you here.";
let h: Harness;
beforeAll(async () => {
  h = await startHarness({ env: { HANDOFF_REPLY, REPLY_DEBOUNCE_MS: "0", JOB_ATTEMPTS: "1", WHATSAPP_BUSINESS_ACCOUNT_ID: "102290129340398" } });
});
afterAll(async () => h?.close());

const auth = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
/** Without a key of the test's own, a fresh one per request, as the page sends; `null` sends none. */
const post = (url: string, payload?: Record<string, unknown>, key: string | null = randomUUID()) =>
  h.app.inject({ method: "POST", url, headers: { ...auth, ...(key === null ? {} : { "idempotency-key": key }) }, ...(payload ? { payload } : {}) });
const item = async (id: string) => (await h.app.inject({ method: "GET", url: `/admin/dlq/${id}`, headers: auth })).json();

const newCustomer = () => `1555${Math.floor(Math.random() * 1e7)}`;
const sentTo = (to: string) =>
  h.graph.sends
    .filter((r) => r.body.to === to)
    .map((r) => (r.body.text as { body?: string } | undefined)?.body ?? `template:${(r.body.template as { name: string }).name}`);

/** The customer writes and the worker has stored it. */
async function say(from: string, text: string): Promise<void> {
  const { body, wamids } = textWebhook({ text, from, name: "Ada" });
  expect((await h.deliver(body)).statusCode).toBe(200);
  await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), `"${text}" to be stored`);
}

/** The customer's open item, once its reply job has settled. */
async function openItemOf(from: string): Promise<{ id: string; conversationId: string; replyId: string | null; code: string | null }> {
  const letter = await eventually(
    () => h.db.deadLetter.findFirst({ where: { state: "open", conversation: { contact: { waId: from } } } }),
    `an item for ${from}`,
  );
  await untilQuiet(h);
  return letter;
}

describe("a customer handed to a person", () => {
  it("is answered from the page once (a repeated request replays), the bot stays silent, and given back it answers with the person's words in its history", async () => {
    const from = newCustomer();
    await say(from, "human");
    await eventually(() => sentTo(from).length === 1, "the handoff reply");
    const letter = await openItemOf(from);
    expect(letter.replyId).toBeNull();

    const key = randomUUID();
    const answered = await post(`/admin/dlq/${letter.id}/answer`, { text: "  Hi Ada, this is Sam. Your parcel leaves today.  " }, key);
    expect(answered.statusCode).toBe(202);
    expect(answered.json()).toEqual({ ok: true, state: "open" });
    const replayed = await post(`/admin/dlq/${letter.id}/answer`, { text: "  Hi Ada, this is Sam. Your parcel leaves today.  " }, key);
    expect(replayed.statusCode).toBe(202);
    await eventually(() => sentTo(from).length === 2, "the person's message");
    await untilQuiet(h);
    expect(sentTo(from)).toEqual([HANDOFF_REPLY, "Hi Ada, this is Sam. Your parcel leaves today."]);

    // The business's side of the conversation, attributed; the item stays with the person.
    const staffReply = await h.db.reply.findFirstOrThrow({ where: { conversationId: letter.conversationId, kind: "staff" } });
    expect(staffReply).toMatchObject({ state: "sent", text: "Hi Ada, this is Sam. Your parcel leaves today." });
    const shown = await item(letter.id);
    expect(shown.state).toBe("open");
    expect(shown.actions).toContainEqual(expect.objectContaining({ actor: "api", action: "staff_reply" }));
    expect(shown.conversation.pausedBy).toBe("api");

    // The customer answers the person: the bot keeps out.
    await say(from, "thanks, what time?");
    await untilQuiet(h);
    expect(sentTo(from)).toHaveLength(2);
    const asked = h.claude.requests.length;

    const givenBack = await post(`/admin/dlq/${letter.id}/give-back`);
    expect(givenBack.statusCode).toBe(200);
    expect(givenBack.json()).toEqual({ ok: true, state: "resolved" });
    expect((await item(letter.id)).state).toBe("resolved");
    expect((await post(`/admin/dlq/${letter.id}/give-back`)).json().error).toMatch(/already resolved by api/);
    expect((await post(`/admin/dlq/${letter.id}/answer`, { text: "one more" })).statusCode).toBe(409);

    await say(from, "and can I change the address?");
    await eventually(() => sentTo(from).length === 3, "the bot's answer");
    expect(h.claude.requests).toHaveLength(asked + 1);
    const history = h.claude.requests.at(-1)!.messages;
    const assistant = history.filter((m) => m.role === "assistant").map((m) => JSON.stringify(m.content));
    expect(assistant.some((turn) => turn.includes("Your parcel leaves today."))).toBe(true);
    expect(h.claude.userText(h.claude.requests.length - 1)).toContain("thanks, what time?");
  });

  it("a customer who writes to a paused bot becomes an item, once, unless one is open", async () => {
    const from = newCustomer();
    await say(from, "first question");
    await eventually(() => sentTo(from).length === 1, "an answer");
    const conversation = await h.db.conversation.findFirstOrThrow({ where: { contact: { waId: from } } });
    expect((await post(`/admin/conversations/${conversation.id}/pause`, {})).statusCode).toBe(200);

    await say(from, "hello? anyone?");
    const letter = await openItemOf(from);
    expect(letter).toMatchObject({ code: "paused", replyId: null });
    await say(from, "still there?");
    await untilQuiet(h);
    expect(await h.db.deadLetter.count({ where: { conversationId: conversation.id } })).toBe(1);
    expect(sentTo(from)).toHaveLength(1);
    expect((await item(letter.id)).explanation.title).toBe("The customer wrote to a paused bot");

    // Resuming the bot from the conversation settles the item too: nobody waits for a person.
    expect((await post(`/admin/conversations/${conversation.id}/resume`)).statusCode).toBe(200);
    expect((await item(letter.id)).state).toBe("resolved");
  });

  it("past the 24-hour window free text is refused in words and an approved template goes out, once", async () => {
    const from = newCustomer();
    await say(from, "agent");
    const letter = await openItemOf(from);
    await h.db.conversation.update({ where: { id: letter.conversationId }, data: { lastInboundAt: new Date(Date.now() - 25 * 3600_000) } });

    const text = await post(`/admin/dlq/${letter.id}/answer`, { text: "Hello?" });
    expect(text.statusCode).toBe(409);
    expect(text.json()).toEqual({ code: "window_closed", error: expect.stringMatching(/24-hour window has closed.*template/) });

    const key = randomUUID();
    const body = { name: "order_update", language: "en_US", parameters: ["Ada", "A-17"] };
    const sent = await post(`/admin/dlq/${letter.id}/template`, body, key);
    expect(sent.statusCode).toBe(202);
    expect(sent.json()).toEqual({ ok: true, state: "open" });
    expect((await post(`/admin/dlq/${letter.id}/template`, body, key)).statusCode).toBe(202);
    await eventually(() => h.graph.templateSends.filter((r) => r.body.to === from).length === 1, "the template");
    await untilQuiet(h);
    expect(h.graph.templateSends.filter((r) => r.body.to === from)).toHaveLength(1);
    expect((await h.db.reply.findFirstOrThrow({ where: { conversationId: letter.conversationId, kind: "staff" } })).text).toBe(
      "Hello Ada, your order A-17 is on its way.",
    );
  });

  it("answering and giving back are refused for a failed reply, with what to do instead; resending is refused for a waiting customer", async () => {
    const from = newCustomer();
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await say(from, "hello");
    const failed = await openItemOf(from);
    expect(failed.replyId).not.toBeNull();
    for (const url of [`/admin/dlq/${failed.id}/answer`, `/admin/dlq/${failed.id}/give-back`]) {
      const refused = await post(url, url.endsWith("answer") ? { text: "hi" } : undefined);
      expect(refused.statusCode).toBe(409);
      expect(refused.json()).toMatchObject({ code: "has_reply", error: expect.stringMatching(/send it again/) });
    }

    const waiting = newCustomer();
    await say(waiting, "human");
    const letter = await openItemOf(waiting);
    const resend = await post(`/admin/dlq/${letter.id}/retry`, { text: "hi" });
    expect(resend.statusCode).toBe(409);
    expect(resend.json()).toMatchObject({ code: "no_reply", error: expect.stringMatching(/write to them/) });
    expect((await post(`/admin/dlq/${letter.id}/answer`, { text: "" })).statusCode).toBe(400);
    expect((await post(`/admin/dlq/${randomUUID()}/answer`, { text: "hi" })).statusCode).toBe(404);
  });
});

describe("a person's message to a customer goes out once, and never without an Idempotency-Key (issue 32.2)", () => {
  /** A customer who asked for a person and has heard the handoff reply: nothing else goes to them unless staff send it. */
  async function waitingCustomer(): Promise<{ from: string; id: string; conversationId: string }> {
    const from = newCustomer();
    await say(from, "human");
    await eventually(() => sentTo(from).length === 1, "the handoff reply");
    return { from, ...(await openItemOf(from)) };
  }

  const staffReplies = (conversationId: string) => h.db.reply.count({ where: { conversationId, kind: "staff" } });

  it("the same answer sent twice with no key is refused both times, naming the header, and nothing reaches the customer", async () => {
    const { from, id, conversationId } = await waitingCustomer();
    for (const press of [1, 2]) {
      const refused = await post(`/admin/dlq/${id}/answer`, { text: "Hi Ada, this is Sam." }, null);
      expect(refused.statusCode, `press ${press}`).toBe(400);
      expect(refused.json().error).toMatch(/Idempotency-Key/);
    }
    await untilQuiet(h);
    expect(sentTo(from)).toEqual([HANDOFF_REPLY]);
    expect(await staffReplies(conversationId)).toBe(0);
  });

  it("the same answer sent twice with one key goes out once", async () => {
    const { from, id, conversationId } = await waitingCustomer();
    const first = await post(`/admin/dlq/${id}/answer`, { text: "Hi Ada, this is Sam." }, "press-answer");
    const second = await post(`/admin/dlq/${id}/answer`, { text: "Hi Ada, this is Sam." }, "press-answer");
    expect([first.statusCode, second.statusCode]).toEqual([202, 202]);
    expect(second.headers["idempotent-replayed"]).toBe("true");
    await eventually(() => sentTo(from).length === 2, "the person's message");
    await untilQuiet(h);
    expect(sentTo(from)).toEqual([HANDOFF_REPLY, "Hi Ada, this is Sam."]);
    expect(await staffReplies(conversationId)).toBe(1);
  });

  it("a template on a waiting customer sent twice with no key is refused both times, and nothing is sent", async () => {
    const { from, id, conversationId } = await waitingCustomer();
    const body = { name: "order_update", language: "en_US", parameters: ["Ada", "A-17"] };
    for (const press of [1, 2]) {
      const refused = await post(`/admin/dlq/${id}/template`, body, null);
      expect(refused.statusCode, `press ${press}`).toBe(400);
      expect(refused.json().error).toMatch(/Idempotency-Key/);
    }
    await untilQuiet(h);
    expect(sentTo(from)).toEqual([HANDOFF_REPLY]);
    expect(await staffReplies(conversationId)).toBe(0);
  });

  it("every route that sends to a customer refuses a request with no Idempotency-Key, and acts on nothing", async () => {
    const waiting = await waitingCustomer();
    const failedFrom = newCustomer();
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await say(failedFrom, "hello");
    const failed = await openItemOf(failedFrom);
    const sends = h.graph.sends.length;

    for (const [url, payload] of [
      [`/admin/dlq/${failed.id}/retry`, { text: "Sorry for the wait!" }],
      [`/admin/dlq/${failed.id}/regenerate`, {}],
      [`/admin/dlq/${failed.id}/template`, { name: "order_update", language: "en_US", parameters: ["Ada", "A-17"] }],
      ["/admin/dlq/bulk-retry", { code: "131026", spacingMs: 0 }],
      [`/admin/dlq/${waiting.id}/answer`, { text: "Hello?" }],
      [`/admin/dlq/${waiting.id}/template`, { name: "order_update", language: "en_US", parameters: ["Ada", "A-17"] }],
    ] as const) {
      const refused = await post(url, payload, null);
      expect(refused.statusCode, url).toBe(400);
      expect(refused.json().error, url).toMatch(/Idempotency-Key/);
    }
    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sends);
    expect(await h.db.deadLetter.findUniqueOrThrow({ where: { id: failed.id } })).toMatchObject({ state: "open", actedBy: null });
    expect(await h.db.deadLetterAction.count({ where: { deadLetterId: { in: [failed.id, waiting.id] } } })).toBe(0);
  });
});
