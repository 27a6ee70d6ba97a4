import { randomUUID } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DemoShop, shopToolsFile } from "../sim/business/shop.ts";
import { utcDay } from "../src/costs/ledger.ts";
import { REASON_KINDS } from "../src/dlq/explain.ts";
import { reasonKind } from "../src/dlq/reasons.ts";
import { statusJobId } from "../src/queue/catalog.ts";
import type { AnswerBlock } from "./support/fake-anthropic.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { echoChange, envelope, messagesChange, metaWire, PHONE_NUMBER_ID, statusWebhook, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 33: GET /admin/insights says whether the bot helps. Conversations with known outcomes go
 * through the real webhook and workers (resolved by the bot, handed off by the keyword, by
 * handoff_to_human and by a refusal, a reply Meta refuses, tools that fail or never answer for
 * sure, a person's replies from the staff page and the Business app), and every figure of the
 * answer is compared with a hand count of them.
 */

const WAIT = 30_000;
const HANDOFF_REPLY = "A person will answer you here.";
const CLAUDE_REASON = "The customer wants a refund for worn shoes, which the policy does not cover.";
const RATES = { service: { "*": 0.01 } };

let root: string;
let shop: DemoShop;
let h: Harness;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "insights-"));
  shop = await new DemoShop().start();
  await mkdir(join(root, "knowledge"));
  for (const name of ["hours.md", "returns.md", "delivery.md"]) await writeFile(join(root, "knowledge", name), `# ${name}\n\nWhat the shop says about it.`);
  await writeFile(join(root, "tools.json"), JSON.stringify(shopToolsFile(shop.url, { timeoutMs: 1000 })));
  await writeFile(join(root, "numbers.json"), JSON.stringify({ [PHONE_NUMBER_ID]: { knowledgeDir: "knowledge", toolsFile: "tools.json" } }));
  await writeFile(join(root, "rates.json"), JSON.stringify(RATES));
  h = await startHarness({
    env: {
      REPLY_DEBOUNCE_MS: "0",
      PHONE_NUMBERS_FILE: join(root, "numbers.json"),
      META_RATES_FILE: join(root, "rates.json"),
      HANDOFF_REPLY,
      TOOL_MAX_MS: "2000",
    },
  });
});
afterAll(async () => {
  await h?.close();
  await shop?.stop();
  await rm(root, { recursive: true, force: true });
});

const bearer = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const get = (url: string, headers: Record<string, string> = bearer) => h.app.inject({ method: "GET", url, headers });
const toolUse = (id: string, name: string, input: unknown): AnswerBlock => ({ type: "tool_use", id, name, input });

let customers = 0;
const newCustomer = () => `1555010${String(++customers).padStart(4, "0")}`;

/** The customer writes; resolves once the conversation has settled (its reply sent or dead, nothing left to do). */
async function say(from: string, text: string): Promise<void> {
  const { body, wamids } = textWebhook({ text, from });
  expect((await h.deliver(body)).statusCode).toBe(200);
  await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), `"${text}" to be stored`, WAIT);
  await eventually(
    async () => (await h.db.inboundMessage.count({ where: { conversation: { contact: { waId: from } }, replyId: null, skipReason: null } })) === 0,
    `"${text}" to be answered`,
    WAIT,
  );
  await untilQuiet(h, { also: [shop] });
}

/** The wamid of the latest part Meta took for this customer. */
async function lastPartOf(from: string): Promise<string> {
  const part = await h.db.outboundMessage.findFirst({
    where: { wamid: { not: null }, reply: { conversation: { contact: { waId: from } } } },
    orderBy: { acceptedAt: "desc" },
  });
  return part!.wamid!;
}

/** A status webhook for one of our messages, and its job run to the end. */
async function status(
  wamid: string,
  name: "delivered" | "read",
  to: string,
  pricing?: { pricing_model: string; type: string; category: string },
): Promise<void> {
  expect((await h.deliver(statusWebhook({ id: wamid, status: name, recipient_id: to, ...(pricing ? { pricing } : {}) }))).statusCode).toBe(200);
  await eventually(async () => (await h.queues.status.getJob(statusJobId(wamid, name)))?.finishedOn, `the ${name} status of ${wamid}`, WAIT);
}

/** Nearest rank, as the route reports it: the smallest value with at least `p` of them at or below it. */
const percentile = (sorted: number[], p: number) => sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)] ?? null;

