import { randomUUID } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { statusJobId } from "../src/queue/catalog.ts";
import { scheduleReply } from "../src/queue/queues.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { statusWebhook, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/** How long to wait for the system to get somewhere: generous, for loaded CI machines (a bound, not a timing assertion). */
const WAIT = 20_000;

/**
 * Meta's delivery receipts for our replies (DESIGN.md §2 "status" job, WHATSAPP.md §3):
 * the stored status only moves forward (sent < delivered < read), a "failed" status turns
 * the reply into a dead letter, and biz_opaque_callback_data reconciles a send whose answer
 * we never saw (law 5).
 */

let h: Harness;

beforeEach(async () => {
  h = await startHarness();
});
afterEach(async () => {
  await h?.close();
});

let phoneCounter = 0;
const newPhone = () => `1650666${(1000 + ++phoneCounter).toString()}`;

/** A user writes and our reply goes out for real; returns the outbound part Meta accepted. */
async function sentReply(text = "Do you deliver to Lyon?") {
  const from = newPhone();
  const { body } = textWebhook({ from, text });
  expect((await h.deliver(body)).statusCode).toBe(200);
  const part = await eventually(
    () =>
      h.db.outboundMessage.findFirst({
        where: { sendState: "accepted", wamid: { not: null }, reply: { state: "sent", conversation: { contact: { waId: from } } } },
      }),
    "the reply to be sent and its wamid recorded",
    WAIT,
  );
  return { part, wamid: part.wamid!, replyId: part.replyId, from };
}

/** Delivers a status webhook and waits until the status job for it has finished. */
async function deliverStatus(status: Parameters<typeof statusWebhook>[0]) {
  const res = await h.deliver(statusWebhook(status));
  expect(res.statusCode).toBe(200);
  const job = await eventually(
    async () => {
      const found = await h.queues.status.getJob(statusJobId(status.id, status.status));
      return found?.finishedOn ? found : null;
    },
    `the ${status.status} status of ${status.id} to be processed`,
    WAIT,
  );
  expect(await job.getState()).toBe("completed");
}

const part = (id: string) => h.db.outboundMessage.findUniqueOrThrow({ where: { id } });

const failedStatus = (wamid: string) => ({
  id: wamid,
  status: "failed",
  errors: [
    {
      code: 131026,
      title: "Message undeliverable",
      message: "Message undeliverable",
      error_data: { details: "Message Undeliverable." },
    },
  ],
});

