import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DemoShop, shopToolsFile } from "../sim/business/shop.ts";
import { addStaff } from "../src/staff/accounts.ts";
import { citedHours } from "./support/business-fixture.ts";
import { axeViolations, CHROMIUM, chromiumAvailable, readmeScreenshot } from "./support/chromium.ts";
import type { AnswerBlock } from "./support/fake-anthropic.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { envelope, messagesChange, metaWire, PHONE_NUMBER_ID, statusWebhook, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Issue 33's two views in a real browser (Debian's Chromium, as browser.test.ts): the
 * Conversations view finds a conversation by the customer or by words either side wrote, narrows
 * by open items and rating, shows one as bubbles with why the bot said each thing, its cost and
 * rating and a link to its item, and follows new messages live; the Insights view draws its
 * charts with uPlot under the page's strict CSP and shows the same totals as GET /admin/insights,
 * with the knowledge and tools tables. No accessibility violation axe-core can find, at desktop
 * and phone width. README's screenshots come from here:
 * `SCREENSHOT=docs npx vitest run test/insight-views-browser.test.ts`.
 */

const ARTIFACTS = "test-artifacts";
const PASSWORD = "correct horse battery staple";
const DESKTOP = { width: 1200, height: 860 };
const PHONE = { width: 375, height: 740 };
const HANDOFF_REPLY = "A person will answer you here.";

const RUI = { name: "Rui Costa", phone: "351913000111" };
const ANA = { name: "Ana Lima", phone: "351912345678" };
const NOAH = { name: "Noah Williams", phone: "447911123456" };
const LENA = { name: "Lena Fischer", phone: "4915112345678" };
const KOFI = { name: "Kofi Mensah", phone: "233241234567" };

