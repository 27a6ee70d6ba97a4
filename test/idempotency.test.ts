import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 4: double clicks never act twice — Idempotency-Key on every mutating /admin route, Stripe's semantics. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.close());

const post = (url: string, key: string | undefined, payload?: unknown) =>
  h.app.inject({
    method: "POST",
    url,
    headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, ...(key === undefined ? {} : { "idempotency-key": key }) },
    ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }),
  });

/** A real dead letter: Meta refuses the reply with 131047. */
async function deadLetter(): Promise<{ id: string }> {
  h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
  const before = await h.db.deadLetter.count();
  await h.deliver(textWebhook({ text: "hello", from: `1555${Math.floor(Math.random() * 1e7)}` }).body);
  await eventually(async () => (await h.db.deadLetter.count()) === before + 1, "a dead letter");
  return h.db.deadLetter.findFirstOrThrow({ orderBy: { createdAt: "desc" } });
}

describe("Idempotency-Key on /admin", () => {
  it("the same key twice acts once: the second answer is the first, replayed", async () => {
    const letter = await deadLetter();
    const sends = h.graph.sends.length;
    const first = await post(`/admin/dlq/${letter.id}/retry`, "click-1", { text: "Sorry for the wait!" });
    const second = await post(`/admin/dlq/${letter.id}/retry`, "click-1", { text: "Sorry for the wait!" });
    expect(first.statusCode).toBe(202);
    expect(first.headers["idempotent-replayed"]).toBeUndefined();
    expect(second.statusCode).toBe(202);
    expect(second.headers["idempotent-replayed"]).toBe("true");
    expect(second.body).toBe(first.body);
    await eventually(() => h.graph.sends.length === sends + 1, "the resend");
    await untilQuiet(h);
    expect(h.graph.sentTexts.filter((t) => t === "Sorry for the wait!")).toHaveLength(1);
  });

  it("without a key, a second press is answered by the state machine instead (409)", async () => {
    const letter = await deadLetter();
    expect((await post(`/admin/dlq/${letter.id}/discard`, undefined)).statusCode).toBe(200);
    expect((await post(`/admin/dlq/${letter.id}/discard`, undefined)).statusCode).toBe(409);
  });

  it("the same key with a different request is refused with 422 and does nothing", async () => {
    const letter = await deadLetter();
    expect((await post(`/admin/dlq/${letter.id}/discard`, "click-2", { note: "handled by phone" })).statusCode).toBe(200);
    const other = await deadLetter();
    const misuse = await post(`/admin/dlq/${other.id}/discard`, "click-2", { note: "handled by phone" });
    expect(misuse.statusCode).toBe(422);
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: other.id } })).state).toBe("open");
    expect((await post(`/admin/dlq/${letter.id}/discard`, "click-2", { note: "another note" })).statusCode).toBe(422);
  });

  it("the same key while the first request is still running is refused with 409", async () => {
    const letter = await deadLetter();
    const url = `/admin/dlq/${letter.id}/discard`;
    // What the first request holds while it runs (it would finish by storing its answer).
    const probe = await post(url, "click-3");
    expect(probe.statusCode).toBe(200);
    const [key] = await h.redis.keys(`${h.prefix}:idem:*:click-3`);
    const running = JSON.parse((await h.redis.get(key!))!) as { fingerprint: string };
    await h.redis.set(key!, JSON.stringify({ state: "running", fingerprint: running.fingerprint }), "PX", 60_000);
    const again = await post(url, "click-3");
    expect(again.statusCode).toBe(409);
    expect(again.json().error).toMatch(/still running/);
  });

  it("answers are kept for 24 hours", async () => {
    const letter = await deadLetter();
    await post(`/admin/dlq/${letter.id}/discard`, "click-4");
    const [key] = await h.redis.keys(`${h.prefix}:idem:*:click-4`);
    expect(await h.redis.pttl(key!)).toBeGreaterThan(24 * 3600 * 1000 - 60_000);
  });

  it("applies to pause and resume too, and refuses an empty or oversized key", async () => {
    const conversation = await h.db.conversation.findFirstOrThrow();
    const first = await post(`/admin/conversations/${conversation.id}/pause`, "click-5", { minutes: 5 });
    const again = await post(`/admin/conversations/${conversation.id}/pause`, "click-5", { minutes: 5 });
    expect(again.headers["idempotent-replayed"]).toBe("true");
    expect(again.body).toBe(first.body);
    expect((await post(`/admin/conversations/${conversation.id}/resume`, "")).statusCode).toBe(400);
    expect((await post(`/admin/conversations/${conversation.id}/resume`, "k".repeat(256))).statusCode).toBe(400);
  });

  it("an unauthenticated request with a key can neither use nor claim it", async () => {
    const letter = await deadLetter();
    const res = await h.app.inject({ method: "POST", url: `/admin/dlq/${letter.id}/discard`, headers: { "idempotency-key": "click-6" } });
    expect(res.statusCode).toBe(401);
    expect(await h.redis.keys(`${h.prefix}:idem:*:click-6`)).toEqual([]);
  });
});
