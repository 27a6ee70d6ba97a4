import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Laws 5 and 13: once a reply is a dead letter, nothing more of it leaves the run that was
 * sending it. A failed status (Meta could not deliver part 1) dead-letters a reply while its
 * run is still sending the next parts; the run must stop before the next part, or a staff
 * resend (which sends every part not delivered) would race it and send a part twice.
 */

const harness = harnessPerTest();

/** A reply of three WhatsApp messages, each part recognisable by its first word. */
const PARTS = ["alpha", "bravo", "charlie"];
const longReply = PARTS.map((word) => `${word} ${"x".repeat(4085)}`).join("\n\n");
const partWord = (text: string) => text.split(" ")[0];

describe("a reply dead-lettered by a failed status while its run is still sending it", () => {
  it("the run sends no further part, and the staff resend sends each part not delivered exactly once", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    h.claude.answer({ text: longReply });
    // Part 1 is taken at once; Meta is slow to answer part 2, and meanwhile reports part 1 failed.
    h.graph.answerSends({ status: 200 }, { status: 200, delayMs: 1200 });
    await h.deliver(textWebhook({ text: "tell me everything about the warranty" }).body);
    await eventually(() => h.graph.sends.length === 2, "part 2 to be on its way");
    const first = await h.db.outboundMessage.findFirstOrThrow({ where: { seq: 0 } });
    await h.deliver(
      statusWebhook({ id: first.wamid!, status: "failed", errors: [graphError(131026, "Message undeliverable").error], biz_opaque_callback_data: first.id }),
    );
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { source: "status" } }), "the dead letter");

    // Part 2's answer comes back to the run, which must not go on to part 3.
    await eventually(async () => (await h.db.outboundMessage.findFirstOrThrow({ where: { seq: 1 } })).sendState === "accepted", "part 2 to be recorded");
    await eventually(async () => (await h.queues.reply.getJobCounts("active", "waiting", "delayed")).active === 0, "the run to end");
    await untilQuiet(h);
    expect(h.graph.sentTexts.map(partWord)).toEqual(["alpha", "bravo"]);

    const resend = await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${letter.id}/retry`,
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, "idempotency-key": randomUUID() },
    });
    expect(resend.statusCode).toBe(202);
    await eventually(async () => (await h.db.reply.findFirstOrThrow()).state === "sent", "the resent reply to go out");
    await untilQuiet(h);

    const sent = h.graph.sentTexts.map(partWord);
    expect(sent.filter((w) => w === "charlie")).toHaveLength(1);
    expect(sent.filter((w) => w === "bravo")).toHaveLength(1); // delivered: not sent again
    expect(sent.filter((w) => w === "alpha")).toHaveLength(2); // failed: sent again, once
    expect(h.claude.requests).toHaveLength(1);
  });
});
