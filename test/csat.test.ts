import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { envelope, messagesChange, metaWire, PHONE_NUMBER_ID, statusWebhook, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/** Issue 33.3: asking the customer how it went (CSAT), once, through the send path, and their tap recorded. */

const harness = harnessPerTest();
const CUSTOMER = "16505551234";

/** A tap on a reply button, as Meta delivers it (WHATSAPP.md §3, `interactive.button_reply`). */
function buttonTap(id: string, title: string, context?: string): string {
  const message = {
    from: CUSTOMER,
    id: uniqueWamid(),
    timestamp: String(Math.floor(Date.now() / 1000)),
    type: "interactive",
    interactive: { type: "button_reply", button_reply: { id, title } },
    ...(context ? { context: { from: "15550783881", id: context } } : {}),
  };
  return metaWire(envelope([messagesChange([message as never], PHONE_NUMBER_ID)]));
}

const asks = (h: Harness) => h.db.csatAsk.findMany({ orderBy: { createdAt: "asc" } });

/** The customer writes, the bot answers (its text reply sent). */
async function answered(h: Harness, text = "Do you ship to Lisbon?", timestamp?: number): Promise<void> {
  const before = h.graph.sends.length;
  expect((await h.deliver(textWebhook({ text, from: CUSTOMER, ...(timestamp ? { timestamp } : {}) }).body)).statusCode).toBe(200);
  await eventually(() => h.graph.sends.length > before, "the bot's answer");
}

async function asked(h: Harness, count = 1) {
  await eventually(() => h.graph.interactiveSends.length >= count, "the CSAT ask");
  return h.graph.interactiveSends;
}

describe("asking how it went (CSAT)", () => {
  it("answered, then quiet for CSAT_AFTER_SECONDS: one interactive message with the three buttons, sent and priced like any part", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1" } });
    await answered(h);
    const [send] = await asked(h);
    expect(send!.body).toMatchObject({
      messaging_product: "whatsapp",
      to: CUSTOMER,
      type: "interactive",
      interactive: {
        type: "button",
        body: { text: "How did we do?" },
        action: {
          buttons: [
            { type: "reply", reply: { id: "csat:good", title: "👍 Good" } },
            { type: "reply", reply: { id: "csat:okay", title: "😐 Okay" } },
            { type: "reply", reply: { id: "csat:bad", title: "👎 Bad" } },
          ],
        },
      },
    });
    const [ask] = await asks(h);
    expect(ask).toMatchObject({ state: "sent", rating: null });
    expect(ask!.askedAt).toBeInstanceOf(Date);
    // Law 5: a part of a reply of kind "csat", carrying our part id back in its statuses.
    const reply = await h.db.reply.findUniqueOrThrow({ where: { id: ask!.replyId! }, include: { parts: true } });
    expect(reply.kind).toBe("csat");
    expect(send!.body.biz_opaque_callback_data).toBe(reply.parts[0]!.id);
    await eventually(async () => (await h.db.reply.findUniqueOrThrow({ where: { id: reply.id } })).state === "sent", "the ask marked sent");
    const part = await h.db.outboundMessage.findUniqueOrThrow({ where: { id: reply.parts[0]!.id } });
    await h.deliver(statusWebhook({ id: part.wamid!, status: "sent", recipient_id: CUSTOMER, pricing: { category: "service", type: "regular" } }));
    await eventually(async () => (await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).pricedAt !== null, "the ask priced");
    await sleep(1500);
    expect(h.graph.interactiveSends).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(1);
  });

  it("follows a bot's answer confirmed only by its status webhook (Meta never answered the send) too", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1", GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "4000" } });
    h.graph.answerSends({ hang: true });
    expect((await h.deliver(textWebhook({ text: "Do you ship to Lisbon?", from: CUSTOMER }).body)).statusCode).toBe(200);
    const part = await eventually(() => h.db.outboundMessage.findFirst({ where: { sendState: "sending" } }), "the send started");
    // Past the client's timeout: the answer is maybe-sent, its job waiting SEND_RECONCILE_WAIT_MS for its status, and nobody is asked yet.
    await sleep(1500);
    expect(h.graph.interactiveSends).toHaveLength(0);
    await h.deliver(statusWebhook({ id: "wamid.CONFIRMED-BY-STATUS", status: "sent", recipient_id: CUSTOMER, biz_opaque_callback_data: part.id }));
    await asked(h);
    await sleep(1500);
    expect(h.graph.interactiveSends).toHaveLength(1);
  });

  it("is never asked while CSAT_AFTER_SECONDS is unset", async () => {
    const h = await harness();
    await answered(h);
    await sleep(1500);
    expect(h.graph.interactiveSends).toHaveLength(0);
    expect(await asks(h)).toEqual([]);
  });

  it("a customer message before it is due cancels it; the customer is asked once, after the last answer", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "2" } });
    await answered(h, "Do you ship to Lisbon?");
    // The reply job plans the ask just after the answer goes out: the next message comes once it is planned.
    await eventually(async () => (await asks(h)).length === 1, "the first ask to be planned");
    await answered(h, "And to Porto?");
    await asked(h);
    const all = await asks(h);
    expect(all.map((a) => [a.state, a.reason])).toEqual([
      ["cancelled", "the customer wrote"],
      ["sent", null],
    ]);
    const askSentAt = h.graph.requests.indexOf(h.graph.interactiveSends[0]!);
    expect(askSentAt).toBeGreaterThan(h.graph.requests.indexOf(h.graph.sends[1]!));
    await sleep(2500);
    expect(h.graph.interactiveSends).toHaveLength(1);
  });

  const notAsked: [string, string, (h: Harness) => Promise<unknown>][] = [
    ["a customer who opted out", "opted out", (h) => h.db.conversation.updateMany({ data: { optedOutAt: new Date() } })],
    [
      "a conversation handed to a person (paused)",
      "the bot is paused for a person",
      (h) => h.db.conversation.updateMany({ data: { pausedUntil: new Date(Date.now() + 3_600_000), pausedBy: "staff" } }),
    ],
    [
      "a conversation with an open item",
      "an open item waits for staff",
      async (h) => {
        const conversation = await h.db.conversation.findFirstOrThrow();
        return h.db.deadLetter.create({ data: { conversationId: conversation.id, dedupKey: "test.item", source: "internal", reason: "test" } });
      },
    ],
    [
      "a customer asked within CSAT_EVERY_DAYS",
      "asked recently",
      async (h) => {
        const conversation = await h.db.conversation.findFirstOrThrow();
        const day = 24 * 3_600_000;
        return h.db.csatAsk.create({
          data: {
            conversationId: conversation.id,
            state: "sent",
            answeredAt: new Date(Date.now() - day),
            dueAt: new Date(Date.now() - day),
            askedAt: new Date(Date.now() - day),
          },
        });
      },
    ],
  ];
  it.each(notAsked)("is not asked: %s", async (_what, reason, arrange) => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "2", CSAT_EVERY_DAYS: "7" } });
    await answered(h);
    await arrange(h);
    const ask = await eventually(
      async () => (await h.db.csatAsk.findFirst({ where: { state: { not: "sent" }, reason: { not: null } } })) ?? undefined,
      "the ask settled",
    );
    expect(ask).toMatchObject({ state: "skipped", reason, askedAt: null });
    await sleep(300);
    expect(h.graph.interactiveSends).toHaveLength(0);
  });

  it("is not sent when the 24-hour window closed by the time it is due (skipped)", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "4" } });
    // The customer's message is 24 h old but for 3 s: the answer goes out, the ask would not.
    await answered(h, "hello", Math.floor((Date.now() - 24 * 3_600_000) / 1000) + 3);
    const ask = await eventually(async () => (await h.db.csatAsk.findFirst({ where: { state: "skipped" } })) ?? undefined, "the ask skipped", 10_000);
    expect(ask.reason).toBe("the 24-hour window had closed");
    expect(h.graph.interactiveSends).toHaveLength(0);
    expect(h.graph.templateSends).toHaveLength(0);
  });
});

