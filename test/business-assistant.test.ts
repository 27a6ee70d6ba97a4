import { spawn } from "node:child_process";
import { lookup } from "node:dns/promises";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { DemoShop, shopToolsFile } from "../sim/business/shop.ts";
import { isPublicAddress } from "../src/tools/addresses.ts";
import { idempotencyKeyFor } from "../src/tools/idempotency.ts";
import { MAIN_JS } from "./support/build.ts";
import type { AnswerBlock, ClaudeRequest } from "./support/fake-anthropic.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { expectLedgerToMatchBilled } from "./support/ledger.ts";
import { untilQuiet } from "./support/quiet.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 19: an assistant that answers from the business's own knowledge, with citations staff
 * can check, acts through the business's tools exactly once, and hands the customer to a
 * person when it cannot help. Real Postgres, Redis and workers; Claude and the business's
 * endpoints are local HTTP servers our real clients call.
 */

const HOURS = `# Opening hours

The shop in Porto is open Monday to Saturday, 9:00 to 19:00. On Sundays and public holidays we are closed.
${"We repair shoes while you wait on weekdays before noon. ".repeat(30)}`;
const RETURNS = `# Returns

You can return unworn shoes within 30 days of delivery for a full refund. Worn shoes cannot be returned.
Send them back with the return label in the box; the refund reaches your card within 5 business days.`;
const DELIVERY = `# Delivery

We deliver in Portugal within 2 business days and to the rest of the EU within 5. Delivery is free above 80 euros.`;

let root: string;
let shop: DemoShop;
let h: Harness | undefined;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "wa-assistant-"));
  shop = await new DemoShop().start();
});
afterAll(async () => {
  await shop.stop();
  await rm(root, { recursive: true, force: true });
});
afterEach(async () => {
  await h?.close();
  h = undefined;
  shop.requests.length = 0;
  shop.bookings.length = 0;
  shop.fault = () => undefined;
});

let layouts = 0;
/** A PHONE_NUMBERS_FILE giving the tests' number knowledge files and the shop's tools; its path. */
async function businessFiles(options: { tools?: { tools: unknown[] }; knowledge?: Record<string, string> } = {}): Promise<string> {
  const dir = join(root, `layout-${++layouts}`);
  await mkdir(join(dir, "shop", "knowledge"), { recursive: true });
  for (const [name, text] of Object.entries(options.knowledge ?? { "hours.md": HOURS, "returns.md": RETURNS, "delivery.md": DELIVERY }))
    await writeFile(join(dir, "shop", "knowledge", name), text);
  await writeFile(join(dir, "shop", "tools.json"), JSON.stringify(options.tools ?? shopToolsFile(shop.url, { timeoutMs: 1000 })));
  const numbers = { [PHONE_NUMBER_ID]: { knowledgeDir: "shop/knowledge", toolsFile: "shop/tools.json" } };
  await writeFile(join(dir, "numbers.json"), JSON.stringify(numbers));
  return join(dir, "numbers.json");
}

async function assistant(env: Record<string, string> = {}, files?: Parameters<typeof businessFiles>[0], workers = 1): Promise<Harness> {
  h = await startHarness({ workers, env: { REPLY_DEBOUNCE_MS: "0", PHONE_NUMBERS_FILE: await businessFiles(files), ...env } });
  return h;
}

const say = (text: string) => h!.deliver(textWebhook({ text }).body);
const sent = (n: number, what = `${n} message(s) sent`) => eventually(() => h!.graph.sends.length >= n, what, 20_000);
const replySent = () => eventually(async () => (await h!.db.reply.count({ where: { state: "sent" } })) >= 1, "the reply to be sent", 30_000);

interface Block {
  type: string;
  text?: string;
  title?: string;
  source?: unknown;
  citations?: unknown;
  cache_control?: unknown;
  content?: unknown;
  tool_use_id?: string;
  is_error?: boolean;
}
const blocks = (content: unknown): Block[] => (Array.isArray(content) ? (content as Block[]) : [{ type: "text", text: String(content) }]);
const lastUser = (request: ClaudeRequest) => blocks(request.messages.findLast((m) => m.role === "user")?.content);
const toolResults = (request: ClaudeRequest) => lastUser(request).filter((b) => b.type === "tool_result");
const toolNames = (request: ClaudeRequest) => (request.tools as { name: string }[] | undefined)?.map((t) => t.name);
const toolUse = (id: string, name: string, input: unknown): AnswerBlock => ({ type: "tool_use", id, name, input });

