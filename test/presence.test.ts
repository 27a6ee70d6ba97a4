import { randomUUID } from "node:crypto";
import type { LightMyRequestResponse } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 21.4: two people, one item. Each sees who else has it open; while one is answering it,
 * the other's actions on it are refused, naming them, until they take it over, which the
 * item's history records. Every action stays attributed.
 */

const PASSWORD = "correct horse battery staple";
let h: Harness;
let ann: Person;
let bob: Person;
beforeAll(async () => {
  h = await startHarness({ env: { HANDOFF_REPLY: "A person will answer you here.", REPLY_DEBOUNCE_MS: "0", JOB_ATTEMPTS: "1" } });
  ann = await person("ann@example.com");
  bob = await person("bob@example.com");
});
afterAll(async () => h?.close());

interface Person {
  email: string;
  /** Without a key of the test's own, a fresh one per request, as the page sends. */
  post(url: string, payload?: Record<string, unknown>, key?: string): Promise<LightMyRequestResponse>;
  leave(id: string): Promise<LightMyRequestResponse>;
}

async function person(email: string): Promise<Person> {
  await addStaff(h.db, email, PASSWORD);
  const signedIn = await h.app.inject({ method: "POST", url: "/admin/session", payload: { email, password: PASSWORD } });
  const headers = { cookie: String(signedIn.headers["set-cookie"]).split(";")[0]!, "x-csrf-token": signedIn.json().csrfToken as string };
  return {
    email,
    post: (url, payload, key) => h.app.inject({ method: "POST", url, headers: { ...headers, "idempotency-key": key ?? randomUUID() }, payload: payload ?? {} }),
    leave: (id) => h.app.inject({ method: "DELETE", url: `/admin/dlq/${id}/presence`, headers }),
  };
}

const sentTo = (to: string) => h.graph.sentTexts.filter((_, i) => h.graph.sends[i]!.body.to === to);

/** A customer who asked for a person: an item with nobody on it yet. */
async function waitingCustomer(): Promise<{ id: string; from: string }> {
  const from = `1555${Math.floor(Math.random() * 1e7)}`;
  await h.deliver(textWebhook({ text: "human", from }).body);
  const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open", conversation: { contact: { waId: from } } } }), "the item");
  await untilQuiet(h);
  return { id: letter.id, from };
}

