import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { type Business, citedHours, startBusiness } from "./support/business-fixture.ts";
import type { AnswerBlock, FakeAnthropic } from "./support/fake-anthropic.ts";
import { type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { expectLedgerToMatchBilled } from "./support/ledger.ts";
import { PHONE_NUMBER_ID } from "./support/webhook-bodies.ts";

/**
 * Issue 34.2: POST /admin/playground answers a customer's words as the bot would, for
 * operators and the ADMIN_TOKEN (staff 403): the knowledge cited, a read (GET) run for real, an
 * action (POST) not run, a stubbed tool answered by its stub, the cost; nothing sent to
 * WhatsApp and nothing stored but the cost: every try is in the ledger and the daily budget.
 */

const PASSWORD = "correct horse battery staple";
/** A second number whose daily budget one try spends. */
const FRUGAL = "100000000000042";
const toolUse = (id: string, name: string, input: unknown): AnswerBlock => ({ type: "tool_use", id, name, input });

let root: string;
let business: Business;
let claude: FakeAnthropic;
let h: Harness;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "playground-"));
  business = await startBusiness(root, {
    lookup_order: ["GET", "/orders/{orderId}", ["orderId"]],
    book_fitting: ["POST", "/fittings", ["day"]],
    check_stock: ["GET", "/stock/{orderId}", ["orderId"]],
  });
  const numbersFile = join(root, "numbers-and-budget.json");
  await writeFile(
    numbersFile,
    JSON.stringify({ [PHONE_NUMBER_ID]: { knowledgeDir: "knowledge", toolsFile: "tools.json" }, [FRUGAL]: { dailyBudget: { usd: 0.000001 } } }),
  );
  // Closing, the harness holds the ledger to what its fake Claude billed: tries included.
  h = await startHarness({ env: { PHONE_NUMBERS_FILE: numbersFile } });
  claude = h.claude;
  await addStaff(h.db, "ops@example.com", PASSWORD, "operator");
  await addStaff(h.db, "ana@example.com", PASSWORD);
});

afterAll(async () => {
  await h?.close();
  await business?.stop();
  await rm(root, { recursive: true, force: true });
});

async function cookieOf(email: string): Promise<{ cookie: string; csrf: string }> {
  const signIn = await h.app.inject({ method: "POST", url: "/admin/session", payload: { email, password: PASSWORD } });
  return { cookie: String(signIn.headers["set-cookie"]).split(";")[0]!, csrf: signIn.json().csrfToken };
}

const play = (payload: unknown, headers: Record<string, string> = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` }) =>
  h.app.inject({ method: "POST", url: "/admin/playground", headers, payload: payload as Record<string, unknown> });

describe("POST /admin/playground", () => {
  it("answers as the bot would: the knowledge cited, a read run for real, an action not run, a stub's answer, the cost; nothing sent or stored", async () => {
    claude.answer(
      citedHours(),
      { content: [toolUse("toolu_1", "lookup_order", { orderId: "A1003" }), toolUse("toolu_2", "check_stock", { orderId: "A1003" })] },
      { text: "Your order was delivered, and it is in stock." },
      { content: [toolUse("toolu_3", "book_fitting", { day: "Monday" })] },
      { text: "I cannot book that from here." },
    );
    const answer = await play({
      phoneNumberId: PHONE_NUMBER_ID,
      turns: ["Are you open on Sunday?", "Where is A1003, and is it in stock?", "Book me a fitting on Monday"],
      tools: { check_stock: [{ answer: { inStock: true } }] },
    });
    expect(answer.statusCode, answer.body).toBe(200);
    const body = answer.json();
    expect(body.answers).toEqual(["We are closed on Sundays.", "Your order was delivered, and it is in stock.", "I cannot book that from here."]);
    expect(body.citations).toEqual([expect.objectContaining({ turn: 0, source: "hours.md", citedText: "Closed on Sundays." })]);
    expect(body.toolCalls.map((c: { turn: number; name: string; how: string }) => [c.turn, c.name, c.how])).toEqual([
      [1, "lookup_order", "executed"],
      [1, "check_stock", "stubbed"],
      [2, "book_fitting", "not_run"],
    ]);
    expect(body.handoff).toBeNull();
    expect(body.usage.calls).toBe(5);
    expect(body.costUsd).toBeGreaterThan(0);
    // The read went to the business; the stubbed read and the action did not.
    expect(business.requests).toEqual(["GET /orders/A1003"]);
    expect(JSON.stringify(claude.requests.at(-1)!.messages)).toContain("Not run: book_fitting is not called here");
    // Nothing sent, nothing stored but what it cost: a row of the ledger per call, of no reply, counted by GET /admin/costs.
    expect(h.graph.requests).toEqual([]);
    expect(await h.db.conversation.count()).toBe(0);
    expect(await h.db.reply.count()).toBe(0);
    await expectLedgerToMatchBilled(h.db, claude.usages);
    expect(await h.db.claudeCall.count({ where: { replyId: null, phoneNumberId: PHONE_NUMBER_ID } })).toBe(5);
    const costs = await h.app.inject({ method: "GET", url: "/admin/costs", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(costs.json().total.amounts.claudeUsd).toBeCloseTo(body.costUsd, 10);
  });

  it("spends the number's daily budget as a customer's answer does: once it is spent, a try is refused before Claude is asked", async () => {
    const before = claude.requests.length;
    expect((await play({ phoneNumberId: FRUGAL, turns: ["hi"] })).statusCode).toBe(200);
    const refused = await play({ phoneNumberId: FRUGAL, turns: ["hi again"] });
    expect(refused.statusCode).toBe(409);
    expect(refused.json()).toEqual({ error: expect.stringMatching(/^The number's daily budget \(0\.000001 USD for Claude\) is spent/) });
    expect(claude.requests.length).toBe(before + 1);
  });

  it("is for operators and the ADMIN_TOKEN: staff are refused, a bad body or an unknown number named", async () => {
    const staff = await cookieOf("ana@example.com");
    const refused = await play({ phoneNumberId: PHONE_NUMBER_ID, turns: ["hi"] }, { cookie: staff.cookie, "x-csrf-token": staff.csrf });
    expect(refused.statusCode).toBe(403);
    const operator = await cookieOf("ops@example.com");
    const before = claude.requests.length;
    expect((await play({ phoneNumberId: PHONE_NUMBER_ID, turns: ["hi"] }, { cookie: operator.cookie, "x-csrf-token": operator.csrf })).statusCode).toBe(200);
    expect(claude.requests.length).toBe(before + 1);
    expect((await play({ phoneNumberId: PHONE_NUMBER_ID, turns: [] })).json()).toEqual({ error: expect.stringMatching(/^bad body: turns/) });
    expect((await play({ phoneNumberId: "999", turns: ["hi"] })).json()).toEqual({
      error: "bad body: phoneNumberId (999 is not an entry of PHONE_NUMBERS_FILE)",
    });
    expect(claude.requests.length).toBe(before + 1);
  });
});
