import { randomUUID } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { DISPLAY_NUMBER, envelope, metaWire, PHONE_NUMBER_ID, statusChange, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 33.1: every conversation, for the business that reads them. Four customers written to
 * through the real webhook and workers, each step awaited, so their order is known: Olivia (a
 * UK phone; the bot's answer names a flamingo), María (a username, no phone), Carl (his reply
 * dead-lettered: the window had closed), and Dana (handed to a person afterwards).
 */

const WAIT = 20_000;
const MODEL = "claude-haiku-5-5";
const PRICES = { [MODEL]: { input: 1, output: 5, cacheWrite5m: 1.25, cacheWrite1h: 2, cacheRead: 0.1 } };
const RATES = { service: { "44": 0.0125, "1": 0.02 } };
const BSUID = "US.13491208655302741918";

let h: Harness;
const bearer = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const get = (url: string, headers: Record<string, string> = bearer) => h.app.inject({ method: "GET", url, headers });
const list = async (query = "") => {
  const response = await get(`/admin/conversations${query}`);
  expect(response.statusCode, response.body).toBe(200);
  return response.json() as { items: { id: string; contact: { label: string } }[]; nextCursor: string | null };
};
const ids = async (query = "") => (await list(query)).items.map((item) => item.id);

const who: Record<"olivia" | "maria" | "carl" | "dana", string> = { olivia: "", maria: "", carl: "", dana: "" };
let oliviaPart = "";

/** A customer known by a BSUID and @username alone (WHATSAPP.md §9). */
const usernameWebhook = (text: string) =>
  metaWire(
    envelope([
      {
        field: "messages",
        value: {
          messaging_product: "whatsapp",
          metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: PHONE_NUMBER_ID },
          contacts: [{ profile: { name: "María G.", username: "@maria.g" }, user_id: BSUID }],
          messages: [{ from_user_id: BSUID, id: uniqueWamid(), timestamp: String(Math.floor(Date.now() / 1000)), type: "text", text: { body: text } }],
        },
      },
    ]),
  );

const conversationOf = async (contact: { waId: string } | { userId: string }) =>
  (await eventually(() => h.db.conversation.findFirst({ where: { contact } }), "the conversation", WAIT)).id;
const answered = (contact: { waId: string } | { userId: string }) =>
  eventually(() => h.db.reply.findFirst({ where: { state: "sent", conversation: { contact } }, include: { parts: true } }), "a sent reply", WAIT);

beforeAll(async () => {
  const dir = mkdtempSync(join(tmpdir(), "conversations-"));
  writeFileSync(join(dir, "prices.json"), JSON.stringify(PRICES));
  writeFileSync(join(dir, "rates.json"), JSON.stringify(RATES));
  h = await startHarness({ env: { ANTHROPIC_MODEL: MODEL, MODEL_PRICES_FILE: join(dir, "prices.json"), META_RATES_FILE: join(dir, "rates.json") } });

  h.claude.reply = () => "The flamingo desk will call you about the parcel.";
  await h.deliver(textWebhook({ text: "Where is my parcel from the zebra warehouse?", from: "447700900123", name: "Olivia Quinn" }).body);
  const reply = await answered({ waId: "447700900123" });
  oliviaPart = reply.parts[0]!.wamid!;
  // Meta prices the part in its status webhook: the conversation's cost on Meta's side.
  const pricing = { pricing_model: "PMP", type: "regular", category: "service", billable: true };
  await h.deliver(
    metaWire(
      envelope([statusChange([{ id: oliviaPart, status: "sent", timestamp: String(Math.floor(Date.now() / 1000)), recipient_id: "447700900123", pricing }])]),
    ),
  );
  await eventually(() => h.db.outboundMessage.findFirst({ where: { wamid: oliviaPart, metaAmount: { not: null } } }), "the part priced", WAIT);
  who.olivia = await conversationOf({ waId: "447700900123" });

  h.claude.reply = () => "Claro, enviamos a todo el país.";
  await h.deliver(usernameWebhook("hola, ¿tienen envío?"));
  await answered({ userId: BSUID });
  who.maria = await conversationOf({ userId: BSUID });

  h.claude.reply = () => "Your order left today.";
  h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message", "Message failed to send because more than 24 hours have passed") });
  await h.deliver(textWebhook({ text: "is my order shipped?", from: "16505550177", name: "Carl Hansen" }).body);
  await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: "16505550177" } } } }), "Carl's dead letter", WAIT);
  who.carl = await conversationOf({ waId: "16505550177" });

  await h.deliver(textWebhook({ text: "good morning", from: "16505550188", name: "Dana Ross" }).body);
  await answered({ waId: "16505550188" });
  who.dana = await conversationOf({ waId: "16505550188" });
  const paused = await h.app.inject({ method: "POST", url: `/admin/conversations/${who.dana}/pause`, headers: bearer, payload: {} });
  expect(paused.statusCode).toBe(200);
}, 60_000);
afterAll(async () => h?.close());