describe("an ask that does not arrive", () => {
  const HOLDING_REPLY = "A person will look at your message shortly.";

  it("refused by Meta: no item for staff and no holding reply; the ask is skipped with why and not counted as asked", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1", HOLDING_REPLY, JOB_ATTEMPTS: "1" } });
    await answered(h);
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable", "Message Undeliverable.") });
    const ask = await eventually(async () => (await h.db.csatAsk.findFirst({ where: { state: "skipped" } })) ?? undefined, "the ask skipped", 10_000);
    expect(ask).toMatchObject({ askedAt: null, reason: expect.stringMatching(/^not delivered: /) });
    expect((await h.db.reply.findUniqueOrThrow({ where: { id: ask.replyId! } })).state).toBe("dead");
    await sleep(1000);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect(h.graph.sentTexts).not.toContain(HOLDING_REPLY);
    expect(h.graph.interactiveSends).toHaveLength(1);
    const insights = await h.app.inject({ method: "GET", url: "/admin/insights", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(insights.json().total.csat).toEqual({ asked: 0, answered: 0, good: 0, okay: 0, bad: 0 });
  });

  it("reported failed by Meta after it took it: the same, quietly", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1", HOLDING_REPLY } });
    await answered(h);
    await asked(h);
    const part = await eventually(() => h.db.outboundMessage.findFirst({ where: { reply: { kind: "csat" }, wamid: { not: null } } }), "the ask taken by Meta");
    await h.deliver(statusWebhook({ id: part.wamid!, status: "failed", recipient_id: CUSTOMER, errors: [{ code: 131026, title: "Message undeliverable" }] }));
    const ask = await eventually(async () => (await h.db.csatAsk.findFirst({ where: { state: "skipped" } })) ?? undefined, "the ask skipped", 10_000);
    expect(ask).toMatchObject({ askedAt: null, reason: expect.stringMatching(/^not delivered: /) });
    await sleep(1000);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect(h.graph.sentTexts).not.toContain(HOLDING_REPLY);
  });
});

