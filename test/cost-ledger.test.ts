import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { utcDay } from "../src/costs/ledger.ts";
import { statusJobId } from "../src/queue/catalog.ts";
import type { BilledUsage } from "./support/fake-anthropic.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { expectLedgerToMatchBilled } from "./support/ledger.ts";
import { longReply } from "./support/long-replies.ts";
import { envelope, metaWire, PHONE_NUMBER_ID, statusChange, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 20: every reply's cost known. Over a scripted conversation whose status webhooks come
 * repeated and out of order, GET /admin/costs says what a hand count of the same conversation
 * says: Claude's tokens as the fake Claude billed them, priced by MODEL_PRICES_FILE; Meta's
 * messages counted once each, priced by META_RATES_FILE by the recipient's market.
 */

const WAIT = 20_000;
const MODEL = "claude-haiku-5-5";
// Round prices (USD per million tokens), so the hand count is easy to follow.
const PRICES = { [MODEL]: { input: 1, output: 5, cacheWrite5m: 1.25, cacheWrite1h: 2, cacheRead: 0.1 } };
const RATES = { service: { "44": 0.0125, "1": 0.02 }, marketing: { "44": 0.05 } };

const UK = "447700900123";
const US = "16505550123";
const BSUID = "US.13491208655302741918";

let h: Harness;
beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), "costs-"));
  writeFileSync(join(dir, "prices.json"), JSON.stringify(PRICES));
  writeFileSync(join(dir, "rates.json"), JSON.stringify(RATES));
  h = await startHarness({ env: { MODEL_PRICES_FILE: join(dir, "prices.json"), META_RATES_FILE: join(dir, "rates.json") } });
});
afterAll(async () => h?.close());

const bearer = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const costs = (query: string) => h.app.inject({ method: "GET", url: `/admin/costs${query}`, headers: bearer });

/** A customer known by a BSUID alone (WHATSAPP.md §9): no phone number, so no market. */
const bsuidWebhook = (text: string) =>
  metaWire(
    envelope([
      {
        field: "messages",
        value: {
          messaging_product: "whatsapp",
          metadata: { display_phone_number: "15550783881", phone_number_id: PHONE_NUMBER_ID },
          contacts: [{ profile: { name: "María G.", username: "@maria.g" }, user_id: BSUID }],
          messages: [{ from_user_id: BSUID, id: uniqueWamid(), timestamp: String(Math.floor(Date.now() / 1000)), type: "text", text: { body: text } }],
        },
      },
    ]),
  );

/** The parts Meta took of the latest reply to `who` (a phone or a BSUID), once it has `count` of them. */
async function sentParts(who: { waId: string } | { userId: string }, count: number) {
  return eventually(
    async () => {
      const reply = await h.db.reply.findFirst({
        where: { state: "sent", conversation: { contact: who } },
        orderBy: { createdAt: "desc" },
        include: { parts: { orderBy: { seq: "asc" } } },
      });
      return reply && reply.parts.length === count && reply.parts.every((p) => p.wamid) ? reply.parts.map((p) => p.wamid!) : null;
    },
    `a sent reply of ${count} part(s)`,
    WAIT,
  );
}

type Pricing = { pricing_model: "PMP"; type: string; category: string; billable?: boolean };
const regular: Pricing = { pricing_model: "PMP", type: "regular", category: "service" };
const freeEntry: Pricing = { pricing_model: "PMP", type: "free_entry_point", category: "service" };

/** A status webhook as Meta sends it, and its job run to the end. */
async function status(wamid: string, name: "sent" | "delivered" | "read", to: { recipient_id: string } | { recipient_user_id: string }, pricing?: Pricing) {
  const body = metaWire(
    envelope([statusChange([{ id: wamid, status: name, timestamp: String(Math.floor(Date.now() / 1000)), ...to, ...(pricing ? { pricing } : {}) }])]),
  );
  expect((await h.deliver(body)).statusCode).toBe(200);
  await eventually(async () => (await h.queues.status.getJob(statusJobId(wamid, name)))?.finishedOn, `the ${name} status of ${wamid}`, WAIT);
}

/** What Anthropic bills for these answers, by PRICES, in USD. */
const claudeUsd = (usages: BilledUsage[]) =>
  usages.reduce((sum, u) => {
    const hour = u.cache_creation?.ephemeral_1h_input_tokens ?? 0;
    return sum + (u.input_tokens * 1 + (u.cache_creation_input_tokens - hour) * 1.25 + hour * 2 + u.cache_read_input_tokens * 0.1 + u.output_tokens * 5) / 1e6;
  }, 0);