describe("two people, one item", () => {
  it("each sees the other; the one answering holds it: the other is refused by name until they take it over, which the history records", async () => {
    const { id, from } = await waitingCustomer();
    expect((await ann.post(`/admin/dlq/${id}/presence`)).json()).toEqual({ viewers: [] });
    const seen = await bob.post(`/admin/dlq/${id}/presence`);
    expect(seen.json()).toEqual({ viewers: [{ actor: "ann@example.com", seenAt: expect.any(String), answering: false }] });

    // Ann starts writing: Bob is told, and Bob's send is refused, naming her.
    await ann.post(`/admin/dlq/${id}/presence`, { answering: true });
    expect((await bob.post(`/admin/dlq/${id}/presence`)).json().viewers).toEqual([{ actor: "ann@example.com", seenAt: expect.any(String), answering: true }]);
    for (const [action, body] of [
      ["answer", { text: "Bob here", key: "bob-1" }],
      ["give-back", undefined],
      ["discard", { note: "done" }],
    ] as const) {
      const { key, ...payload } = (body ?? {}) as { key?: string };
      const refused = await bob.post(`/admin/dlq/${id}/${action}`, body ? payload : undefined, key);
      expect(refused.statusCode).toBe(409);
      expect(refused.json()).toEqual({
        code: "held_by_other",
        error: expect.stringMatching(/^ann@example\.com is answering this customer right now\. Take the item over/),
      });
    }
    await untilQuiet(h);
    expect(sentTo(from)).toEqual(["A person will answer you here."]);

    // Ann's own send goes out.
    expect((await ann.post(`/admin/dlq/${id}/answer`, { text: "Ann here" })).statusCode).toBe(202);

    // Bob takes it over: now Ann is the one refused, even as her page keeps saying she writes.
    const taken = await bob.post(`/admin/dlq/${id}/take-over`);
    expect(taken.json()).toEqual({ ok: true, from: "ann@example.com" });
    await ann.post(`/admin/dlq/${id}/presence`, { answering: true });
    // The refused click, pressed again with its key, acts now: the refusal was not kept.
    expect((await bob.post(`/admin/dlq/${id}/answer`, { text: "Bob here" }, "bob-1")).statusCode).toBe(202);
    expect((await ann.post(`/admin/dlq/${id}/presence`)).json().viewers).toEqual([{ actor: "bob@example.com", seenAt: expect.any(String), answering: true }]);
    const annRefused = await ann.post(`/admin/dlq/${id}/answer`, { text: "Ann again" });
    expect(annRefused.json()).toMatchObject({ code: "held_by_other", error: expect.stringMatching(/^bob@example\.com is answering/) });
    await eventually(() => sentTo(from).length === 3, "both people's messages");
    await untilQuiet(h);
    expect(sentTo(from)).toEqual(["A person will answer you here.", "Ann here", "Bob here"]);

    // Bob leaves: Ann may act again. The history says who did what.
    await bob.leave(id);
    expect((await ann.post(`/admin/dlq/${id}/give-back`)).statusCode).toBe(200);
    const history = (await h.db.deadLetterAction.findMany({ where: { deadLetterId: id }, orderBy: { createdAt: "asc" } })).map((a) => `${a.actor} ${a.action}`);
    expect(history).toEqual(["ann@example.com staff_reply", "bob@example.com take_over", "bob@example.com staff_reply", "ann@example.com give_back"]);
    expect((await h.db.deadLetterAction.findFirstOrThrow({ where: { deadLetterId: id, action: "take_over" } })).detail).toEqual({ from: "ann@example.com" });
  });

  it("of two people pressing Send at once on an item nobody was answering, one is refused: the customer reads one message", async () => {
    const { id, from } = await waitingCustomer();
    const [first, second] = await Promise.all([
      ann.post(`/admin/dlq/${id}/answer`, { text: "From Ann" }),
      bob.post(`/admin/dlq/${id}/answer`, { text: "From Bob" }),
    ]);
    expect([first.statusCode, second.statusCode].sort()).toEqual([202, 409]);
    await eventually(() => sentTo(from).length === 2, "the one message");
    await untilQuiet(h);
    expect(sentTo(from)).toHaveLength(2);
  });

  it("every route that acts on an item a colleague answers is refused by the action itself: a bulk resend skips it, resuming the bot names them", async () => {
    // A failed reply (Meta's outage, with its error body) while Ann answers its item.
    const from = `1666${Math.floor(Math.random() * 1e7)}`;
    h.graph.answerSends({ status: 503, body: graphError(133004, "Server temporarily unavailable") });
    await h.deliver(textWebhook({ text: "where is my order?", from }).body);
    const item = await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open", conversation: { contact: { waId: from } } } }), "the item");
    await ann.post(`/admin/dlq/${item.id}/presence`, { answering: true });
    const sends = h.graph.sends.length;

    const bulk = await bob.post("/admin/dlq/bulk-retry", { code: "133004", spacingMs: 0 });
    expect(bulk.json()).toMatchObject({ resent: 0, skipped: 1 });
    const resume = await bob.post(`/admin/conversations/${item.conversationId}/resume`);
    expect(resume.statusCode).toBe(409);
    expect(resume.json()).toEqual({ code: "held_by_other", error: expect.stringMatching(/^ann@example\.com is answering this customer right now/) });
    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sends);
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: item.id } })).state).toBe("open");

    // Once Ann has left the item, the same bulk resend acts on it.
    await ann.leave(item.id);
    expect((await bob.post("/admin/dlq/bulk-retry", { code: "133004", spacingMs: 0 })).json()).toMatchObject({ resent: 1, skipped: 0 });
    await eventually(() => h.graph.sends.length === sends + 1, "the resend");
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: item.id } })).actedBy).toBe("bob@example.com");
  });

  it("presence of an unknown item is 404, and a bad body 400", async () => {
    expect((await ann.post("/admin/dlq/00000000-0000-4000-8000-000000000000/presence")).statusCode).toBe(404);
    const { id } = await waitingCustomer();
    expect((await ann.post(`/admin/dlq/${id}/presence`, { answering: "yes" })).statusCode).toBe(400);
    expect((await ann.post("/admin/dlq/00000000-0000-4000-8000-000000000000/take-over")).statusCode).toBe(404);
  });
});
