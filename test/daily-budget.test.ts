import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Receiver } from "./support/chat-receiver.ts";
import { eventually } from "./support/harness.ts";
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

async function numbersWithBudget(dailyBudget: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "budget-"));
  const file = join(dir, "numbers.json");
  await writeFile(file, JSON.stringify({ [PHONE_NUMBER_ID]: { dailyBudget } }));
  return file;
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
});