describe("the customer's tap (a rating)", () => {
  it("is recorded as the rating of the latest ask, thanked once with CSAT_THANKS, and never sent to Claude; a second tap replaces it", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1", CSAT_THANKS: "Thanks a lot!" } });
    await answered(h);
    await asked(h);
    // Meta has the send before the worker records its wamid: waited for, not assumed.
    const askPart = await eventually(
      () => h.db.outboundMessage.findFirst({ where: { reply: { kind: "csat" }, wamid: { not: null } } }),
      "the ask taken by Meta",
    );
    await h.deliver(buttonTap("csat:good", "👍 Good", askPart.wamid!));
    await eventually(() => h.graph.sentTexts.includes("Thanks a lot!"), "the thanks");
    expect((await asks(h))[0]).toMatchObject({ rating: "good", thanked: true });

    await h.deliver(buttonTap("csat:bad", "👎 Bad", askPart.wamid!));
    await eventually(async () => (await asks(h))[0]!.rating === "bad", "the second tap replacing the rating");
    await sleep(1500);
    expect(h.graph.sentTexts.filter((t) => t === "Thanks a lot!")).toHaveLength(1);
    // Never Claude's: one call, for the first message; a bad rating opens no item; the thanks asks nothing again.
    expect(h.claude.requests).toHaveLength(1);
    expect(await h.db.deadLetter.count()).toBe(0);
    expect(h.graph.interactiveSends).toHaveLength(1);
    const taps = await h.db.inboundMessage.findMany({ where: { type: "interactive" } });
    expect(taps.map((m) => [m.replyId, m.skipReason])).toEqual([
      [null, "a CSAT rating (good)"],
      [null, "a CSAT rating (bad)"],
    ]);
  });

  it("any other button is a message as today: Claude answers it", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1" } });
    await h.deliver(buttonTap("menu:hours", "Opening hours"));
    await eventually(() => h.graph.sends.length === 1, "Claude's answer");
    expect(h.claude.userText(0)).toContain("Opening hours");
  });
});

describe("restart-safe: sent once, whatever stops", () => {
  it("an ask due while the workers were down goes out when they are back, exactly once", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1" } });
    await answered(h);
    await h.stopWorkers();
    expect((await asks(h))[0]!.state).toBe("pending");
    await sleep(1500);
    expect(h.graph.interactiveSends).toHaveLength(0);
    h.startWorkers();
    await asked(h);
    await sleep(2000);
    expect(h.graph.interactiveSends).toHaveLength(1);
    expect((await asks(h)).map((a) => a.state)).toEqual(["sent"]);
  });

  it("an ask whose delayed job was lost from Redis is still sent once, by the reconciler", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "2", RECONCILE_INTERVAL_MS: "500" } });
    await answered(h);
    const job = await eventually(async () => (await h.queues.csat.getDelayed())[0], "the ask's delayed job");
    await job.remove();
    await asked(h);
    await sleep(2000);
    expect(h.graph.interactiveSends).toHaveLength(1);
    expect((await asks(h)).map((a) => a.state)).toEqual(["sent"]);
  });

  it("the staff API reads the ratings: insights count each ask and its latest rating on the day asked (a tap is not a customer message), and conversations filter and show it", async () => {
    const h = await harness({ env: { CSAT_AFTER_SECONDS: "1" } });
    await answered(h);
    await asked(h);
    await h.deliver(buttonTap("csat:good", "👍 Good"));
    await eventually(async () => (await asks(h))[0]?.rating === "good", "the first tap");
    await sleep(1100); // the second tap a second later, by Meta's timestamp (whole seconds), which orders taps
    await h.deliver(buttonTap("csat:bad", "👎 Bad"));
    await eventually(async () => (await asks(h))[0]?.rating === "bad", "the second tap to replace the first");
    const today = new Date().toISOString().slice(0, 10);
    const res = await h.app.inject({
      method: "GET",
      url: `/admin/insights?from=${today}&to=${today}`,
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` },
    });
    expect(res.statusCode, res.body).toBe(200);
    const { days, total } = res.json();
    const csat = { asked: 1, answered: 1, good: 0, okay: 0, bad: 1 };
    expect(days[0].csat).toEqual(csat);
    expect(total.csat).toEqual(csat);
    expect(total.inbound).toBe(1);

    const get = async (url: string) => {
      const answer = await h.app.inject({ method: "GET", url, headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
      expect(answer.statusCode, answer.body).toBe(200);
      return answer.json();
    };
    const bad = await get("/admin/conversations?rating=bad");
    expect(bad.items).toEqual([expect.objectContaining({ rating: "bad" })]);
    expect((await get("/admin/conversations?rating=good")).items).toEqual([]);
    const detail = await get(`/admin/conversations/${bad.items[0].id}`);
    expect(detail.ratings).toEqual([{ rating: "bad", askedAt: expect.any(String), ratedAt: expect.any(String) }]);
  });
});
