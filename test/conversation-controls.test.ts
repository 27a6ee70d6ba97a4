import { afterEach, describe, expect, it } from "vitest";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 3, people in the loop: opt-out / opt-in keywords and human handoff. */

let h: Harness;
afterEach(async () => h?.close());

const OPT_OUT_REPLY = "You are unsubscribed. Send START to come back.";
const OPT_IN_REPLY = "Welcome back!";
const HANDOFF_REPLY = "A person will answer you here.";
const env = { OPT_OUT_REPLY, OPT_IN_REPLY, HANDOFF_REPLY, REPLY_DEBOUNCE_MS: "0" };

/** Delivers one text and waits until the worker has stored it. */
async function say(text: string): Promise<void> {
  const { body, wamids } = textWebhook({ text });
  expect((await h.deliver(body)).statusCode).toBe(200);
  await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), `"${text}" to be stored`);
}

const admin = (url: string, payload?: unknown) =>
  h.app.inject({ method: "POST", url, headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` }, ...(payload ? { payload } : {}) });

describe("opt-out", () => {
  it("STOP is confirmed once, then the bot stays silent until START", async () => {
    h = await startHarness({ env });
    await say("Stop");
    await eventually(() => h.graph.sends.length === 1, "the confirmation");
    expect(h.graph.sentTexts).toEqual([OPT_OUT_REPLY]);
    expect((await h.db.conversation.findFirstOrThrow()).optedOutAt).toBeInstanceOf(Date);

    await say("hello?");
    await say("STOP");
    await untilQuiet(h);
    expect(h.graph.sentTexts).toEqual([OPT_OUT_REPLY]); // no second confirmation, no answer
    expect(h.claude.requests).toHaveLength(0);
    expect((await h.db.inboundMessage.findMany({ orderBy: { createdAt: "asc" } })).map((m) => m.skipReason)).toEqual([
      null,
      "customer opted out",
      "opted out (repeated)",
    ]);

    await say("start");
    await eventually(() => h.graph.sends.length === 2, "the opt-in confirmation");
    expect(h.graph.sentTexts[1]).toBe(OPT_IN_REPLY);
    expect((await h.db.conversation.findFirstOrThrow()).optedOutAt).toBeNull();

    await say("what time do you open?");
    await eventually(() => h.graph.sends.length === 3, "an answer again");
    expect(h.claude.requests).toHaveLength(1);
  });

  it("a keyword only counts as the whole message", async () => {
    h = await startHarness({ env });
    await say("please don't stop the delivery");
    await eventually(() => h.graph.sends.length === 1, "an answer");
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);
    expect((await h.db.conversation.findFirstOrThrow()).optedOutAt).toBeNull();
  });
});

describe("human handoff", () => {
  it("asking for a person pauses the bot, tells the customer, and opens an item for staff; resuming brings the bot back", async () => {
    h = await startHarness({ env });
    await say("human!");
    await eventually(() => h.graph.sends.length === 1, "the handoff confirmation");
    expect(h.graph.sentTexts).toEqual([HANDOFF_REPLY]);

    const list = await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    const items = list.json().items as { source: string; reason: string; conversation: { id: string } }[];
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ source: "handoff" });
    expect(items[0]!.reason).toMatch(/asked for a person/);

    await say("is anyone there?");
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(0);

    expect((await admin(`/admin/conversations/${items[0]!.conversation.id}/resume`)).statusCode).toBe(200);
    await say("hello again");
    await eventually(() => h.graph.sends.length === 2, "the bot to answer again");
    expect(h.claude.userText(0)).toContain("hello again");
  });

  it("staff can pause a conversation for a while and resume it; messages meanwhile are stored, not answered", async () => {
    h = await startHarness({ env });
    await say("first question");
    await eventually(() => h.graph.sends.length === 1, "an answer");
    const conversation = await h.db.conversation.findFirstOrThrow();

    const paused = await admin(`/admin/conversations/${conversation.id}/pause`, { minutes: 30 });
    expect(paused.statusCode).toBe(200);
    expect(paused.json()).toMatchObject({ ok: true, indefinitely: false });
    const until = (await h.db.conversation.findFirstOrThrow()).pausedUntil!;
    expect(until.getTime() - Date.now()).toBeGreaterThan(29 * 60_000);

    await say("second question");
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
    expect((await h.db.inboundMessage.findFirstOrThrow({ where: { text: "second question" } })).skipReason).toBe("bot paused for a person");

    expect((await admin(`/admin/conversations/${conversation.id}/resume`)).statusCode).toBe(200);
    await say("third question");
    await eventually(() => h.graph.sends.length === 2, "an answer after resuming");
  });

  it("pause and resume refuse the unauthenticated, unknown conversations and bad bodies", async () => {
    h = await startHarness({ workers: 0 });
    const id = "00000000-0000-4000-8000-000000000000";
    for (const action of ["pause", "resume"]) {
      expect((await h.app.inject({ method: "POST", url: `/admin/conversations/${id}/${action}` })).statusCode).toBe(401);
      expect((await admin(`/admin/conversations/${id}/${action}`)).statusCode).toBe(404);
      expect((await admin(`/admin/conversations/not-a-uuid/${action}`)).statusCode).toBe(404);
    }
    expect((await admin(`/admin/conversations/${id}/pause`, { minutes: 0 })).statusCode).toBe(400);
    expect((await admin(`/admin/conversations/${id}/pause`, { minutes: "soon" })).statusCode).toBe(400);
  });
});