describe("the cost ledger", () => {
  it("matches a hand count over a scripted conversation with repeated and out-of-order status webhooks", async () => {
    // Four replies: one to a UK number, one split into two parts to a US number, one to a
    // customer known by a BSUID alone, and one more to the UK number that Meta does not bill.
    await h.deliver(textWebhook({ from: UK, text: "Do you open on Sundays?" }).body);
    const [uk1] = await sentParts({ waId: UK }, 1);
    h.claude.answer({ text: longReply("ASCII prose", 6000) });
    await h.deliver(textWebhook({ from: US, text: "Tell me everything about delivery" }).body);
    const [us1, us2] = await sentParts({ waId: US }, 2);
    await h.deliver(bsuidWebhook("¿Tienen mesa esta noche?"));
    const [bsuid1] = await sentParts({ userId: BSUID }, 1);
    await h.deliver(textWebhook({ from: UK, text: "And on holidays?" }).body);
    const uk2 = await eventually(async () => {
      const [latest] = await sentParts({ waId: UK }, 1);
      return latest !== uk1 ? latest : null;
    }, "the second UK reply");

    // Read before sent, then delivered, then read again: sent and read both carry pricing.
    await status(uk1!, "read", { recipient_id: UK }, regular);
    await status(uk1!, "sent", { recipient_id: UK }, regular);
    await status(uk1!, "delivered", { recipient_id: UK });
    await status(uk1!, "read", { recipient_id: UK }, regular);
    // Sent twice, then delivered with pricing again.
    await status(us1!, "sent", { recipient_id: US }, regular);
    await status(us1!, "sent", { recipient_id: US }, regular);
    await status(us1!, "delivered", { recipient_id: US }, regular);
    // Delivered before sent, both priced.
    await status(us2!, "delivered", { recipient_id: US }, regular);
    await status(us2!, "sent", { recipient_id: US }, regular);
    // No phone number: an unknown market, which the rate card does not price.
    await status(bsuid1!, "sent", { recipient_user_id: BSUID }, regular);
    await status(bsuid1!, "read", { recipient_user_id: BSUID }, regular);
    // Free (a Click-to-WhatsApp ad's entry point): counted, never billed.
    await status(uk2!, "sent", { recipient_id: UK }, freeEntry);
    await status(uk2!, "read", { recipient_id: UK }, freeEntry);

    // The hand count.
    const billed = h.claude.usages;
    expect(billed).toHaveLength(4);
    const tokens = {
      input: billed.reduce((n, u) => n + u.input_tokens, 0),
      output: billed.reduce((n, u) => n + u.output_tokens, 0),
      cacheRead: billed.reduce((n, u) => n + u.cache_read_input_tokens, 0),
      cacheWrite: billed.reduce((n, u) => n + u.cache_creation_input_tokens, 0),
    };
    const today = utcDay(new Date());
    const res = await costs(`?from=${today}&to=${today}`);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ from: today, to: today, rateCard: true });
    expect(body.days).toHaveLength(1);
    const [day] = body.days;
    expect(day).toEqual({
      phoneNumberId: PHONE_NUMBER_ID,
      day: today,
      replies: 4,
      parts: 5,
      messages: { billable: { service: 4 }, free: { service: 1 } },
      tokens,
      amounts: { claudeUsd: expect.any(Number), meta: expect.any(Number), unpriced: { claudeCalls: 0, metaMessages: 1 } },
    });
    // UK 0.0125 + two US parts at 0.02; the BSUID's is counted, not priced.
    expect(day.amounts.meta).toBeCloseTo(0.0125 + 0.02 + 0.02, 10);
    expect(day.amounts.claudeUsd).toBeCloseTo(claudeUsd(billed), 12);
    expect(day.amounts.claudeUsd).toBeGreaterThan(0);
    expect(body.total).toEqual({ ...day, phoneNumberId: undefined, day: undefined });

    // One row per paid call in the ledger, as billed.
    await expectLedgerToMatchBilled(h.db, billed);

    // Each reply priced as Claude answered, not later.
    expect((await h.db.reply.findMany({ select: { claudeCostUsd: true } })).map((r) => r.claudeCostUsd)).not.toContain(null);

    // Each part's record: the first pricing wins, with its market.
    const parts = await h.db.outboundMessage.findMany({ where: { wamid: { in: [uk1!, us1!, us2!, bsuid1!, uk2!] } } });
    const byWamid = new Map(parts.map((p) => [p.wamid, p]));
    expect(byWamid.get(uk1!)).toMatchObject({ market: "44", metaAmount: 0.0125, billable: true, pricingCategory: "service", pricingType: "regular" });
    expect(byWamid.get(bsuid1!)).toMatchObject({ market: "unknown", metaAmount: null, billable: true });
    expect(byWamid.get(uk2!)).toMatchObject({ market: "44", metaAmount: 0, billable: false, pricingType: "free_entry_point" });

    // Prometheus: billed messages by number and category, once each; parts per reply.
    const metaMessages = await h.metrics.metaMessages.get();
    const count = (billable: string) =>
      metaMessages.values.find((v) => v.labels.billable === billable && v.labels.category === "service" && v.labels.phone_number_id === PHONE_NUMBER_ID)?.value;
    expect(count("true")).toBe(4);
    expect(count("false")).toBe(1);
    const metaCost = (await h.metrics.metaCost.get()).values.find((v) => v.labels.phone_number_id === PHONE_NUMBER_ID)?.value;
    expect(metaCost).toBeCloseTo(0.0525, 10);
    const parts_ = (await h.metrics.replyParts.get()).values;
    expect(parts_.find((v) => v.metricName === "wa_reply_parts_count")?.value).toBe(4);
    expect(parts_.find((v) => v.metricName === "wa_reply_parts_sum")?.value).toBe(5);
    const claudeCost = (await h.metrics.claudeCost.get()).values.reduce((n, v) => n + v.value, 0);
    expect(claudeCost).toBeCloseTo(claudeUsd(billed), 12);
  });

  it("the other copy of a part sent again (law 5's window) is billed by Meta too: priced from its own statuses, counted once", async () => {
    const from = "447700900999";
    await h.deliver(textWebhook({ from, text: "Is the shop open late on Fridays?" }).body);
    const [first] = await sentParts({ waId: from }, 1);
    const part = await h.db.outboundMessage.findUniqueOrThrow({ where: { wamid: first! } });
    await status(first!, "sent", { recipient_id: from }, regular);
    const today = utcDay(new Date());
    const before = (await costs(`?from=${today}&to=${today}`)).json().total;

    // Meta took the part twice (the first send's answer was lost, so it was sent again): the
    // other copy's statuses carry our part id back, under a wamid of their own.
    const copy = uniqueWamid();
    const copyStatus = async (name: "sent" | "delivered") => {
      const at = String(Math.floor(Date.now() / 1000));
      const change = statusChange([{ id: copy, status: name, timestamp: at, recipient_id: from, biz_opaque_callback_data: part.id, pricing: regular }]);
      expect((await h.deliver(metaWire(envelope([change])))).statusCode).toBe(200);
      await eventually(async () => (await h.queues.status.getJob(statusJobId(copy, name)))?.finishedOn, `the copy's ${name} status`, WAIT);
    };
    await copyStatus("sent");
    await copyStatus("delivered");

    const after = (await costs(`?from=${today}&to=${today}`)).json().total;
    expect(after.parts).toBe(before.parts + 1);
    expect(after.messages.billable.service).toBe(before.messages.billable.service + 1);
    expect(after.amounts.meta).toBeCloseTo(before.amounts.meta + 0.0125, 10);
    expect(await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).toMatchObject({ wamid: first });
  });

  it("defaults to the seven UTC days ending today", async () => {
    const res = await costs("");
    expect(res.statusCode).toBe(200);
    const today = utcDay(new Date());
    expect(res.json()).toMatchObject({ to: today, from: utcDay(new Date(Date.now() - 6 * 86_400_000)) });
  });

  it("answers 400 naming the problem for a bad from or to", async () => {
    const refusals: [string, string][] = [
      ["?from=2026-13-01", "bad range: from must be a day as YYYY-MM-DD (UTC)"],
      ["?to=yesterday", "bad range: to must be a day as YYYY-MM-DD (UTC)"],
      ["?from=2026-12-02&to=2026-12-01", "bad range: from (2026-12-02) is after to (2026-12-01)"],
      ["?from=2024-01-01&to=2026-12-01", "bad range: at most 366 days at once"],
      ["?since=2026-12-01", "bad range: unknown parameter: since; use from, to, phoneNumberId"],
    ];
    for (const [query, error] of refusals) {
      const res = await costs(query);
      expect(res.statusCode, query).toBe(400);
      expect(res.json(), query).toEqual({ error });
    }
  });

  it("is for staff only", async () => {
    const res = await h.app.inject({ method: "GET", url: "/admin/costs" });
    expect(res.statusCode).toBe(401);
  });
});