describe.runIf(chromiumAvailable("insight-views-browser.test.ts"))("the Conversations and Insights views in Chromium", () => {
  let root: string;
  let shop: DemoShop;
  let h: Harness;
  let browser: Browser;
  let page: Page;
  let base: string;
  const cspViolations: string[] = [];
  const pageErrors: string[] = [];

  /** The customer writes; resolves once it is answered (or handed over, or dead-lettered) and all is quiet. */
  async function say(who: { name: string; phone: string }, text: string): Promise<void> {
    const { body, wamids } = textWebhook({ text, from: who.phone, name: who.name });
    expect((await h.deliver(body)).statusCode).toBe(200);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), `"${text}" to be stored`);
    await eventually(
      async () => (await h.db.inboundMessage.count({ where: { conversation: { contact: { waId: who.phone } }, replyId: null, skipReason: null } })) === 0,
      `"${text}" to be answered`,
    );
    await untilQuiet(h, { also: [shop] });
  }

  async function lastPartOf(phone: string): Promise<string> {
    const part = await h.db.outboundMessage.findFirstOrThrow({
      where: { wamid: { not: null }, reply: { conversation: { contact: { waId: phone } } } },
      orderBy: { acceptedAt: "desc" },
    });
    return part.wamid!;
  }

  /** Rui, answered from the knowledge (cited) and through a tool, asked how it went, taps "Bad". */
  async function seed(): Promise<void> {
    h.claude.answer(citedHours("We are closed on Sundays and open on Monday at 9."));
    await say(RUI, "Are you open on Sunday?");
    h.claude.answer({ content: [{ type: "tool_use", id: "toolu_1", name: "lookup_order", input: { orderId: "A1003" } } as AnswerBlock] });
    h.claude.answer({ text: "Order A1003 is delivered." });
    await say(RUI, "And where is my order A1003?");
    const rui = await lastPartOf(RUI.phone);
    for (const status of ["delivered", "read"]) await h.deliver(statusWebhook({ id: rui, status, recipient_id: RUI.phone }));
    await eventually(() => h.graph.interactiveSends.length === 1, "Rui's CSAT ask");
    // Meta has the send before the worker records its wamid: waited for, not assumed.
    const ask = await eventually(() => h.db.outboundMessage.findFirst({ where: { reply: { kind: "csat" }, wamid: { not: null } } }), "the ask taken by Meta");
    const tap = {
      from: RUI.phone,
      id: uniqueWamid(),
      timestamp: String(Math.floor(Date.now() / 1000)),
      type: "interactive",
      interactive: { type: "button_reply", button_reply: { id: "csat:bad", title: "👎 Bad" } },
      context: { from: "15550783881", id: ask.wamid },
    };
    await h.deliver(metaWire(envelope([messagesChange([tap as never], PHONE_NUMBER_ID, { [RUI.phone]: RUI.name })])));
    await eventually(async () => (await h.db.csatAsk.findFirst({ where: { rating: "bad" } })) !== null, "Rui's rating");

    h.claude.answer({ text: "Yes, we ship to Porto in two days." });
    await say(ANA, "Do you ship to Porto?");
    await say(NOAH, "human");
    h.claude.answer({ text: "Your refund is on its way." });
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
    await say(LENA, "Where is my refund?");
    await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: LENA.phone } } } }), "Lena's dead letter");
    await untilQuiet(h, { also: [shop] });
  }

  /** Runs a test's steps; on failure, saves what the browser showed. */
  const steps = (name: string, body: () => Promise<void>) => async () => {
    try {
      await body();
    } catch (error) {
      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}/insight-views-${name}.png`, fullPage: true }).catch(() => undefined);
      throw error;
    }
  };

  /** The page fits the viewport's width: nothing to scroll sideways for (else what sticks out is printed). */
  const overflowsSideways = async () => {
    const overflows = await page.evaluate<boolean>("document.documentElement.scrollWidth > window.innerWidth");
    if (overflows)
      console.log(
        "wider than the viewport:",
        await page.evaluate<string[]>(
          "[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1).slice(0, 10).map((e) => e.tagName + '#' + e.id + '.' + e.className)",
        ),
      );
    return overflows;
  };
  const rows = () => page.locator("#conversation-list [data-conversation-id]");
  const rowNames = async () => (await page.locator("#conversation-list .item-who strong").allTextContents()).sort();

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "insight-views-"));
    shop = await new DemoShop().start();
    await mkdir(join(root, "knowledge"));
    await writeFile(join(root, "knowledge", "hours.md"), "Closed on Sundays. Open Monday to Saturday from 9.");
    await writeFile(join(root, "knowledge", "returns.md"), "Unworn shoes can be returned within 30 days.");
    await writeFile(join(root, "tools.json"), JSON.stringify(shopToolsFile(shop.url, { timeoutMs: 1000 })));
    await writeFile(join(root, "numbers.json"), JSON.stringify({ [PHONE_NUMBER_ID]: { knowledgeDir: "knowledge", toolsFile: "tools.json" } }));
    h = await startHarness({
      env: {
        ADMIN_SECURE_COOKIES: "false",
        REPLY_DEBOUNCE_MS: "0",
        PHONE_NUMBERS_FILE: join(root, "numbers.json"),
        HANDOFF_REPLY,
        CSAT_AFTER_SECONDS: "1",
      },
    });
    await addStaff(h.db, "sam@example.com", PASSWORD);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
    page = await browser.newPage({ viewport: DESKTOP, locale: "en-GB", timezoneId: "Europe/London" });
    page.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    page.on("pageerror", (error) => pageErrors.push(error.message));
    await seed();
    await page.goto(`${base}/admin`);
    await page.getByLabel("Email").fill("sam@example.com");
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.locator("#queue").waitFor();
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await h?.close();
    await shop?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  it(
    "conversations: every one listed, found by name and by words either side wrote, narrowed by open item and rating, at desktop and phone width",
    steps("list", async () => {
      await page.getByRole("link", { name: "Conversations" }).click();
      await expect.poll(rowNames).toEqual([ANA.name, LENA.name, NOAH.name, RUI.name].sort());
      expect(await page.locator("#nav-conversations").getAttribute("aria-current")).toBe("page");
      const rui = rows().filter({ hasText: RUI.name });
      expect(await rui.textContent()).toContain("Rated Bad");

      // Words only the bot wrote, then a customer's name.
      await page.getByLabel("Search by customer, or by words either side wrote").fill("Porto");
      await expect.poll(rowNames).toEqual([ANA.name]);
      await page.getByLabel("Search by customer, or by words either side wrote").fill("delivered");
      await expect.poll(rowNames).toEqual([RUI.name]);
      await page.getByLabel("Search by customer, or by words either side wrote").fill("noah");
      await expect.poll(rowNames).toEqual([NOAH.name]);
      await page.getByLabel("Search by customer, or by words either side wrote").fill("");
      await expect.poll(rowNames).toHaveLength(4);

      await page.locator("#conversation-more-filters summary").click();
      await page.getByLabel("With an open item").check();
      await expect.poll(rowNames).toEqual([LENA.name, NOAH.name]);
      await page.getByLabel("With an open item").uncheck();
      await page.getByLabel("Rating").selectOption("bad");
      await expect.poll(rowNames).toEqual([RUI.name]);
      await page.getByLabel("Rating").selectOption("");
      await expect.poll(rowNames).toHaveLength(4);
      expect(await axeViolations(page)).toEqual([]);
      await readmeScreenshot(page, "staff-conversations.png");

      await page.setViewportSize(PHONE);
      expect(await overflowsSideways()).toBe(false);
      expect(await axeViolations(page)).toEqual([]);
      await page.setViewportSize(DESKTOP);
    }),
    60_000,
  );

  it(
    "a conversation: bubbles with why the bot said each thing (the cited file, the tool call), its cost, its rating, and a link to its open item",
    steps("one", async () => {
      await page.goto(`${base}/admin#/conversations`);
      await rows().filter({ hasText: RUI.name }).click();
      await page.getByRole("heading", { level: 2, name: RUI.name }).waitFor();
      const timeline = page.locator("#conversation-timeline");
      expect(await timeline.locator(".bubble.in").allTextContents()).toEqual([
        expect.stringContaining("Are you open on Sunday?"),
        expect.stringContaining("And where is my order A1003?"),
        expect.stringContaining("(Rated it: bad)"),
      ]);
      const cited = timeline.locator("li.work", { hasText: "1 source cited" });
      await cited.locator("summary").click();
      expect(await cited.locator(".citation").textContent()).toContain("hours.md");
      expect(await cited.locator(".citation blockquote").textContent()).toBe("Closed on Sundays.");
      const acted = timeline.locator("li.work", { hasText: "1 business action" });
      await acted.locator("summary").click();
      expect(await acted.locator(".tool-call").textContent()).toMatch(/lookup_order · answered · HTTP 200/);
      const facts = await page.locator("#conversation-facts").textContent();
      expect(facts).toContain("Bad, ");
      expect(facts).toMatch(/Claude\$0\.\d+ · [\d,]+ in, [\d,]+ out/);
      expect(await page.locator("#conversation-items").textContent()).toBe("None: the bot handled it.");
      expect(await axeViolations(page)).toEqual([]);
      await readmeScreenshot(page, "staff-conversation.png");
      await page.setViewportSize(PHONE);
      expect(await overflowsSideways()).toBe(false);
      expect(await axeViolations(page)).toEqual([]);
      await page.setViewportSize(DESKTOP);

      // Lena's failed reply: the item it opened is a link to it on the queue.
      await page.keyboard.press("Escape");
      await rows().filter({ hasText: LENA.name }).click();
      await page.getByRole("heading", { level: 2, name: LENA.name }).waitFor();
      await page.locator("#conversation-items a", { hasText: "The 24-hour window has closed" }).click();
      await page.locator("#why-headline", { hasText: "The 24-hour window has closed" }).waitFor();
      expect(page.url()).toMatch(/#\/item\/[0-9a-f-]{36}$/);
      // And back from the item to the whole conversation.
      await page.getByRole("link", { name: "The whole conversation" }).click();
      await page.getByRole("heading", { level: 2, name: LENA.name }).waitFor();
    }),
    60_000,
  );

  it(
    "live: a customer who writes while the list is open appears at its top, and their words in the conversation on screen, with no reload",
    steps("live", async () => {
      await page.goto(`${base}/admin#/conversations`);
      await expect.poll(rowNames).toHaveLength(4);
      await page.locator("#live-status", { hasText: "Live" }).waitFor();
      h.claude.answer({ text: "Hello Kofi, how can we help?" });
      await say(KOFI, "Hello there");
      await expect.poll(async () => rows().first().textContent(), { timeout: 10_000 }).toContain(KOFI.name);

      await rows().first().click();
      await page.getByRole("heading", { level: 2, name: KOFI.name }).waitFor();
      h.claude.answer({ text: "Yes, we do gift wrapping." });
      await say(KOFI, "Do you gift wrap?");
      await page.locator("#conversation-timeline .bubble.out", { hasText: "Yes, we do gift wrapping." }).waitFor({ timeout: 10_000 });
    }),
    60_000,
  );

  it(
    "insights: the totals of GET /admin/insights, five charts drawn by uPlot under the CSP, the knowledge and tools tables, at desktop and phone width",
    steps("insights", async () => {
      const answer = await h.app.inject({ method: "GET", url: "/admin/insights", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
      const total = answer.json().total;
      expect(total.conversations).toBe(5);

      await page.getByRole("link", { name: "Insights" }).click();
      await page.locator("#insights-totals .total").first().waitFor();
      const card = (name: string) =>
        page
          .locator("#insights-totals .total")
          .filter({ has: page.locator("dt", { hasText: new RegExp(`^${name}$`) }) })
          .locator("strong")
          .textContent();
      expect(await card("Conversations")).toBe(String(total.conversations));
      expect(await card("Resolved by the bot")).toBe(`${Math.round(total.automationRate * 100)}%`);
      expect(await card("Handed to a person")).toBe(String(total.handedOff));
      expect(await card("Rated good")).toBe("0%");
      expect(await page.locator("#insights-totals").textContent()).toContain(`1 of ${total.csat.asked} asked answered (0 good, 0 okay, 1 bad)`);

      // Every chart drawn on a canvas, named for a screen reader, its legend in words.
      const charts = page.locator("#insights figure.chart");
      expect(await charts.count()).toBe(5);
      for (const chart of await charts.all()) {
        expect(await chart.locator("canvas").count()).toBe(1);
        expect(await chart.locator(".plot").getAttribute("role")).toBe("img");
        expect(await chart.locator(".plot").getAttribute("aria-label")).toMatch(/: .+/);
      }
      expect(await page.locator('[data-chart="conversations"] .u-legend').textContent()).toContain("Resolved by the bot (%)");

      const knowledge = await page.locator("#knowledge-table tbody tr").allTextContents();
      expect(knowledge).toEqual([`hours.md${PHONE_NUMBER_ID}1`, `returns.md${PHONE_NUMBER_ID}0`]);
      expect(await page.locator("#tools-table tbody tr").allTextContents()).toEqual(["lookup_order100"]);
      expect(await page.locator("#handoff-reasons tbody").textContent()).toContain("keyword");
      expect(await page.locator("#item-reasons tbody").textContent()).toContain("24-hour window closed");

      expect(cspViolations).toEqual([]);
      expect(pageErrors).toEqual([]);
      expect(await axeViolations(page)).toEqual([]);
      await readmeScreenshot(page, "staff-insights.png");
      await page.setViewportSize(PHONE);
      await expect
        .poll(() => page.evaluate<number>("document.querySelector('[data-chart=conversations] canvas').getBoundingClientRect().width"))
        .toBeLessThan(375);
      expect(await overflowsSideways()).toBe(false);
      expect(await axeViolations(page)).toEqual([]);
      await page.setViewportSize(DESKTOP);
    }),
    60_000,
  );
});
