import { randomUUID } from "node:crypto";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Past the 24-hour window only an approved template reaches the customer (WHATSAPP.md §7):
 * whatever free-form text of the reply was still unsent is replaced by the number's template,
 * never sent first (Meta would refuse it with 131047, and the reply would go back to the
 * dead letters with the template never tried).
 */

const harness = harnessPerTest();
const TEMPLATE = { name: "follow_up", language: "en_US" };

async function withTemplate(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "numbers-"));
  const path = join(dir, "numbers.json");
  await writeFile(path, JSON.stringify({ [PHONE_NUMBER_ID]: { windowClosedTemplate: TEMPLATE } }));
  return path;
}

/** Seconds since the epoch such that the 24-hour window closes `inMs` from now. */
const closingIn = (inMs: number) => Math.floor((Date.now() - 24 * 3600_000 + inMs) / 1000);

const templateSends = (h: Harness) => h.graph.requests.filter((r) => r.body.type === "template");

describe("the window closes before the reply is out: the template replaces what was never sent", () => {
  it("a staff resend after the window closed sends the number's template once, and none of the reply's free-form text", async () => {
    const h = await harness({ env: { PHONE_NUMBERS_FILE: await withTemplate(), REPLY_DEBOUNCE_MS: "0" } });
    // Meta refuses the first send outright (the number cannot take WhatsApp messages right now).
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await h.deliver(textWebhook({ text: "can you hold my order?", timestamp: closingIn(4000) }).body);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { code: "131026" } }), "the dead letter");
    expect(await h.db.outboundMessage.findMany({ select: { sendState: true, template: true } })).toEqual([{ sendState: "pending", template: null }]);

    // Staff get to it once the window has closed.
    await eventually(
      async () => {
        const conversation = await h.db.conversation.findFirstOrThrow();
        return Date.now() - conversation.lastInboundAt!.getTime() > 24 * 3600_000 + 200;
      },
      "the window to close",
      15_000,
    );
    const resend = await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${letter.id}/retry`,
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, "idempotency-key": randomUUID() },
    });
    expect(resend.statusCode).toBe(202);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the template to go out");
    await untilQuiet(h);

    expect(templateSends(h).map((r) => r.body.template)).toEqual([{ name: TEMPLATE.name, language: { code: TEMPLATE.language } }]);
    expect(h.graph.sends).toHaveLength(1); // the refused first attempt only: no free-form text past the window
    expect(await h.db.outboundMessage.findMany({ select: { sendState: true, template: true } })).toEqual([{ sendState: "accepted", template: TEMPLATE.name }]);
    expect(await h.db.deadLetter.count({ where: { state: "open" } })).toBe(0);
  });

  it("the window closing while Claude writes: the template goes out instead of the draft, and Claude is paid once", async () => {
    const h = await harness({ env: { PHONE_NUMBERS_FILE: await withTemplate(), REPLY_DEBOUNCE_MS: "0" } });
    h.claude.latencyMs = 2500;
    await h.deliver(textWebhook({ text: "is the sale still on?", timestamp: closingIn(1500) }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the template to go out");
    await untilQuiet(h);

    expect(h.claude.requests).toHaveLength(1);
    expect(templateSends(h)).toHaveLength(1);
    expect(h.graph.sends).toHaveLength(0);
    expect(await h.db.deadLetter.count()).toBe(0);
  });
});
