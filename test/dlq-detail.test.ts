import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 4: open one dead letter — the conversation around it, the draft, the full error, the history of actions. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.close());

const auth = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const detail = async (id: string) => (await h.app.inject({ method: "GET", url: `/admin/dlq/${id}`, headers: auth })).json();

async function deadLetterFor(text: string, from: string, timestamp?: number): Promise<string> {
  if (!timestamp)
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message", "Message failed to send because more than 24 hours have passed") });
  await h.deliver(textWebhook({ text, from, ...(timestamp ? { timestamp } : {}) }).body);
  const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: from } } } }), `a dead letter for ${from}`);
  return letter.id;
}

describe("GET /admin/dlq/:id", () => {
  it("shows the full error, the draft, the conversation with delivery states, and whether the window is open", async () => {
    const id = await deadLetterFor("Is my order on its way?", "4915100000001");
    const item = await detail(id);
    expect(item).toMatchObject({
      state: "open",
      error: {
        source: "graph",
        code: "131047",
        detail: { details: "Message failed to send because more than 24 hours have passed", fbtraceId: "AbCdEfGh123", httpStatus: 400 },
      },
      conversation: { contact: { waId: "4915100000001", name: "José Müller" }, windowOpen: true },
      reply: { draft: expect.stringMatching(/^Reply #\d+$/), state: "dead" },
      actions: [],
      handled: null,
    });
    expect(item.error.reason).toMatch(/24 hours/);
    // Issue 9: in plain words, with what to do next.
    expect(item.explanation).toMatchObject({
      kind: "window_closed",
      title: "The 24-hour window has closed",
      next: expect.stringMatching(/Send an approved template/),
    });
    expect(item.timeline.map((t: { direction: string; text: string }) => [t.direction, t.text])).toEqual([
      ["in", "Is my order on its way?"],
      ["out", item.reply.draft],
    ]);
    expect(item.timeline[1]).toMatchObject({ sendState: "pending", wamid: null, status: null, statusAt: null });
    expect(item.timeline[0]).toMatchObject({ sentAt: expect.any(String), deleted: false });
  });

  it("records every action with who and when: the audit trail", async () => {
    const id = await deadLetterFor("hello", "4915100000002");
    await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${id}/retry`,
      headers: { ...auth, "idempotency-key": randomUUID() },
      payload: { text: "Hi! Yes, it left today." },
    });
    await eventually(() => h.graph.sentTexts.includes("Hi! Yes, it left today."), "the resend to go out");
    const resent = await detail(id);
    expect(resent.actions).toEqual([{ actor: "api", action: "resend_edited", detail: { text: "Hi! Yes, it left today." }, at: expect.any(String) }]);
    expect(resent.handled).toMatchObject({ by: "api" });

    const other = await deadLetterFor("hello again", "4915100000003");
    await h.app.inject({ method: "POST", url: `/admin/dlq/${other}/discard`, headers: auth, payload: { note: "called them" } });
    expect((await detail(other)).actions).toEqual([{ actor: "api", action: "discard", detail: { note: "called them" }, at: expect.any(String) }]);
  });

  it("pausing and resuming the bot for the conversation shows in the item's history", async () => {
    const id = await deadLetterFor("can a person call me?", "4915100000005");
    const conversationId = (await detail(id)).conversation.id as string;
    await h.app.inject({ method: "POST", url: `/admin/conversations/${conversationId}/pause`, headers: auth, payload: { minutes: 60 } });
    await h.app.inject({ method: "POST", url: `/admin/conversations/${conversationId}/resume`, headers: auth });
    expect((await detail(id)).actions.map((a: { action: string; actor: string }) => `${a.action} by ${a.actor}`)).toEqual([
      "pause_bot by api",
      "resume_bot by api",
    ]);
  });

  it("warns when the 24-hour window has closed (free text would fail with 131047)", async () => {
    const id = await deadLetterFor("old question", "4915100000004", Math.floor(Date.now() / 1000) - 25 * 3600);
    const item = await detail(id);
    expect(item.error.code).toBe("window_closed");
    expect(item.conversation.windowOpen).toBe(false);
    expect(item.explanation.kind).toBe("window_closed");
    // When the customer wrote, not when we stored it: the bubble's time.
    expect(Date.now() - new Date(item.timeline[0].sentAt).getTime()).toBeGreaterThan(24 * 3600_000);
  });

  it("refuses the unauthenticated, and answers 404 for unknown ids", async () => {
    const id = "00000000-0000-4000-8000-000000000000";
    expect((await h.app.inject({ method: "GET", url: `/admin/dlq/${id}` })).statusCode).toBe(401);
    expect((await h.app.inject({ method: "GET", url: `/admin/dlq/${id}`, headers: auth })).statusCode).toBe(404);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq/nope", headers: auth })).statusCode).toBe(404);
  });
});