describe("GET /admin/insights", () => {
  it("matches a hand count of conversations with known outcomes, every day of the range (empty days at 0) and in total", async () => {
    // A: Claude answers from the knowledge, citing hours.md; delivered (priced) and read. Then a reaction, which is no message.
    const resolved = newCustomer();
    h.claude.answer({
      content: [
        {
          type: "text",
          text: "We are closed on Sundays.",
          citations: [{ type: "char_location", cited_text: "closed", document_index: 1, document_title: "hours.md", start_char_index: 0, end_char_index: 6 }],
        },
      ],
    });
    await say(resolved, "are you open on sunday?");
    const resolvedPart = await lastPartOf(resolved);
    await status(resolvedPart, "delivered", resolved, { pricing_model: "PMP", type: "regular", category: "service" });
    await status(resolvedPart, "read", resolved);
    const reaction = {
      from: resolved,
      id: uniqueWamid(),
      timestamp: String(Math.floor(Date.now() / 1000)),
      type: "reaction",
      reaction: { message_id: resolvedPart, emoji: "👍" },
    };
    expect((await h.deliver(metaWire(envelope([messagesChange([reaction as never])])))).statusCode).toBe(200);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: reaction.id } }), "the reaction to be stored", WAIT);

    // B: asks for a person by the keyword (the configured answer says one will come); a person answers from the staff page.
    const keyword = newCustomer();
    await say(keyword, "human");
    const item = await eventually(
      () => h.db.deadLetter.findFirst({ where: { source: "handoff", conversation: { contact: { waId: keyword } } } }),
      "the keyword's item",
    );
    const answered = await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${item.id}/answer`,
      headers: { ...bearer, "idempotency-key": randomUUID() },
      payload: { text: "Hi, this is Sam from the shop." },
    });
    expect(answered.statusCode, answered.body).toBe(202);
    await eventually(() => h.db.reply.findFirst({ where: { kind: "staff", state: "sent" } }), "the person's reply to be sent", WAIT);

    // C: Claude hands the customer to a person with its reason; G: Claude refuses, which hands off too.
    const handedOff = newCustomer();
    h.claude.answer({ content: [toolUse("toolu_01hand", "handoff_to_human", { reason: CLAUDE_REASON })] });
    await say(handedOff, "I wore them twice, can I still get my money back?");
    const refused = newCustomer();
    h.claude.answer({ content: [], stopReason: "refusal" });
    await say(refused, "something Claude will not answer");

    // D: Meta refuses the reply for good: dead-lettered.
    const failed = newCustomer();
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
    await say(failed, "hello?");

    // E: the tools: an order looked up, an input the schema refuses (failed), a booking never confirmed (unknown: a person checks).
    const tools = newCustomer();
    shop.fault = (request) => (request.path === "/bookings" ? { hang: true } : undefined);
    h.claude.answer(
      {
        content: [
          toolUse("toolu_01order", "lookup_order", { orderId: "A1001" }),
          toolUse("toolu_01schema", "lookup_order", { orderId: "not an id!" }),
          toolUse("toolu_01booking", "book_fitting", { name: "Ana", date: "2026-12-12", time: "10:00", people: 2 }),
        ],
      },
      { text: "Your order has shipped; a colleague will confirm the fitting." },
    );
    await say(tools, "where is A1001, and book me a fitting on 12 December at 10 for two");
    shop.fault = () => undefined;
    await status(await lastPartOf(tools), "delivered", tools);

    // F: answered by the bot, then a person writes from the WhatsApp Business app (an echo).
    const echoed = newCustomer();
    await say(echoed, "do you deliver to Spain?");
    expect((await h.deliver(metaWire(envelope([echoChange({ to: echoed, text: "Yes, in 5 days. Sam" })])))).statusCode).toBe(200);
    await eventually(() => h.db.reply.findFirst({ where: { kind: "human" } }), "the echo to be stored", WAIT);
    await untilQuiet(h, { also: [shop] });

    // The hand count. Seven conversations wrote one message each (the reaction is none).
    const today = utcDay(new Date());
    const dayMs = 86_400_000;
    const from = utcDay(new Date(Date.parse(today) - 2 * dayMs));
    const to = utcDay(new Date(Date.parse(today) + dayMs));
    // First-reply times from the stored timestamps: every reply that answers messages and that Meta took.
    const replies = await h.db.reply.findMany({
      where: { messages: { some: {} }, parts: { some: { wamid: { not: null } } } },
      include: { messages: true, parts: true },
    });
    const waits = replies
      .map((r) => {
        const accepted = Math.min(...r.parts.filter((p) => p.wamid).map((p) => p.acceptedAt!.getTime()));
        return accepted - Math.min(...r.messages.map((m) => m.createdAt.getTime()));
      })
      .sort((a, b) => a - b);
    expect(waits).toHaveLength(6); // all but D's
    const costs = (await get(`/admin/costs?from=${from}&to=${to}`)).json();
    const expected = {
      conversations: 7,
      inbound: 7,
      answeredByBot: 6, // A, B (the keyword's configured answer), C and G (the handoff reply), E, F
      handedOff: 3, // B, C, G
      deadLettered: 2, // D (Meta refused), E (a business action nobody confirmed)
      resolvedByBot: 1, // A: F had a person's message
      automationRate: 1 / 7,
      firstReplyMs: { p50: percentile(waits, 0.5), p95: percentile(waits, 0.95) },
      delivered: 2, // A's and E's: the statuses Meta sent
      read: 1,
      csat: { asked: 0, answered: 0, good: 0, okay: 0, bad: 0 },
      claudeUsd: costs.total.amounts.claudeUsd,
      meta: 0.01,
    };
    expect(costs.total.amounts.claudeUsd).toBeGreaterThan(0);

    const res = await get(`/admin/insights?from=${from}&to=${to}`);
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    const nothing = { ...expected, conversations: 0, inbound: 0, answeredByBot: 0, handedOff: 0, deadLettered: 0, resolvedByBot: 0 };
    Object.assign(nothing, { automationRate: null, firstReplyMs: { p50: null, p95: null }, delivered: 0, read: 0, claudeUsd: 0, meta: 0 });
    expect(body).toEqual({
      from,
      to,
      rateCard: true,
      days: [
        { day: from, ...nothing },
        { day: utcDay(new Date(Date.parse(today) - dayMs)), ...nothing },
        { day: today, ...expected },
        { day: to, ...nothing },
      ],
      total: expected,
      handoffReasons: expect.any(Array),
      deadLetterReasons: expect.any(Array),
      knowledge: [
        { phoneNumberId: PHONE_NUMBER_ID, source: "hours.md", citations: 1 },
        { phoneNumberId: PHONE_NUMBER_ID, source: "delivery.md", citations: 0 },
        { phoneNumberId: PHONE_NUMBER_ID, source: "returns.md", citations: 0 },
      ],
      tools: [
        { name: "lookup_order", calls: 2, failed: 1, unknown: 0 },
        { name: "book_fitting", calls: 1, failed: 0, unknown: 1 },
        { name: "handoff_to_human", calls: 1, failed: 0, unknown: 0 },
      ],
    });
    const byReason = (a: { reason: string }, b: { reason: string }) => (a.reason < b.reason ? -1 : 1);
    expect([...body.handoffReasons].sort(byReason)).toEqual(
      [
        { reason: "keyword", count: 1 },
        { reason: "refusal", count: 1 },
        { reason: CLAUDE_REASON, count: 1 },
      ].sort(byReason),
    );
    const refusedKind = reasonKind("graph", "131047");
    const byKind = (a: { kind: string }, b: { kind: string }) => (a.kind < b.kind ? -1 : 1);
    expect([...body.deadLetterReasons].sort(byKind)).toEqual(
      [
        { kind: refusedKind, label: REASON_KINDS[refusedKind], count: 1 },
        { kind: "tool_unknown", label: REASON_KINDS.tool_unknown, count: 1 },
      ].sort(byKind),
    );
    // The cost ledger's own figures, the day's as the total's.
    expect(costs.days.map((d: { day: string }) => d.day)).toEqual([today]);

    // Another number's insights: nothing of this one's.
    const other = (await get(`/admin/insights?from=${from}&to=${to}&phoneNumberId=999`)).json();
    expect(other.total).toEqual({ ...nothing });
    expect([other.handoffReasons, other.deadLetterReasons, other.knowledge, other.tools]).toEqual([[], [], [], []]);
  });

  it("defaults to the last seven days, ending today", async () => {
    const body = (await get("/admin/insights")).json();
    const today = utcDay(new Date());
    expect(body.to).toBe(today);
    expect(body.days).toHaveLength(7);
    expect(body.days[0].day).toBe(utcDay(new Date(Date.parse(today) - 6 * 86_400_000)));
  });

  it("a bad range is a 400 that says which, in the words of GET /admin/costs", async () => {
    for (const query of ["from=2026-12-02&to=2026-12-01", "from=soon", "from=2025-01-01&to=2026-01-02", "phoneNumberId=abc", "days=3"]) {
      const insights = await get(`/admin/insights?${query}`);
      expect(insights.statusCode, query).toBe(400);
      expect(insights.json(), query).toEqual((await get(`/admin/costs?${query}`)).json());
    }
    expect((await get("/admin/insights?from=2026-12-02&to=2026-12-01")).json()).toEqual({ error: "bad range: from (2026-12-02) is after to (2026-12-01)" });
    expect((await get("/admin/insights?from=2025-01-01&to=2026-01-02")).json()).toEqual({ error: "bad range: at most 366 days at once" });
  });

  it("is for staff only: without the bearer or a session it is 401", async () => {
    expect((await get("/admin/insights", {})).statusCode).toBe(401);
    expect((await get("/admin/insights", { authorization: "Bearer wrong" })).statusCode).toBe(401);
  });
});