describe("GET /admin/conversations", () => {
  it("lists every conversation, newest activity first, with its customer, last message, counts and handoff", async () => {
    const { items, nextCursor } = await list();
    expect(items.map((item) => item.id)).toEqual([who.dana, who.carl, who.maria, who.olivia]);
    expect(nextCursor).toBeNull();
    const [dana, carl, maria, olivia] = items;
    expect(olivia).toEqual({
      id: who.olivia,
      phoneNumberId: PHONE_NUMBER_ID,
      contact: { waId: "447700900123", userId: null, username: null, name: "Olivia Quinn", label: "+447700900123" },
      lastMessageAt: expect.any(String),
      lastMessage: { direction: "out", text: "The flamingo desk will call you about the parcel." },
      messageCount: 2,
      handedOff: false,
      openItems: 0,
      rating: null,
    });
    expect(maria).toMatchObject({ contact: { waId: null, userId: BSUID, username: "@maria.g", name: "María G." } });
    // Carl's reply never went out: his own message is the last one, and his item is open.
    expect(carl).toMatchObject({ lastMessage: { direction: "in", text: "is my order shipped?" }, messageCount: 2, openItems: 1, handedOff: false });
    expect(dana).toMatchObject({ handedOff: true, openItems: 0 });
  });

  it("pages with the cursor, with no conversation twice and none left out", async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const page = await list(`?limit=1${cursor ? `&cursor=${cursor}` : ""}`);
      expect(page.items.length).toBeLessThanOrEqual(1);
      seen.push(...page.items.map((item) => item.id));
      cursor = page.nextCursor;
      pages++;
    } while (cursor && pages < 10);
    expect(seen).toEqual([who.dana, who.carl, who.maria, who.olivia]);
    expect(await ids("?limit=3")).toEqual([who.dana, who.carl, who.maria]);
    const second = await list(`?limit=3&cursor=${(await list("?limit=3")).nextCursor}`);
    expect(second).toMatchObject({ items: [{ id: who.olivia }], nextCursor: null });
  });

  it("q finds the customer by any part of their name, phone, @username or BSUID", async () => {
    expect(await ids("?q=livia%20qu")).toEqual([who.olivia]);
    expect(await ids(`?q=${encodeURIComponent("+44 7700-900")}`)).toEqual([who.olivia]);
    expect(await ids(`?q=${encodeURIComponent("@maria.g")}`)).toEqual([who.maria]);
    expect(await ids("?q=13491208655")).toEqual([who.maria]);
    expect(await ids("?q=nobody-like-this")).toEqual([]);
    // LIKE's wildcards are taken as written.
    expect(await ids("?q=%25")).toEqual([]);
  });

  it("q finds words either side wrote: one only the bot wrote, one only the customer wrote", async () => {
    expect(await ids("?q=flamingo")).toEqual([who.olivia]);
    expect(await ids("?q=zebra")).toEqual([who.olivia]);
    expect(await ids("?q=shipped")).toEqual([who.carl]);
    expect(await ids("?q=Morning")).toEqual([who.dana]);
  });

  it("narrows by number, last activity's days, handoff, open items and rating", async () => {
    expect(await ids(`?phoneNumberId=${PHONE_NUMBER_ID}`)).toHaveLength(4);
    expect(await ids("?phoneNumberId=1234")).toEqual([]);
    const today = new Date().toISOString().slice(0, 10);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    expect(await ids(`?from=${today}&to=${today}`)).toHaveLength(4);
    expect(await ids(`?to=${yesterday}`)).toEqual([]);
    expect(await ids(`?from=${tomorrow}`)).toEqual([]);
    expect(await ids("?handedOff=true")).toEqual([who.dana]);
    expect(await ids("?deadLettered=true")).toEqual([who.carl]);
    expect(await ids("?deadLettered=true&q=zebra")).toEqual([]);
    // Nobody was asked here (CSAT_AFTER_SECONDS unset): no conversation is rated. test/csat.test.ts rates one.
    expect(await ids("?rating=good")).toEqual([]);
  });

  it("answers a bad parameter with a 400 that names it", async () => {
    for (const [query, named] of [
      ["?limit=0", "limit"],
      ["?limit=201", "limit"],
      ["?cursor=not-a-cursor", "cursor"],
      ["?from=2026-13-01", "from"],
      ["?from=2026-12-05&to=2026-12-01", "from"],
      ["?handedOff=yes", "handedOff"],
      ["?rating=great", "rating"],
      ["?phoneNumberId=abc", "phoneNumberId"],
      ["?colour=red", "colour"],
    ] as const) {
      const response = await get(`/admin/conversations${query}`);
      expect(response.statusCode, query).toBe(400);
      expect(response.json().error, query).toContain(named);
    }
    expect((await list("?limit=200")).items).toHaveLength(4);
  });

  it("is for staff only: 401 without a session or the token", async () => {
    expect((await get("/admin/conversations", {})).statusCode).toBe(401);
    expect((await get(`/admin/conversations/${who.olivia}`, {})).statusCode).toBe(401);
    expect((await get("/admin/conversations", { authorization: "Bearer wrong" })).statusCode).toBe(401);
  });
});