describe("status webhooks", () => {
  it("delivered then read leaves the reply read", async () => {
    const sent = await sentReply();

    await deliverStatus({ id: sent.wamid, status: "delivered" });
    expect((await part(sent.part.id)).status).toBe("delivered");
    await deliverStatus({ id: sent.wamid, status: "read" });

    const row = await part(sent.part.id);
    expect(row.status).toBe("read");
    expect(row.statusAt).toBeInstanceOf(Date);
  });

  it("read then delivered (out of order) stays read: the status never moves backwards", async () => {
    const sent = await sentReply();

    await deliverStatus({ id: sent.wamid, status: "read" });
    expect((await part(sent.part.id)).status).toBe("read");
    await deliverStatus({ id: sent.wamid, status: "delivered" });

    expect((await part(sent.part.id)).status).toBe("read");
  });

  it("sent after delivered stays delivered", async () => {
    const sent = await sentReply();

    await deliverStatus({ id: sent.wamid, status: "delivered" });
    await deliverStatus({ id: sent.wamid, status: "sent" });

    expect((await part(sent.part.id)).status).toBe("delivered");
  });

  it("sent, delivered and read in one batch-like burst end as read", async () => {
    const sent = await sentReply();

    const answers = await Promise.all(["sent", "delivered", "read"].map((status) => h.deliver(statusWebhook({ id: sent.wamid, status }))));
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200]);

    await eventually(async () => (await part(sent.part.id)).status === "read", "the status to reach read", WAIT);
    await untilQuiet(h);
    expect((await part(sent.part.id)).status).toBe("read");
  });

  it("a failed status (131026) dead-letters the reply with source status, the code and a readable reason", async () => {
    const sent = await sentReply();
    expect(await h.db.deadLetter.count()).toBe(0);

    await deliverStatus(failedStatus(sent.wamid));

    const letters = await h.db.deadLetter.findMany({ where: { replyId: sent.replyId } });
    expect(letters).toHaveLength(1);
    const letter = letters[0]!;
    expect(letter.source).toBe("status");
    expect(letter.code).toBe("131026");
    expect(letter.state).toBe("open");
    expect(letter.reason).toMatch(/undeliverable/i);
    expect(letter.reason).not.toBe("131026");
    expect(letter.detail).toMatchObject({ title: "Message undeliverable", details: "Message Undeliverable." });

    const reply = await h.db.reply.findUniqueOrThrow({ where: { id: sent.replyId } });
    expect(reply.state).toBe("dead");
    expect((await part(sent.part.id)).status).toBe("failed");
  });

  it("the same failed status delivered twice makes one dead letter", async () => {
    const sent = await sentReply();

    const first = await h.deliver(statusWebhook(failedStatus(sent.wamid)));
    const second = await h.deliver(statusWebhook(failedStatus(sent.wamid)));
    expect(first.statusCode).toBe(200);
    expect(second.statusCode).toBe(200);

    await eventually(() => h.db.deadLetter.findFirst({ where: { replyId: sent.replyId } }), "the dead letter", WAIT);
    await untilQuiet(h);
    expect(await h.db.deadLetter.count({ where: { replyId: sent.replyId } })).toBe(1);
  });

  it("the same failed status delivered again after Redis forgot the first makes one dead letter", async () => {
    const sent = await sentReply();
    await deliverStatus(failedStatus(sent.wamid));
    expect(await h.db.deadLetter.count({ where: { replyId: sent.replyId } })).toBe(1);

    // Simulate lost Redis state: the webhook claim (the job's deduplication key) and the finished job are gone.
    await h.queues.status.removeDeduplicationKey(statusJobId(sent.wamid, "failed"));
    await (await h.queues.status.getJob(statusJobId(sent.wamid, "failed")))?.remove();

    await deliverStatus(failedStatus(sent.wamid));
    await untilQuiet(h);
    expect(await h.db.deadLetter.count({ where: { replyId: sent.replyId } })).toBe(1);
  });

  it("a status for an unknown wamid is acknowledged with 200 and changes nothing", async () => {
    const sent = await sentReply();
    const before = await h.db.outboundMessage.findMany({ orderBy: { id: "asc" } });
    const repliesBefore = await h.db.reply.findMany({ orderBy: { id: "asc" } });

    const unknown = uniqueWamid();
    await deliverStatus({ id: unknown, status: "delivered" });
    await deliverStatus({ ...failedStatus(uniqueWamid()) });
    // Someone else's opaque data (not one of our part ids) does not attach it either.
    await deliverStatus({ id: uniqueWamid(), status: "read", biz_opaque_callback_data: randomUUID() });
    await deliverStatus({ id: uniqueWamid(), status: "read", biz_opaque_callback_data: "campaign-42" });

    expect(await h.db.outboundMessage.findMany({ orderBy: { id: "asc" } })).toEqual(before);
    expect(await h.db.reply.findMany({ orderBy: { id: "asc" } })).toEqual(repliesBefore);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect((await part(sent.part.id)).status).toBeNull();
  });

  it("law 5: a status carrying our part id in biz_opaque_callback_data reconciles a send whose answer we never saw", async () => {
    const sent = await sentReply();
    // The send went out, but we never recorded Meta's answer.
    await h.db.outboundMessage.update({ where: { id: sent.part.id }, data: { wamid: null, sendState: "sending", acceptedAt: null } });

    const wamid = uniqueWamid();
    await deliverStatus({ id: wamid, status: "sent", biz_opaque_callback_data: sent.part.id });

    const row = await part(sent.part.id);
    expect(row.wamid).toBe(wamid);
    expect(row.sendState).toBe("accepted");
    expect(row.acceptedAt).toBeInstanceOf(Date);
    expect(row.status).toBe("sent");

    // Later statuses find it by its wamid.
    await deliverStatus({ id: wamid, status: "delivered" });
    expect((await part(sent.part.id)).status).toBe("delivered");
    expect(await h.db.deadLetter.count()).toBe(0);
  });

  it("law 5: a reply job resumed after the reconciling status does not send the part again", async () => {
    const sent = await sentReply();
    // The worker died after Meta accepted the send and before it recorded the answer.
    await h.db.outboundMessage.update({ where: { id: sent.part.id }, data: { wamid: null, sendState: "sending", acceptedAt: null } });
    await h.db.reply.update({ where: { id: sent.replyId }, data: { state: "ready", sentAt: null } });
    const sendsBefore = h.graph.sends.length;

    const wamid = uniqueWamid();
    await deliverStatus({ id: wamid, status: "delivered", biz_opaque_callback_data: sent.part.id });
    expect((await part(sent.part.id)).wamid).toBe(wamid);

    const conversationId = (await h.db.reply.findUniqueOrThrow({ where: { id: sent.replyId } })).conversationId;
    await scheduleReply(h.queues, conversationId, 0);
    await eventually(async () => (await h.db.reply.findUniqueOrThrow({ where: { id: sent.replyId } })).state === "sent", "the resumed reply to finish", WAIT);
    await untilQuiet(h);
    expect(h.graph.sends.length).toBe(sendsBefore);
    expect(h.claude.requests).toHaveLength(1);
    const row = await part(sent.part.id);
    expect(row.wamid).toBe(wamid);
    expect(row.status).toBe("delivered");
  });

  it("a failed status without errors still dead-letters the reply with a reason", async () => {
    const sent = await sentReply();

    await deliverStatus({ id: sent.wamid, status: "failed" });

    const letter = await h.db.deadLetter.findFirstOrThrow({ where: { replyId: sent.replyId } });
    expect(letter.source).toBe("status");
    expect(letter.code).toBeNull();
    expect(letter.reason.length).toBeGreaterThan(10);
    expect((await h.db.reply.findUniqueOrThrow({ where: { id: sent.replyId } })).state).toBe("dead");
  });
});
