import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Receiver } from "./support/chat-receiver.ts";
import { problemsOf } from "./support/config-problems.ts";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { freePort } from "./support/ports.ts";
import { untilQuiet } from "./support/quiet.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/** Issue 20, point 4: a number's daily budget stops new answers; the customer hears the holding reply, staff are told once that day. */

const HOLDING = "Thanks for your message. A person from our team will get back to you here shortly.";
const harness = harnessPerTest();
const BATCH_MS = 300;
let receiver: Receiver | undefined;
afterEach(async () => {
  await receiver?.stop();
  receiver = undefined;
});

async function numbersWithBudget(usd: number, more: Record<string, unknown> = {}): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "budget-"));
  const file = join(dir, "numbers.json");
  await writeFile(file, JSON.stringify({ [PHONE_NUMBER_ID]: { dailyBudget: { usd }, ...more } }));
  return file;
}

/** What the ledger says the number's calls cost, and the dearest one. */
async function spent(h: Harness): Promise<{ usd: number; dearest: number }> {
  const costs = (await h.db.claudeCall.findMany({ where: { state: "answered" } })).map((c) => c.costUsd ?? 0);
  return { usd: costs.reduce((n, c) => n + c, 0), dearest: Math.max(0, ...costs) };
}

describe("a daily budget", () => {
  it("once the day's spend reaches it, new answers go to staff: Claude is not asked, the customer hears the holding reply, staff are told once that day", async () => {
    receiver = await new Receiver(await freePort()).start();
    const h = await harness({
      env: {
        // A millionth of a dollar: the first answer spends it.
        PHONE_NUMBERS_FILE: await numbersWithBudget(0.000001),
        HOLDING_REPLY: HOLDING,
        STAFF_NOTIFY_WEBHOOK_URL: receiver.url,
        PUBLIC_BASE_URL: "https://staff.example.com",
        STAFF_NOTIFY_BATCH_MS: String(BATCH_MS),
      },
    });
    await h.deliver(textWebhook({ from: "4477000000001", text: "are you open today?" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the first answer, within the budget");
    expect((await h.db.reply.findFirstOrThrow()).claudeCostUsd).toBeGreaterThan(0.000001);

    await h.deliver(textWebhook({ from: "4477000000002", text: "and tomorrow?" }).body);
    await eventually(() => receiver!.delivered.length === 1, "staff to be told");
    await h.deliver(textWebhook({ from: "4477000000003", text: "hello?" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { kind: "holding", state: "sent" } })) === 2, "both customers told a person will answer");
    // A collect that ran a whole batch window after the last item and the first notification
    // would have told staff of the item, were it to be told: one has run, and all it started is done.
    const notified = await h.db.staffNotification.findFirstOrThrow({ orderBy: { createdAt: "desc" } });
    const lastItem = await h.db.deadLetter.findFirstOrThrow({ orderBy: { createdAt: "desc" } });
    const due = Math.max(notified.createdAt.getTime(), lastItem.createdAt.getTime()) + BATCH_MS;
    await eventually(
      async () => (await h.queues.notify.getJobs(["completed"])).some((job) => job.name === "collect" && (job.processedOn ?? 0) >= due),
      "a collect a batch window after the last item",
    );
    await untilQuiet(h);

    expect(h.claude.requests).toHaveLength(1);
    const items = await h.db.deadLetter.findMany({ where: { state: "open" }, orderBy: { createdAt: "asc" } });
    expect(items.map((d) => [d.source, d.code])).toEqual([
      ["budget", "daily_budget"],
      ["budget", "daily_budget"],
    ]);
    expect(h.graph.sentTexts.slice(1)).toEqual([HOLDING, HOLDING]);
    expect(receiver.delivered).toHaveLength(1);
    expect(receiver.delivered[0]).toContain("Daily budget spent");
    expect(receiver.delivered[0]).toContain(items[0]!.id);
    expect(receiver.delivered[0]).not.toContain(items[1]!.id);
  });

  it("a number whose spend is under its budget is answered as usual", async () => {
    const h = await harness({ env: { PHONE_NUMBERS_FILE: await numbersWithBudget(5), HOLDING_REPLY: HOLDING } });
    for (const from of ["4477000000011", "4477000000012"]) await h.deliver(textWebhook({ from, text: "hi" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 2, "both answers");
    expect(h.claude.requests).toHaveLength(2);
    expect(await h.db.deadLetter.count()).toBe(0);
  });

  it("holds under concurrency: six customers at once against a budget smaller than one call, and only one call is made (each reserves its greatest cost first)", async () => {
    const budget = 0.000001;
    const h = await harness({ env: { PHONE_NUMBERS_FILE: await numbersWithBudget(budget), HOLDING_REPLY: HOLDING } });
    h.claude.latencyMs = 500; // all six are in flight together
    const customers = ["4477000000021", "4477000000022", "4477000000023", "4477000000024", "4477000000025", "4477000000026"];
    await Promise.all(customers.map((from) => h.deliver(textWebhook({ from, text: "are you open?" }).body)));
    await eventually(async () => (await h.db.reply.count({ where: { kind: "ai", state: { in: ["sent", "dead"] } } })) === 6, "every customer answered or held");
    await untilQuiet(h);

    expect(h.claude.requests).toHaveLength(1);
    const { usd, dearest } = await spent(h);
    expect(usd).toBeLessThanOrEqual(budget + dearest); // over by at most one call
    expect(await h.db.deadLetter.count({ where: { source: "budget" } })).toBe(5);
    const [call] = await h.db.claudeCall.findMany();
    expect(call!.reservedUsd).toBeGreaterThanOrEqual(call!.costUsd!); // the reservation bounds what it cost
  });

  it("a customer who writes on after the budget stopped the bot hears the holding reply once that day, not once per message", async () => {
    const h = await harness({ env: { PHONE_NUMBERS_FILE: await numbersWithBudget(0.000001), HOLDING_REPLY: HOLDING } });
    await h.deliver(textWebhook({ from: "4477000000031", text: "first" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the first answer, within the budget");
    for (const [i, text] of ["second", "third", "fourth"].entries()) {
      await h.deliver(textWebhook({ from: "4477000000032", text }).body);
      await eventually(async () => (await h.db.deadLetter.count({ where: { source: "budget" } })) === i + 1, `budget item ${i + 1}`);
      await untilQuiet(h);
    }
    expect(h.graph.sentTexts.filter((t) => t === HOLDING)).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(1);
  });

  it("a holding reply still waiting when the 24-hour window closes is dropped, never turned into a paid template", async () => {
    const h = await harness({
      env: {
        PHONE_NUMBERS_FILE: await numbersWithBudget(0.000001, { windowClosedTemplate: { name: "we_are_here", language: "en_US" } }),
        HOLDING_REPLY: HOLDING,
      },
    });
    await h.deliver(textWebhook({ from: "4477000000041", text: "first" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the first answer, within the budget");
    // Meta is briefly unavailable when the holding reply goes out; by its retry the window has closed.
    h.graph.answerSends({ status: 503, body: { error: { code: 2, message: "Service temporarily unavailable" } }, delayMs: 1000 });
    await h.deliver(textWebhook({ from: "4477000000042", text: "second" }).body);
    const holding = await eventually(() => h.db.reply.findFirst({ where: { kind: "holding" } }), "the holding reply");
    await eventually(() => h.graph.requests.some((r) => JSON.stringify(r.body).includes(HOLDING)), "the holding reply's first send");
    await h.db.conversation.update({ where: { id: holding.conversationId }, data: { lastInboundAt: new Date(Date.now() - 25 * 3_600_000) } });
    await eventually(
      async () => (await h.db.reply.findUniqueOrThrow({ where: { id: holding.id } })).state === "dead",
      "the holding reply to be dropped",
      30_000,
    );
    await untilQuiet(h);

    expect(h.graph.templateSends).toHaveLength(0);
    expect(h.graph.sentTexts.filter((t) => t === HOLDING)).toHaveLength(1); // the one attempt Meta refused
    const item = await h.db.deadLetter.findFirstOrThrow({ where: { holdingReplyId: holding.id }, include: { actions: true } });
    expect(item.actions.map((a) => a.action)).toContain("holding_failed");
    expect(await h.db.deadLetter.count()).toBe(1); // joined its item; not an item of its own
  });

  it("names its currency: a bare number is refused at start-up, saying to write { usd }", async () => {
    const dir = await mkdtemp(join(tmpdir(), "budget-"));
    const file = join(dir, "numbers.json");
    await writeFile(file, JSON.stringify({ [PHONE_NUMBER_ID]: { dailyBudget: 5 } }));
    expect(problemsOf({ PHONE_NUMBERS_FILE: file })).toContainEqual(
      expect.stringMatching(new RegExp(`^PHONE_NUMBERS_FILE ${PHONE_NUMBER_ID}.dailyBudget: .*"usd"`)),
    );
  });
});