describe("GET /admin/conversations/:id", () => {
  const detail = async (id: string, query = "") => {
    const response = await get(`/admin/conversations/${id}${query}`);
    expect(response.statusCode, response.body).toBe(200);
    return response.json();
  };

  it("shows the whole conversation with the same timeline and replies as the dead letter's page", async () => {
    const conversation = await detail(who.carl);
    const letter = await h.db.deadLetter.findFirstOrThrow({ where: { conversationId: who.carl } });
    const item = (await get(`/admin/dlq/${letter.id}`)).json();
    expect(conversation.timeline).toEqual(item.timeline);
    expect(conversation.replies).toEqual(item.replies);
    expect(conversation).toMatchObject({
      id: who.carl,
      phoneNumberId: PHONE_NUMBER_ID,
      contact: item.conversation.contact,
      windowOpen: true,
      pausedUntil: null,
      pausedBy: null,
      olderCursor: null,
      items: [{ id: letter.id, state: "open", source: "graph", reason: letter.reason, createdAt: letter.createdAt.toISOString() }],
      ratings: [],
    });
  });

  it("says who holds a handed-off conversation", async () => {
    expect(await detail(who.dana)).toMatchObject({ pausedBy: "api", windowOpen: true });
  });

  it("counts what it cost: Claude's calls from the ledger and what Meta billed", async () => {
    const conversation = await detail(who.olivia);
    const calls = await h.db.claudeCall.findMany({ where: { reply: { conversationId: who.olivia } } });
    expect(calls.length).toBeGreaterThan(0);
    const sum = (pick: (call: (typeof calls)[number]) => number | null) => calls.reduce((total, call) => total + (pick(call) ?? 0), 0);
    expect(conversation.cost.tokens).toEqual({
      input: sum((c) => c.inputTokens),
      output: sum((c) => c.outputTokens),
      cacheRead: sum((c) => c.cacheReadTokens),
      cacheWrite: sum((c) => c.cacheCreationTokens),
    });
    expect(conversation.cost.claudeUsd).toBeCloseTo(
      sum((c) => c.costUsd),
      10,
    );
    expect(conversation.cost.claudeUsd).toBeGreaterThan(0);
    expect(conversation.cost.meta).toBeCloseTo(0.0125, 10);
    expect((await detail(who.maria)).cost.meta).toBe(0);
  });

  it("pages a long timeline newest first, with a cursor for the older entries", async () => {
    const whole = await detail(who.olivia);
    expect(whole.timeline.map((t: { direction: string }) => t.direction)).toEqual(["in", "out"]);
    const newest = await detail(who.olivia, "?limit=1");
    expect(newest.timeline).toEqual([whole.timeline[1]]);
    expect(newest.replies.map((r: { id: string }) => r.id)).toEqual([whole.timeline[1].replyId]);
    expect(newest.olderCursor).toEqual(expect.any(String));
    const older = await detail(who.olivia, `?limit=1&before=${newest.olderCursor}`);
    expect(older.timeline).toEqual([whole.timeline[0]]);
    expect(older.olderCursor).toBeNull();
  });

  it("is a 404 for an unknown id and a 400 for a malformed one or a bad cursor", async () => {
    expect((await get(`/admin/conversations/${randomUUID()}`)).statusCode).toBe(404);
    const malformed = await get("/admin/conversations/not-an-id");
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().error).toContain("id");
    const cursor = await get(`/admin/conversations/${who.olivia}?before=nope`);
    expect(cursor.statusCode).toBe(400);
    expect(cursor.json().error).toContain("before");
    expect((await get(`/admin/conversations/${who.olivia}?limit=501`)).statusCode).toBe(400);
  });

  it("pausing and resuming the conversation still work beside it", async () => {
    const paused = await h.app.inject({ method: "POST", url: `/admin/conversations/${who.maria}/pause`, headers: bearer, payload: { minutes: 5 } });
    expect(paused.statusCode).toBe(200);
    expect((await detail(who.maria)).pausedUntil).toEqual(expect.any(String));
    expect((await h.app.inject({ method: "POST", url: `/admin/conversations/${who.maria}/resume`, headers: bearer })).statusCode).toBe(200);
    expect((await detail(who.maria)).pausedUntil).toBeNull();
  });
});
