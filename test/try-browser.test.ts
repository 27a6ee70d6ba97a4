import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEvalFile } from "../src/eval/file.ts";
import { addStaff } from "../src/staff/accounts.ts";
import { type Business, citedHours, startBusiness } from "./support/business-fixture.ts";
import { axeViolations, CHROMIUM, chromiumAvailable, readmeScreenshot } from "./support/chromium.ts";
import type { AnswerBlock, FakeAnthropic } from "./support/fake-anthropic.ts";
import { type Harness, startHarness } from "./support/harness.ts";
import { PHONE_NUMBER_ID } from "./support/webhook-bodies.ts";

/**
 * Issue 34.2's "Try it" view in a real browser (Debian's Chromium, as browser.test.ts): an
 * operator writes as a customer, reads the answers with why the bot said each and what it cost,
 * and keeps the conversation as an eval case that an eval file reads; staff do not see the view.
 * Nothing reaches WhatsApp. No accessibility violation axe-core can find, at desktop and phone
 * width. README's screenshot: `SCREENSHOT=docs npx vitest run test/try-browser.test.ts`.
 */

const PASSWORD = "correct horse battery staple";
const DESKTOP = { width: 1200, height: 860 };
const PHONE = { width: 375, height: 740 };
const toolUse = (id: string, name: string, input: unknown): AnswerBlock => ({ type: "tool_use", id, name, input });

describe.runIf(chromiumAvailable("try-browser.test.ts"))("Try it, in Chromium", () => {
  let root: string;
  let business: Business;
  let claude: FakeAnthropic;
  let h: Harness;
  let browser: Browser;
  let page: Page;
  let base: string;
  const cspViolations: string[] = [];

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "try-"));
    business = await startBusiness(root, { lookup_order: ["GET", "/orders/{orderId}", ["orderId"]] });
    // Closing, the harness holds the ledger to what its fake Claude billed: tries included.
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false", PHONE_NUMBERS_FILE: business.numbersFile } });
    claude = h.claude;
    await addStaff(h.db, "ops@example.com", PASSWORD, "operator");
    await addStaff(h.db, "ana@example.com", PASSWORD);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await h?.close();
    await business?.stop();
    await rm(root, { recursive: true, force: true });
  });

  async function signIn(email: string): Promise<Page> {
    const signedIn = await browser.newPage({ viewport: DESKTOP, locale: "en-GB", timezoneId: "Europe/London" });
    signedIn.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    await signedIn.goto(`${base}/admin`);
    await signedIn.getByLabel("Email").fill(email);
    await signedIn.getByLabel("Password").fill(PASSWORD);
    await signedIn.getByRole("button", { name: "Sign in" }).click();
    await signedIn.locator("#queue").waitFor();
    return signedIn;
  }

  it("an operator writes as a customer, reads each answer with why and its cost, and keeps the conversation as an eval case", async () => {
    page = await signIn("ops@example.com");
    await page.getByRole("link", { name: "Try it" }).click();
    await page.getByRole("heading", { name: "Try the bot" }).waitFor();
    // The view shows at once; its numbers come with GET /admin/playground a moment later.
    await page.locator(`#try-number option[value="${PHONE_NUMBER_ID}"]`).waitFor({ state: "attached" });
    expect(await page.locator("#try-number").inputValue()).toBe(PHONE_NUMBER_ID);

    claude.answer(citedHours());
    await page.getByLabel("Message from the customer").fill("Are you open on Sunday?");
    await page.getByRole("button", { name: "Send as the customer" }).click();
    await page.locator("#try-chat .bubble.out", { hasText: "We are closed on Sundays." }).waitFor();
    expect(await page.locator("#try-status").textContent()).toMatch(/^Answered: 1 Claude call, \d+ tokens in and \d+ out, \$0\.\d+\.$/);

    // The second message asks again for the whole conversation: the first answer, then the lookup (a read, run for real).
    claude.answer(
      { text: "We are closed on Sundays." },
      { content: [toolUse("toolu_1", "lookup_order", { orderId: "A1003" })] },
      { text: "Order A1003 was delivered." },
    );
    await page.getByLabel("Message from the customer").fill("Where is my order A1003?");
    await page.getByRole("button", { name: "Send as the customer" }).click();
    await page.locator("#try-chat .bubble.out", { hasText: "Order A1003 was delivered." }).waitFor();
    const work = page.locator("#try-chat li.work", { hasText: "1 tool call" });
    await work.locator("summary").click();
    expect(await work.locator(".tool-call").textContent()).toContain("lookup_order · run for real (a read)");
    expect(h.graph.requests).toEqual([]);

    await page.getByRole("button", { name: "Save as a test case" }).click();
    const yaml = await page.locator("#try-case").textContent();
    expect(yaml).toContain('turns: ["Are you open on Sunday?", "Where is my order A1003?"]');
    expect(yaml).toContain('tools: [{ name: lookup_order, input: {"orderId":"A1003"} }]');
    // What the page wrote is a case an eval file reads.
    const { file } = parseEvalFile("saved.yaml", `number: "${PHONE_NUMBER_ID}"\ncases:\n${yaml}`);
    expect(file.cases[0]).toMatchObject({ turns: ["Are you open on Sunday?", "Where is my order A1003?"], expect: { handoff: false } });

    expect(cspViolations).toEqual([]);
    expect(await axeViolations(page)).toEqual([]);
    await readmeScreenshot(page, "staff-try.png");
    await page.setViewportSize(PHONE);
    const wide = await page.evaluate<string[]>(
      "[...document.querySelectorAll('#try *')].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1).map((e) => e.tagName + '#' + e.id + '.' + e.className)",
    );
    expect(wide).toEqual([]);
    expect(await axeViolations(page)).toEqual([]);
  }, 60_000);

  it("staff who are not operators see no Try it", async () => {
    const staff = await signIn("ana@example.com");
    expect(await staff.locator("#nav-try").isHidden()).toBe(true);
    await staff.close();
  }, 30_000);
});
