import { describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 5's window: a send whose answer never came is sent again once no status came in time, as
 * the same part (our part id rides in biz_opaque_callback_data of both copies). The part is then
 * known by the second copy's wamid. A late receipt of the first copy says nothing of the
 * reply: not even a "failed" one may dead-letter a reply the customer has.
 */

const harness = harnessPerTest();
const FAST = { GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "300", JOB_LOCK_MS: "1000", REPLY_DEBOUNCE_MS: "0" };

describe("a late status of a copy that was sent again", () => {
  it("a failed receipt of the first copy leaves the reply sent and opens no dead letter; the part keeps the copy that arrived", async () => {
    const h = await harness({ env: FAST });
    // Meta takes the first copy (wamid.OUT1) and answers after our timeout; the second copy is answered at once.
    h.graph.answerSends({ status: 200, delayMs: 800 });
    await h.deliver(textWebhook({ text: "what time do you close?" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the second copy to be taken", 15_000);
    const part = await h.db.outboundMessage.findFirstOrThrow();
    expect(part.sendAttempt).toBe(2);
    expect(part.wamid).toBe("wamid.OUT2");

    await h.deliver(
      statusWebhook({ id: "wamid.OUT1", status: "failed", biz_opaque_callback_data: part.id, errors: [graphError(131026, "Message undeliverable").error] }),
    );
    await eventually(async () => (await h.queues.status.getJobCounts("completed")).completed === 1, "the status to be processed");
    await untilQuiet(h);

    expect(await h.db.deadLetter.count()).toBe(0);
    expect(await h.db.reply.findFirstOrThrow()).toMatchObject({ state: "sent" });
    expect(await h.db.outboundMessage.findFirstOrThrow()).toMatchObject({ wamid: "wamid.OUT2", sendState: "accepted", status: null });
  });

  it("the copy that arrived still has its receipts recorded, and its own failure still dead-letters the reply", async () => {
    const h = await harness({ env: FAST });
    await h.deliver(textWebhook({ text: "hello" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply");
    const part = await h.db.outboundMessage.findFirstOrThrow();
    await h.deliver(statusWebhook({ id: part.wamid!, status: "delivered", biz_opaque_callback_data: part.id }));
    await eventually(async () => (await h.db.outboundMessage.findFirstOrThrow()).status === "delivered", "the receipt");
    await h.deliver(
      statusWebhook({ id: part.wamid!, status: "failed", biz_opaque_callback_data: part.id, errors: [graphError(131026, "Message undeliverable").error] }),
    );
    await eventually(() => h.db.deadLetter.findFirst({ where: { source: "status", code: "131026" } }), "the dead letter");
  });
});
