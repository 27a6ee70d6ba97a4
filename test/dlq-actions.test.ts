import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 4: the staff queue — filters, regenerate (an explicit Claude call), and paced bulk resends after an outage. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ env: { JOB_ATTEMPTS: "1" } }); // one attempt: a Graph 503 is a dead letter at once
});
afterAll(async () => h?.close());

const auth = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const get = async (url: string) => h.app.inject({ method: "GET", url, headers: auth });
/** Each request its own Idempotency-Key, as the page sends: a resend must carry one. */
const post = async (url: string, payload?: Record<string, unknown>) =>
  h.app.inject({ method: "POST", url, headers: { ...auth, "idempotency-key": randomUUID() }, ...(payload ? { payload } : {}) });

async function deadLetter(from: string, answer: { status: number; body?: unknown }): Promise<string> {
  h.graph.answerSends(answer);
  await h.deliver(textWebhook({ text: `hello from ${from}`, from }).body);
  return (await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: from } } } }), `a dead letter for ${from}`)).id;
}

/** Meta's own "temporarily unavailable" (with its error body: a proof the message was not taken). */
const outage = { status: 503, body: graphError(133004, "Server temporarily unavailable") };
const undeliverable = { status: 400, body: graphError(131026, "Message undeliverable") };

describe("the staff queue", () => {
  it("filters by reason and state, sorts oldest or newest first, and counts", async () => {
    const first = await deadLetter("3361000000001", undeliverable);
    const second = await deadLetter("3361000000002", outage);
    const all = (await get("/admin/dlq")).json();
    expect(all.items.map((i: { id: string }) => i.id)).toEqual([first, second]);
    expect(all.total).toBe(2);
    expect((await get("/admin/dlq?order=newest")).json().items.map((i: { id: string }) => i.id)).toEqual([second, first]);
    expect((await get("/admin/dlq?code=131026")).json()).toMatchObject({ total: 1, items: [{ id: first, code: "131026" }] });
    expect((await get("/admin/dlq?phoneNumberId=999")).json().total).toBe(0);
    expect((await get("/admin/dlq?state=resent")).json().total).toBe(0);
    expect((await get("/admin/dlq?state=lost")).statusCode).toBe(400);
    expect((await get("/admin/dlq?colour=red")).statusCode).toBe(400);
    for (const id of [first, second]) await post(`/admin/dlq/${id}/discard`);
  });

  it("regenerate is an explicit Claude call: the draft is replaced by a new one, sent once, and audited", async () => {
    const id = await deadLetter("3361000000003", undeliverable);
    const calls = h.claude.requests.length;
    const oldDraft = (await h.db.deadLetter.findUniqueOrThrow({ where: { id }, include: { reply: true } })).reply!.text;
    expect((await post(`/admin/dlq/${id}/regenerate`)).statusCode).toBe(202);
    await eventually(() => h.claude.requests.length === calls + 1, "Claude to be asked again");
    const reply = await eventually(async () => (await h.db.deadLetter.findUniqueOrThrow({ where: { id }, include: { reply: true } })).reply!, "the new draft");
    await eventually(async () => (await h.db.reply.findUniqueOrThrow({ where: { id: reply.id } })).state === "sent", "the new draft to be sent");
    const sent = await h.db.reply.findUniqueOrThrow({ where: { id: reply.id } });
    expect(sent.text).not.toBe(oldDraft);
    expect(h.graph.sentTexts.filter((t) => t === sent.text)).toHaveLength(1);
    expect(await h.db.deadLetterAction.findFirstOrThrow({ where: { deadLetterId: id } })).toMatchObject({ action: "regenerate", actor: "api" });
  });

  it("regenerating a reply Meta accepted and then reported failed pays Claude once and sends the new draft once", async () => {
    await h.deliver(textWebhook({ text: "hello", from: "3361000000021" }).body);
    const part = await eventually(
      () => h.db.outboundMessage.findFirst({ where: { sendState: "accepted", reply: { conversation: { contact: { waId: "3361000000021" } } } } }),
      "the accepted send",
    );
    const failed = {
      object: "whatsapp_business_account",
      entry: [
        {
          id: "1",
          changes: [
            {
              field: "messages",
              value: {
                messaging_product: "whatsapp",
                metadata: { phone_number_id: "106540352242922" },
                statuses: [
                  {
                    id: part.wamid,
                    status: "failed",
                    timestamp: String(Math.floor(Date.now() / 1000)),
                    recipient_id: "3361000000021",
                    errors: [{ code: 131026, title: "Message undeliverable" }],
                  },
                ],
              },
            },
          ],
        },
      ],
    };
    await h.deliver(JSON.stringify(failed));
    const letter = await eventually(
      () => h.db.deadLetter.findFirst({ where: { code: "131026", state: "open", conversation: { contact: { waId: "3361000000021" } } } }),
      "the dead letter",
    );
    const calls = h.claude.requests.length;
    expect((await post(`/admin/dlq/${letter.id}/regenerate`)).statusCode).toBe(202);
    await eventually(async () => (await h.db.reply.findUniqueOrThrow({ where: { id: part.replyId } })).state === "sent", "the regenerated reply to be sent");
    expect(h.claude.requests.length).toBe(calls + 1);
    const parts = await h.db.outboundMessage.findMany({ where: { replyId: part.replyId }, orderBy: { seq: "asc" } });
    expect(parts.map((p) => [p.seq, p.status ?? p.sendState])).toEqual([
      [0, "failed"],
      [1, "accepted"],
    ]); // the failed one stays as history
  });

  it("bulk resend: every open item of one reason goes out once, paced, and other reasons are left alone", async () => {
    const transient = [await deadLetter("3361000000011", outage), await deadLetter("3361000000012", outage), await deadLetter("3361000000013", outage)];
    const other = await deadLetter("3361000000014", undeliverable);
    const sendsBefore = h.graph.sends.length;
    const requestedAt = Date.now();
    const res = await post("/admin/dlq/bulk-retry", { code: "133004", spacingMs: 300 });
    expect(res.statusCode).toBe(202);
    expect(res.json()).toMatchObject({ resent: 3, skipped: 0, spacingMs: 300 });
    await eventually(() => h.graph.sends.length === sendsBefore + 3, "three resends");
    const resends = h.graph.sends.slice(sendsBefore);
    expect(new Set(resends.map((s) => s.body.to))).toEqual(new Set(["3361000000011", "3361000000012", "3361000000013"]));
    // Paced: in the list's order (oldest first), each item's reply job was queued spacingMs after
    // the one before, and no resend reached Meta before its job was due.
    const jobs = await Promise.all(transient.map((id) => resendJob(id, requestedAt)));
    expect(jobs.map((job) => job.opts.delay ?? 0)).toEqual([0, 300, 600]);
    for (const [i, job] of jobs.entries()) {
      const send = resends.find((s) => s.body.to === `336100000001${i + 1}`)!;
      expect(send.at).toBeGreaterThanOrEqual(job.timestamp + (job.opts.delay ?? 0));
    }
    for (const id of transient) expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id } })).state).toBe("resent");
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: other } })).state).toBe("open");
    expect((await post("/admin/dlq/bulk-retry", {})).statusCode).toBe(400);
  });
});

/** The one reply job queued for a dead letter's conversation since `since`, with its options as queued. */
async function resendJob(deadLetterId: string, since: number) {
  const { conversationId } = await h.db.deadLetter.findUniqueOrThrow({ where: { id: deadLetterId } });
  const jobs = await h.queues.reply.getJobs(["completed", "active", "delayed", "waiting", "prioritized"]);
  const queued = jobs.filter((job) => job.data.conversationId === conversationId && job.timestamp >= since);
  expect(queued).toHaveLength(1);
  return queued[0]!;
}
