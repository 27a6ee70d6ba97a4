import { randomUUID } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { PHONE_NUMBER_ID, statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Laws 5 and 6 where staff meet them: one open dead letter per reply, whoever reports the
 * failure first; a part that may have been sent is never destroyed, so its late status still
 * finds it; and a resend never sends what Meta already took, nor resends a maybe-sent reply
 * without telling the person it may already have arrived.
 */

const harness = harnessPerTest();
const auth = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
/** Each request its own Idempotency-Key, as the page sends: a resend must carry one. */
const post = (h: Harness, url: string, payload?: Record<string, unknown>) =>
  h.app.inject({ method: "POST", url, headers: { ...auth, "idempotency-key": randomUUID() }, ...(payload ? { payload } : {}) });
const get = (h: Harness, url: string) => h.app.inject({ method: "GET", url, headers: auth });

const failed = (wamid: string, code = 131026) =>
  statusWebhook({ id: wamid, status: "failed", errors: [{ code, title: "Message undeliverable", message: "Message undeliverable" }] });

/** One attempt, sends time out after 300 ms: a send Meta never answers is dead-lettered at once, maybe sent. */
const ONE_AMBIGUOUS_ATTEMPT = { JOB_ATTEMPTS: "1", GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "500", JOB_LOCK_MS: "1000" };

async function maybeSentDeadLetter(h: Harness, text = "hello?") {
  h.graph.answerSends({ hang: true });
  await h.deliver(textWebhook({ text }).body);
  const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open" } }), "the dead letter");
  const part = await h.db.outboundMessage.findFirstOrThrow({ where: { replyId: letter.replyId! } });
  expect(part).toMatchObject({ sendState: "sending", wamid: null });
  return { letter, part };
}

describe("one open dead letter per reply", () => {
  it("two failed statuses for two parts of one reply make one item, the second in its history", async () => {
    const h = await harness();
    h.claude.answer({ text: `${"a".repeat(4000)}\n\n${"b".repeat(3000)}` });
    await h.deliver(textWebhook({ text: "tell me everything" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the two-part reply");
    const parts = await h.db.outboundMessage.findMany({ orderBy: { seq: "asc" } });
    expect(parts).toHaveLength(2);
    for (const part of parts) expect((await h.deliver(failed(part.wamid!))).statusCode).toBe(200);
    await eventually(async () => (await h.db.deadLetterAction.count({ where: { action: "failed_again" } })) === 1, "the second failure to join the first");
    expect(await h.db.deadLetter.count()).toBe(1);
  });

  it("a reply its job dead-lettered, then reported failed by Meta, is one item", async () => {
    const h = await harness();
    h.claude.answer({ text: `${"a".repeat(4000)}\n\n${"b".repeat(3000)}` });
    h.graph.answerSends({ status: 200 }, { status: 400, body: graphError(131026, "Message undeliverable") });
    await h.deliver(textWebhook({ text: "tell me everything" }).body);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open" } }), "the job's dead letter");
    const first = await h.db.outboundMessage.findFirstOrThrow({ where: { sendState: "accepted" } });
    await h.deliver(failed(first.wamid!));
    await eventually(
      async () => (await h.db.deadLetterAction.count({ where: { deadLetterId: letter.id, action: "failed_again" } })) === 1,
      "Meta's report to join it",
    );
    expect(await h.db.deadLetter.count()).toBe(1);
    expect((await get(h, "/admin/dlq")).json().total).toBe(1);
  });
});

describe("a maybe-sent reply in the staff queue", () => {
  it("is resent only when the person confirms it may already have arrived; the old part is kept for its late status", async () => {
    const h = await harness({ env: ONE_AMBIGUOUS_ATTEMPT });
    const { letter, part } = await maybeSentDeadLetter(h);
    const item = (await get(h, `/admin/dlq/${letter.id}`)).json();
    expect(item.reply).toMatchObject({ maybeSent: true });
    // Issue 9: staff are told in words, in the item and in the list.
    expect(item.explanation.next).toMatch(/may already have arrived/);
    expect((await get(h, "/admin/dlq")).json().items[0]).toMatchObject({ reply: { maybeSent: true }, explanation: item.explanation });

    const refused = await post(h, `/admin/dlq/${letter.id}/retry`);
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toMatchObject({ code: "maybe_sent" });
    expect(refused.json().error).toMatch(/may already have arrived/);
    expect(h.graph.sends).toHaveLength(1);

    expect((await post(h, `/admin/dlq/${letter.id}/retry`, { confirmMaybeSent: true })).statusCode).toBe(202);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the resend");
    expect(h.graph.sends).toHaveLength(2);
    expect(await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).toMatchObject({ sendState: "unconfirmed", seq: 0 });

    // The first send had reached Meta after all: its status still finds the part.
    await h.deliver(statusWebhook({ id: "wamid.FIRST", status: "delivered", biz_opaque_callback_data: part.id }));
    await eventually(async () => (await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).status === "delivered", "the late status");
    expect(await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).toMatchObject({ sendState: "accepted", wamid: "wamid.FIRST" });
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(2);
  });

  it("that Meta took after all (its status came late) is not resent: the customer has it", async () => {
    const h = await harness({ env: ONE_AMBIGUOUS_ATTEMPT });
    const { letter, part } = await maybeSentDeadLetter(h);
    await h.deliver(statusWebhook({ id: "wamid.TOOK", status: "sent", biz_opaque_callback_data: part.id }));
    await eventually(async () => (await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).sendState === "accepted", "the reconciliation");
    expect((await get(h, `/admin/dlq/${letter.id}`)).json().reply).toMatchObject({ maybeSent: false, deliveredAfterAll: true });

    for (const attempt of [undefined, { confirmMaybeSent: true }, { text: "edited" }]) {
      const res = await post(h, `/admin/dlq/${letter.id}/retry`, attempt);
      expect(res.statusCode).toBe(409);
      expect(res.json()).toMatchObject({ code: "already_delivered" });
    }
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
  });

  it("bulk resend leaves maybe-sent items alone unless confirmed, and then sends each once", async () => {
    const h = await harness({ env: ONE_AMBIGUOUS_ATTEMPT });
    h.graph.answerSends({ hang: true }, { hang: true });
    await h.deliver(textWebhook({ text: "one", from: "3361000000021" }).body);
    await h.deliver(textWebhook({ text: "two", from: "3361000000022" }).body);
    await eventually(async () => (await h.db.deadLetter.count({ where: { state: "open" } })) === 2, "two dead letters");

    expect((await post(h, "/admin/dlq/bulk-retry", { code: "timeout", spacingMs: 0 })).json()).toMatchObject({ resent: 0, skipped: 2 });
    expect((await post(h, "/admin/dlq/bulk-retry", { code: "timeout", spacingMs: 0, confirmMaybeSent: true })).json()).toMatchObject({ resent: 2, skipped: 0 });
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 2, "both resends");
    await untilQuiet(h);
    expect(h.graph.sends.map((s) => s.body.to).sort()).toEqual(["3361000000021", "3361000000021", "3361000000022", "3361000000022"]);
  });
});

describe("a maybe-sent part when the 24-hour window closes", () => {
  it("is kept (its late status still finds it) while the number's template goes out in its place", async () => {
    const dir = await mkdtemp(join(tmpdir(), "numbers-"));
    const file = join(dir, "numbers.json");
    await writeFile(file, JSON.stringify({ [PHONE_NUMBER_ID]: { windowClosedTemplate: { name: "follow_up", language: "en_US" } } }));
    // The free-form send goes out within the window's last 3 s; its wait for a status
    // (0.5 + 0.3 + 3 s) outlasts the window.
    const h = await harness({
      env: { PHONE_NUMBERS_FILE: file, GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "3000", JOB_LOCK_MS: "1000", REPLY_DEBOUNCE_MS: "0" },
    });
    h.graph.answerSends({ hang: true });
    await h.deliver(textWebhook({ text: "are you there?", timestamp: Math.floor(Date.now() / 1000) - 24 * 3600 + 3 }).body);
    await eventually(async () => h.graph.requests.some((r) => r.body.type === "template"), "the template", 15_000);
    const free = await h.db.outboundMessage.findFirstOrThrow({ where: { template: null } });
    expect(free).toMatchObject({ sendState: "unconfirmed", wamid: null });

    await h.deliver(statusWebhook({ id: "wamid.LATEFREE", status: "delivered", biz_opaque_callback_data: free.id }));
    await eventually(
      async () => (await h.db.outboundMessage.findUniqueOrThrow({ where: { id: free.id } })).wamid === "wamid.LATEFREE",
      "the late status to find the part",
    );
    expect(h.graph.sends).toHaveLength(1); // the free-form text went out once, never again
  });
});