async function adminGet(path: string) {
  const response = await h!.app.inject({ method: "GET", url: path, headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
  expect(response.statusCode, response.body).toBe(200);
  return response.json();
}

describe("knowledge: the business's files, cited", () => {
  it("Claude is shown the files as cited documents at the head of the first user turn, after the tools and the system prompt; the stable prefix is cached for an hour and read back", async () => {
    await assistant();
    await say("are you open on sunday?");
    await replySent();
    await say("and on monday?");
    await eventually(async () => (await h!.db.reply.count({ where: { state: "sent" } })) === 2, "the second reply", 30_000);

    const request = h!.claude.requests[0]!;
    expect(toolNames(request)).toEqual(["lookup_order", "book_fitting", "handoff_to_human"]);
    const first = blocks(request.messages[0]!.content);
    expect(first.slice(0, 3).map((b) => [b.type, b.title, b.citations])).toEqual([
      ["document", "delivery.md", { enabled: true }],
      ["document", "hours.md", { enabled: true }],
      ["document", "returns.md", { enabled: true }],
    ]);
    expect(first[0]!.source).toEqual({ type: "text", media_type: "text/plain", data: DELIVERY });
    expect(first[3]).toMatchObject({ type: "text", text: "are you open on sunday?" });
    // The breakpoint ends the stable prefix (tools, system, knowledge), for an hour; nothing before it.
    expect(first[2]!.cache_control).toEqual({ type: "ephemeral", ttl: "1h" });
    expect(JSON.stringify(request.system)).not.toContain("cache_control");

    const replies = await h!.db.reply.findMany({ orderBy: { createdAt: "asc" } });
    expect(replies[0]!.cacheCreation1hTokens).toBeGreaterThan(512); // past Haiku 5.5's minimum: written...
    expect(replies[1]!.cacheReadTokens).toBeGreaterThanOrEqual(replies[0]!.cacheCreation1hTokens!); // ...and read back
  });

  it("the reply's citations are stored with it and given to staff beside the reply; WhatsApp gets the plain text", async () => {
    await assistant();
    h!.claude.answer({
      content: [
        {
          type: "text",
          text: "You can return unworn shoes within 30 days.",
          citations: [
            {
              type: "char_location",
              cited_text: "You can return unworn shoes within 30 days of delivery for a full refund.",
              document_index: 2,
              document_title: "returns.md",
              start_char_index: 11,
              end_char_index: 86,
            },
          ],
        },
        { type: "text", text: " Send them back with the label in the box." },
      ],
    });
    await say("can I return my shoes?");
    await replySent();
    expect(h!.graph.sentTexts).toEqual(["You can return unworn shoes within 30 days. Send them back with the label in the box."]);
    const citation = {
      source: "returns.md",
      title: "returns.md",
      citedText: "You can return unworn shoes within 30 days of delivery for a full refund.",
      location: "characters 11–86",
    };
    expect((await h!.db.reply.findFirstOrThrow()).citations).toEqual([citation]);

    // Staff see it from any item of the conversation: here, the customer asking for a person.
    await say("human");
    await sent(2);
    const { items } = await adminGet("/admin/dlq");
    const detail = await adminGet(`/admin/dlq/${items[0].id}`);
    expect(detail.replies[0]).toEqual(expect.objectContaining({ text: expect.stringContaining("30 days"), citations: [citation], toolCalls: [] }));
    expect(detail.replies[1]).toEqual(expect.objectContaining({ text: expect.stringContaining("person"), citations: [] })); // the handoff's
  });

  it("knowledge beyond KNOWLEDGE_TOKEN_BUDGET goes as the passages that match the customer's words, search results Claude can cite", async () => {
    await assistant({ KNOWLEDGE_TOKEN_BUDGET: "50" });
    await say("how do I get a refund for my return?");
    await replySent();
    const request = h!.claude.requests[0]!;
    expect(blocks(request.messages[0]!.content).some((b) => b.type === "document")).toBe(false);
    const results = lastUser(request).filter((b) => b.type === "search_result");
    expect(results.length).toBeGreaterThan(0);
    expect(results[0]).toMatchObject({ source: "returns.md", citations: { enabled: true } });
    expect(JSON.stringify(results[0]!.content)).toContain("full refund");
    expect(lastUser(request).at(-1)).toMatchObject({ type: "text", text: "how do I get a refund for my return?" });
  });
});

describe("tools: the business's actions, exactly once", () => {
  it("a tool call is stored before it runs, reaches the business with an Idempotency-Key derived from the number and tool_use id, and its answer goes back to Claude", async () => {
    await assistant();
    h!.claude.answer(
      { content: [{ type: "text", text: "Let me look." }, toolUse("toolu_01order", "lookup_order", { orderId: "A1001" })] },
      { text: "Your order A1001 has shipped and arrives in 2 business days." },
    );
    await say("where is my order A1001?");
    await replySent();

    expect(shop.requests).toEqual([
      expect.objectContaining({ method: "GET", path: "/orders/A1001", idempotencyKey: idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01order") }),
    ]);
    expect(h!.claude.requests).toHaveLength(2);
    const second = h!.claude.requests[1]!;
    expect(second.messages.at(-2)).toMatchObject({
      role: "assistant",
      content: [
        { type: "text", text: "Let me look." },
        { type: "tool_use", id: "toolu_01order" },
      ],
    });
    expect(toolResults(second)).toEqual([expect.objectContaining({ tool_use_id: "toolu_01order", is_error: false })]);
    expect(JSON.stringify(toolResults(second)[0]!.content)).toContain("shipped");
    expect(h!.graph.sentTexts).toEqual(["Your order A1001 has shipped and arrives in 2 business days."]);

    const [call] = await h!.db.toolCall.findMany();
    expect(call).toMatchObject({ id: "toolu_01order", name: "lookup_order", state: "done", attempts: 1, status: 200, isError: false });
    expect(call!.request).toEqual({ method: "GET", url: `${shop.url}/orders/A1001` });
    expect(await h!.db.claudeStep.count()).toBe(1);
    const reply = await h!.db.reply.findFirstOrThrow();
    expect(reply.inputTokens).toBeGreaterThan(0);
    expect(reply.outputTokens).toBe(40); // both calls' tokens are the reply's cost
  });

  it("a proxy's 502 page is asked again with the same key, and the business's answer when it comes is what Claude reads", async () => {
    await assistant();
    let pages = 2;
    shop.fault = () => (pages-- > 0 ? { status: 502, body: "<html><body>502 Bad Gateway</body></html>" } : undefined);
    h!.claude.answer({ content: [toolUse("toolu_01look", "lookup_order", { orderId: "A1002" })] }, { text: "A1002 is being prepared." });
    await say("where is A1002?");
    await replySent();

    const key = idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01look");
    expect(shop.requests.map((r) => [r.path, r.idempotencyKey])).toEqual(Array(3).fill(["/orders/A1002", key]));
    const [result] = toolResults(h!.claude.requests[1]!);
    expect(result).toMatchObject({ tool_use_id: "toolu_01look", is_error: false });
    expect(JSON.stringify(result!.content)).toContain("processing");
    expect(await h!.db.toolCall.findUniqueOrThrow({ where: { id: "toolu_01look" } })).toMatchObject({ state: "done", attempts: 3, status: 200 });
  });

  it("a read still unanswered at TOOL_MAX_MS and an input that does not fit the schema go back to Claude as errors it can explain, not as items", async () => {
    await assistant({ TOOL_MAX_MS: "1500" });
    shop.fault = (request) => (request.path === "/orders/A1002" ? { status: 504, body: "Gateway Timeout" } : undefined);
    h!.claude.answer(
      { content: [toolUse("toolu_01bad", "lookup_order", { orderId: "A1002" }), toolUse("toolu_01schema", "lookup_order", { orderId: "not an id!" })] },
      { text: "Sorry, I could not reach our order system just now." },
    );
    await say("check A1002");
    await replySent();

    const results = toolResults(h!.claude.requests[1]!);
    expect(results.map((r) => [r.tool_use_id, r.is_error])).toEqual([
      ["toolu_01bad", true],
      ["toolu_01schema", true],
    ]);
    expect(JSON.stringify(results[0]!.content)).toContain("HTTP 504");
    expect(JSON.stringify(results[1]!.content)).toContain("Not sent");
    // Asked again with its key until the time ran out; the bad input never left.
    expect(shop.requests.length).toBeGreaterThan(1);
    expect(new Set(shop.requests.map((r) => `${r.path} ${r.idempotencyKey}`))).toEqual(
      new Set([`/orders/A1002 ${idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01bad")}`]),
    );
    const counted = await h!.metrics.registry.getSingleMetricAsString("wa_tool_calls_total");
    expect(counted).toContain(`wa_tool_calls_total{phone_number_id="${PHONE_NUMBER_ID}",tool="lookup_order",outcome="error"} 1`);
    expect(counted).toContain(`wa_tool_calls_total{phone_number_id="${PHONE_NUMBER_ID}",tool="lookup_order",outcome="no_answer"} ${shop.requests.length}`);
    expect(h!.graph.sentTexts).toEqual(["Sorry, I could not reach our order system just now."]);
    expect(await h!.db.deadLetter.count()).toBe(0);
  });

  it("the business acts and its answer is lost: the call is repeated with the same key, and Claude asking again for the same booking gets that answer, not a second booking", async () => {
    await assistant();
    const booking = { name: "Ana", date: "2026-12-12", time: "10:00", people: 2 };
    let lost = 1;
    shop.fault = (request) => (request.path === "/bookings" && lost-- > 0 ? { actThenHang: true } : undefined);
    h!.claude.answer(
      { content: [toolUse("toolu_01lost", "book_fitting", booking)] },
      // The model asks again under a new id, its input's keys in another order: the same action.
      { content: [toolUse("toolu_02lost", "book_fitting", { people: 2, time: "10:00", date: "2026-12-12", name: "Ana" })] },
      { text: "Booked: Saturday 12 December at 10:00 for two." },
    );
    await say("book a fitting for two on 12 December at 10");
    await replySent();

    const key = idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01lost");
    expect(shop.requests.map((r) => [r.path, r.idempotencyKey])).toEqual([
      ["/bookings", key],
      ["/bookings", key],
    ]);
    expect(shop.bookings).toHaveLength(1);
    const calls = await h!.db.toolCall.findMany({ orderBy: { requestedAt: "asc" } });
    expect(calls.map((c) => [c.id, c.state, c.idempotencyKey, c.attempts])).toEqual([
      ["toolu_01lost", "done", key, 2],
      ["toolu_02lost", "done", key, 0],
    ]);
    const [again] = toolResults(h!.claude.requests[2]!);
    expect(again).toMatchObject({ tool_use_id: "toolu_02lost", is_error: false });
    expect(JSON.stringify(again!.content)).toContain("B1001");
    expect(await h!.db.deadLetter.count()).toBe(0);
  });

  it("an action never answered for sure by TOOL_MAX_MS is left unknown: Claude is told not to try again, asking again sends nothing, and a person gets an item to check", async () => {
    await assistant({ TOOL_MAX_MS: "2000" });
    const booking = { name: "Ana", date: "2026-12-12", time: "10:00", people: 2 };
    shop.fault = (request) => (request.path === "/bookings" ? { hang: true } : undefined);
    h!.claude.answer(
      { content: [toolUse("toolu_01unsure", "book_fitting", booking)] },
      { content: [toolUse("toolu_02unsure", "book_fitting", booking)] },
      { text: "I could not confirm the booking; a colleague will check and write to you." },
    );
    await say("book a fitting for two on 12 December at 10");
    await replySent();

    const key = idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01unsure");
    expect(shop.requests.length).toBeGreaterThan(1);
    expect(new Set(shop.requests.map((r) => r.idempotencyKey))).toEqual(new Set([key]));
    const [told] = toolResults(h!.claude.requests[1]!);
    expect(told).toMatchObject({ tool_use_id: "toolu_01unsure", is_error: true });
    expect(JSON.stringify(told!.content)).toMatch(/Outcome unknown.*Do not call this tool again.*a person will check/);
    const requestsThen = shop.requests.length;
    expect(toolResults(h!.claude.requests[2]!)[0]!.content).toEqual(told!.content);
    expect(shop.requests).toHaveLength(requestsThen);

    expect(await h!.db.toolCall.findUniqueOrThrow({ where: { id: "toolu_01unsure" } })).toMatchObject({ state: "unknown", idempotencyKey: key });
    const items = await h!.db.deadLetter.findMany();
    expect(items).toEqual([expect.objectContaining({ state: "open", source: "tool", code: "tool_unknown", replyId: null })]);
    expect(items[0]!.reason).toContain("book_fitting");
    const item = await adminGet(`/admin/dlq/${items[0]!.id}`);
    expect(item.explanation).toMatchObject({ kind: "tool_unknown" });
    expect(item.replies.flatMap((r: { toolCalls: { state: string }[] }) => r.toolCalls.map((c) => c.state))).toEqual(["unknown", "unknown"]);
    const counted = await h!.metrics.registry.getSingleMetricAsString("wa_dead_letters_created_total");
    expect(counted).toContain('wa_dead_letters_created_total{reason="tool_unknown"} 1');
    expect(h!.graph.sentTexts).toEqual(["I could not confirm the booking; a colleague will check and write to you."]);
  });

  it("a regenerate starts afresh: a new tool loop with new keys, the business asked again for fresh data, and its own TOOL_MAX_MS", async () => {
    await assistant({ TOOL_MAX_MS: "1000" });
    h!.claude.answer({ content: [toolUse("toolu_01regen", "lookup_order", { orderId: "A1002" })] }, { status: 400 });
    await say("where is A1002?");
    const letter = await eventually(() => h!.db.deadLetter.findFirst({ where: { state: "open" } }), "the reply to be dead-lettered");
    await new Promise((resolve) => setTimeout(resolve, 1200)); // past the first loop's TOOL_MAX_MS
    h!.claude.answer({ content: [toolUse("toolu_02regen", "lookup_order", { orderId: "A1002" })] }, { text: "A1002 is being prepared." });
    const regenerated = await h!.app.inject({
      method: "POST",
      url: `/admin/dlq/${letter.id}/regenerate`,
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, "idempotency-key": "regen-1" },
      payload: {},
    });
    expect(regenerated.statusCode, regenerated.body).toBe(202);
    await replySent();

    expect(shop.requests.map((r) => r.idempotencyKey)).toEqual([
      idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01regen"),
      idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_02regen"),
    ]);
    const fresh = h!.claude.requests[2]! as ClaudeRequest & { tool_choice?: { type: string } };
    expect(fresh.tool_choice?.type ?? "auto").toBe("auto");
    expect(JSON.stringify(fresh.messages)).not.toContain("toolu_01regen");
    expect(toolResults(h!.claude.requests[3]!)).toEqual([expect.objectContaining({ tool_use_id: "toolu_02regen", is_error: false })]);
    const calls = await h!.db.toolCall.findMany({ orderBy: { requestedAt: "asc" } });
    expect(calls.map((c) => [c.id, c.round, c.state])).toEqual([
      ["toolu_01regen", 0, "done"],
      ["toolu_02regen", 1, "done"],
    ]);
    expect(h!.graph.sentTexts).toEqual(["A1002 is being prepared."]);
    // Both rounds' calls are in the ledger (the refused one as refused, not billed).
    await expectLedgerToMatchBilled(h!.db, h!.claude.usages);
    expect((await h!.db.claudeCall.findMany({ orderBy: { createdAt: "asc" } })).map((c) => [c.round, c.step, c.state])).toEqual([
      [0, 0, "answered"],
      [0, 1, "refused"],
      [1, 0, "answered"],
      [1, 1, "answered"],
    ]);
  });

  it("at most TOOL_MAX_STEPS tool calls: the ones past it are answered 'not run', and Claude is asked once more, without tools, for the customer's one answer", async () => {
    await assistant({ TOOL_MAX_STEPS: "2" });
    h!.claude.answer(
      { content: [toolUse("toolu_01a", "lookup_order", { orderId: "A1001" })] },
      { content: [toolUse("toolu_01b", "lookup_order", { orderId: "A1002" }), toolUse("toolu_01c", "lookup_order", { orderId: "A1003" })] },
      { text: "A1001 has shipped and A1002 is being prepared." },
    );
    await say("where are A1001, A1002 and A1003?");
    await replySent();
    expect(shop.requests.map((r) => r.path)).toEqual(["/orders/A1001", "/orders/A1002"]);
    expect(h!.claude.requests).toHaveLength(3);
    const last = h!.claude.requests[2]! as ClaudeRequest & { tool_choice?: unknown };
    expect(last.tool_choice).toEqual({ type: "none" });
    expect(toolResults(last).map((r) => [r.tool_use_id, r.is_error])).toEqual([
      ["toolu_01b", false],
      ["toolu_01c", true],
    ]);
    expect(JSON.stringify(toolResults(last)[1]!.content)).toContain("Not run");
    expect(h!.graph.sentTexts).toEqual(["A1001 has shipped and A1002 is being prepared."]);
  });

  it("a tool whose host resolves to this machine is refused at call time unless it allows the private network: nothing is sent, Claude is told", async () => {
    const host = hostname();
    const { address } = await lookup(host);
    expect(isPublicAddress(address), `${host} resolves to ${address}: this test needs a name for this machine`).toBe(false);
    const port = new URL(shop.url).port;
    await assistant({}, { tools: shopToolsFile(`http://${host}:${port}`, { allowPrivateNetwork: false }) });
    h!.claude.answer({ content: [toolUse("toolu_01ssrf", "lookup_order", { orderId: "A1001" })] }, { text: "I cannot check orders right now." });
    await say("where is A1001?");
    await replySent();
    expect(shop.requests).toEqual([]);
    const [result] = toolResults(h!.claude.requests[1]!);
    expect(result).toMatchObject({ tool_use_id: "toolu_01ssrf", is_error: true });
    expect(JSON.stringify(result!.content)).toMatch(/Not sent: .*non-public address/);
  });
});

describe("stop reasons", () => {
  it("max_tokens: the answer is sent up to its last full sentence, never cut mid-sentence", async () => {
    await assistant();
    h!.claude.answer({ content: [{ type: "text", text: "We open at 9. On Sundays we are clo" }], stopReason: "max_tokens" });
    await say("when do you open?");
    await replySent();
    expect(h!.graph.sentTexts).toEqual(["We open at 9."]);
  });

  it("model_context_window_exceeded: asked once more without the conversation's history", async () => {
    await assistant();
    await say("first question");
    await replySent();
    h!.claude.answer({ content: [], stopReason: "model_context_window_exceeded" }, { text: "Short answer." });
    await say("second question");
    await eventually(() => h!.graph.sentTexts.includes("Short answer."), "the second answer", 20_000);
    const [full, short] = h!.claude.requests.slice(1);
    expect(JSON.stringify(full!.messages)).toContain("first question");
    expect(JSON.stringify(short!.messages)).not.toContain("first question");
    expect(JSON.stringify(short!.messages)).toContain("second question");
    // The call that only said the prompt was too long was paid for too: it is in the ledger.
    await eventually(async () => (await h!.db.reply.count({ where: { state: "sent" } })) === 2, "the second reply recorded sent");
    await expectLedgerToMatchBilled(h!.db, h!.claude.usages);
    expect(await h!.db.claudeCall.count({ where: { state: "answered" } })).toBe(3);
  });

  it("pause_turn: the paused turn is stored and Claude continues it", async () => {
    await assistant();
    h!.claude.answer({ content: [{ type: "text", text: "Thinking about your order…" }], stopReason: "pause_turn" }, { text: "It has shipped." });
    await say("my order?");
    await replySent();
    expect(h!.claude.requests[1]!.messages.at(-1)).toMatchObject({ role: "assistant", content: [{ type: "text", text: "Thinking about your order…" }] });
    expect(h!.graph.sentTexts).toEqual(["It has shipped."]);
    expect(await h!.db.claudeStep.count()).toBe(1);
  });
});

describe("handoff that Claude can choose", () => {
  it("handoff_to_human: Claude is not asked again, the customer hears HANDOFF_REPLY once, the bot pauses and staff get an item with Claude's reason", async () => {
    await assistant({ HANDOFF_REPLY: "A person will answer you here." });
    h!.claude.answer({
      content: [toolUse("toolu_01hand", "handoff_to_human", { reason: "The customer wants a refund for worn shoes, which the policy does not cover." })],
    });
    await say("I wore them twice, can I still get my money back?");
    await replySent();
    expect(h!.graph.sentTexts).toEqual(["A person will answer you here."]);
    expect(h!.claude.requests).toHaveLength(1);

    const { items } = await adminGet("/admin/dlq?reason=handoff");
    expect(items).toHaveLength(1);
    expect(items[0].reason).toContain("worn shoes");
    const detail = await adminGet(`/admin/dlq/${items[0].id}`);
    expect(detail.explanation.title).toBe("Claude handed the customer to a person");
    expect(detail.explanation.text).toContain("The customer wants a refund for worn shoes");
    expect(detail.conversation.pausedBy).toBe("claude");
    expect(detail.replies[0].toolCalls).toEqual([expect.objectContaining({ name: "handoff_to_human", state: "done" })]);
    expect(shop.requests).toEqual([]);

    await say("hello?");
    await untilQuiet(h!, { also: [shop] });
    expect(h!.claude.requests).toHaveLength(1); // paused: stored, not answered
    expect(h!.graph.sends).toHaveLength(1);
  });

  it("a refusal hands off too, rather than leaving the customer in silence", async () => {
    await assistant({ HANDOFF_REPLY: "A person will answer you here." });
    h!.claude.answer({ content: [], stopReason: "refusal" });
    await say("something Claude will not answer");
    await replySent();
    expect(h!.graph.sentTexts).toEqual(["A person will answer you here."]);
    const { items } = await adminGet("/admin/dlq?reason=handoff");
    expect(items[0].reason).toContain("Claude declined");
  });
});

describe("resuming a reply after its worker is killed (law 12)", () => {
  const worker = () => spawn(process.execPath, [MAIN_JS, "worker"], { env: { ...process.env, ...h!.env, LOG_LEVEL: "silent" }, stdio: "ignore" });

  it("killed between a tool's request and its recorded answer: the call is repeated with the same key, the business acts once, and no stored step is asked of Claude again", async () => {
    await assistant({ JOB_LOCK_MS: "1000" }, undefined, 0);
    const booking = { name: "Ana", date: "2026-12-12", time: "10:00", people: 2 };
    h!.claude.answer({ content: [toolUse("toolu_01book", "book_fitting", booking)] }, { text: "Booked: Saturday 12 December at 10:00 for two." });
    let held = true;
    // The business books it, and its answer never arrives: the worker dies waiting for it.
    shop.fault = (request) => (request.path === "/bookings" && held ? { actThenHang: true } : undefined);
    const child = worker();
    try {
      await say("book a fitting for two on 12 December at 10");
      await eventually(() => shop.requests.length === 1, "the worker process to call the business", 60_000);
    } finally {
      child.kill("SIGKILL");
    }
    await new Promise((resolve) => child.once("exit", resolve));
    expect(await h!.db.toolCall.findUniqueOrThrow({ where: { id: "toolu_01book" } })).toMatchObject({ state: "requested", attempts: 1 });
    expect(shop.bookings).toHaveLength(1);
    held = false;
    h!.startWorkers();
    await replySent();

    const key = idempotencyKeyFor(PHONE_NUMBER_ID, "toolu_01book");
    expect(shop.requests.map((r) => [r.path, r.idempotencyKey])).toEqual([
      ["/bookings", key],
      ["/bookings", key],
    ]);
    expect(shop.bookings).toHaveLength(1); // acted once: the repeat was answered from the key
    expect(h!.claude.requests).toHaveLength(2); // the stored step was not asked again
    expect(await h!.db.toolCall.findUniqueOrThrow({ where: { id: "toolu_01book" } })).toMatchObject({ state: "done", attempts: 2, status: 201 });
    expect(h!.graph.sentTexts).toEqual(["Booked: Saturday 12 December at 10:00 for two."]);
  }, 90_000);

  it("killed after a tool answered, before Claude's answer was stored: the tool is not called again, Claude is asked for the answer", async () => {
    await assistant({ JOB_LOCK_MS: "1000", ANTHROPIC_TIMEOUT_MS: "2000" }, undefined, 0);
    h!.claude.answer({ content: [toolUse("toolu_01look", "lookup_order", { orderId: "A1003" })] }, { status: 529 });
    const child = worker();
    try {
      await say("was A1003 delivered?");
      await eventually(() => h!.claude.requests.length === 2, "the worker process to ask Claude after the tool answered", 60_000);
    } finally {
      child.kill("SIGKILL");
    }
    await new Promise((resolve) => child.once("exit", resolve));
    h!.claude.reply = () => "Yes, A1003 was delivered.";
    h!.startWorkers();
    await replySent();
    expect(shop.requests).toHaveLength(1);
    expect(h!.graph.sentTexts).toEqual(["Yes, A1003 was delivered."]);
    expect(toolResults(h!.claude.requests.at(-1)!)).toEqual([expect.objectContaining({ tool_use_id: "toolu_01look", is_error: false })]);
  }, 90_000);
});
