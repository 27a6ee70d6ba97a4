import { mkdir } from "node:fs/promises";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { axeViolations, CHROMIUM, chromiumAvailable, readmeScreenshot } from "./support/chromium.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 21.2 in a real browser: a customer who asked for a person is answered from the staff
 * page (the message reaches them once, however often Send is pressed), then given back to the
 * bot, whose next answer has the person's words in its history; and issue 21.4: a second
 * person, in a browser of their own, sees who is answering an item and is refused on it until
 * they take it over. No accessibility violation axe-core can find.
 */

const ARTIFACTS = "test-artifacts";
const PASSWORD = "correct horse battery staple";
// textWebhook names every sender so.
const CUSTOMER = { name: "José Müller", phone: "447700900778" };
const HANDOFF_REPLY = "A person will answer you here.";
const ANSWER = "Hi José, this is Sam: your parcel leaves the warehouse today.";

describe.runIf(chromiumAvailable("handoff-browser.test.ts"))("answering a handed-off customer from the staff page", () => {
  let h: Harness;
  let browser: Browser;
  let page: Page;
  let base: string;
  const cspViolations: string[] = [];

  const say = async (text: string, from = CUSTOMER.phone) => {
    const { body, wamids } = textWebhook({ text, from });
    expect((await h.deliver(body)).statusCode).toBe(200);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), `"${text}" to be stored`);
  };
  const textsSent = () => h.graph.sentTexts;

  beforeAll(async () => {
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false", HANDOFF_REPLY, REPLY_DEBOUNCE_MS: "0", WHATSAPP_BUSINESS_ACCOUNT_ID: "102290129340398" } });
    await addStaff(h.db, "sam@example.com", PASSWORD);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
    page = await browser.newPage({ viewport: { width: 1200, height: 900 }, locale: "en-GB", timezoneId: "Europe/London" });
    page.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
  }, 60_000);

  async function signIn(into: Page, email: string): Promise<void> {
    await into.goto(`${base}/admin`);
    await into.getByLabel("Email").fill(email);
    await into.getByLabel("Password").fill(PASSWORD);
    await into.getByRole("button", { name: "Sign in" }).click();
    await into.locator("#queue").waitFor();
  }

  afterAll(async () => {
    await browser?.close();
    await h?.close();
  });

  it("the person's message arrives once, the bot keeps out, and given back it answers knowing what the person said", async () => {
    try {
      await say("I want to talk to a person");
      await say("human");
      await eventually(() => textsSent().includes(HANDOFF_REPLY), "the handoff reply");
      const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open", source: "handoff" } }), "the handoff item");
      await untilQuiet(h);
      const sentBefore = textsSent().length;

      await page.goto(`${base}/admin`);
      await page.getByLabel("Email").fill("sam@example.com");
      await page.getByLabel("Password").fill(PASSWORD);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.locator(`[data-dead-letter-id="${letter.id}"]`).click();
      await page.getByRole("heading", { level: 2, name: CUSTOMER.name }).waitFor();
      await expect.poll(() => page.locator("#why-headline").textContent()).toBe("The customer asked for a person");

      // No failed reply to resend: the box is the person's own message, and the window is open.
      const box = page.getByLabel("Your message to the customer");
      expect(await box.isEditable()).toBe(true);
      expect(await page.getByRole("button", { name: "Send this text" }).isHidden()).toBe(true);
      expect(await page.getByRole("button", { name: "Resume the bot" }).isHidden()).toBe(true);
      await box.fill(ANSWER);
      expect(await axeViolations(page)).toEqual([]);

      // Pressed three times at once: one message reaches the customer.
      const send = page.getByRole("button", { name: "Send to the customer" });
      await send.evaluate((button: { click(): void }) => {
        button.click();
        button.click();
        button.click();
      });
      await page.getByText("Sent: the customer will read it on WhatsApp.").waitFor();
      await eventually(() => textsSent().includes(ANSWER), "the person's message to reach Meta");
      await untilQuiet(h);
      expect(textsSent().slice(sentBefore)).toEqual([ANSWER]);
      expect(await box.inputValue()).toBe("");
      // The item stays with the person; the conversation shows their message (the live queue refreshes it).
      await expect.poll(() => page.locator("#timeline").textContent(), { timeout: 10_000 }).toContain(ANSWER);
      await readmeScreenshot(page, "staff-handoff.png");
      await page.getByText("History of this item").click();
      await expect.poll(() => page.locator("#actions").textContent()).toContain(`sam@example.com: wrote to the customer: “${ANSWER}”`);

      // The customer answers the person: the bot stays silent.
      await say("thanks! what time will it arrive?");
      await untilQuiet(h);
      expect(textsSent().slice(sentBefore)).toEqual([ANSWER]);
      const asked = h.claude.requests.length;

      await page.getByRole("button", { name: "Give back to the bot" }).click();
      await page.getByText(`The bot answers again: ${CUSTOMER.name}.`).waitFor();
      expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: letter.id } })).state).toBe("resolved");
      expect(await axeViolations(page)).toEqual([]);

      await say("can you deliver it to my office instead?");
      await eventually(() => h.claude.requests.length === asked + 1, "the bot to answer again");
      const request = h.claude.requests.at(-1)!;
      const assistantTurns = request.messages.filter((m) => m.role === "assistant").map((m) => JSON.stringify(m.content));
      expect(assistantTurns.some((turn) => turn.includes("your parcel leaves the warehouse today"))).toBe(true);
      expect(cspViolations).toEqual([]);
    } catch (error) {
      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}/handoff-page.png`, fullPage: true }).catch(() => undefined);
      throw error;
    }
  }, 90_000);

  it("a second person sees who is answering, is refused on the item by name, and acts once they take it over", async () => {
    const other = "447700900779";
    await say("can I speak to someone", other);
    await say("human", other);
    const letter = await eventually(
      () => h.db.deadLetter.findFirst({ where: { state: "open", source: "handoff", conversation: { contact: { waId: other } } } }),
      "the second customer's item",
    );
    await untilQuiet(h);
    await addStaff(h.db, "kim@example.com", PASSWORD);
    const kimContext = await browser.newContext({ viewport: { width: 1200, height: 900 }, locale: "en-GB", timezoneId: "Europe/London" });
    const kim = await kimContext.newPage();
    try {
      // Sam (still signed in from the walk above) opens the item and starts writing.
      await page.goto(`${base}/admin#/item/${letter.id}`);
      await page.getByRole("heading", { level: 2, name: CUSTOMER.name }).waitFor();
      await page.getByLabel("Your message to the customer").fill("Sam is typing…");

      await signIn(kim, "kim@example.com");
      await kim.goto(`${base}/admin#/item/${letter.id}`);
      await kim.getByRole("heading", { level: 2, name: CUSTOMER.name }).waitFor();
      await expect
        .poll(() => kim.locator("#presence-note").textContent(), { timeout: 15_000 })
        .toContain("sam@example.com is answering this customer. What you send here is refused unless you take it over.");
      expect(await kim.getByRole("button", { name: "Take it over" }).isVisible()).toBe(true);
      // Sam sees Kim too.
      await expect.poll(() => page.locator("#presence-note").textContent(), { timeout: 15_000 }).toContain("Also open by kim@example.com.");

      // Kim's send is refused, by name; nothing reaches the customer.
      const sentBefore = textsSent().length;
      await kim.getByLabel("Your message to the customer").fill("Kim here, how can I help?");
      await kim.getByRole("button", { name: "Send to the customer" }).click();
      await expect.poll(() => kim.locator("#result").textContent()).toMatch(/^Not done: sam@example\.com is answering this customer right now\./);
      await untilQuiet(h);
      expect(textsSent().length).toBe(sentBefore);
      expect(await axeViolations(kim)).toEqual([]);
      await readmeScreenshot(kim, "staff-two-people.png");

      // Kim takes it over: the send goes out once, and Sam is now the one refused.
      await kim.getByRole("button", { name: "Take it over" }).click();
      await expect.poll(() => kim.locator("#result").textContent()).toBe("You are answering this customer now, instead of sam@example.com.");
      await kim.getByRole("button", { name: "Send to the customer" }).click();
      await kim.getByText("Sent: the customer will read it on WhatsApp.").waitFor();
      await eventually(() => textsSent().includes("Kim here, how can I help?"), "Kim's message");
      await expect.poll(() => page.locator("#presence-note").textContent(), { timeout: 15_000 }).toContain("kim@example.com is answering this customer.");
      await page.getByRole("button", { name: "Send to the customer" }).click();
      await expect.poll(() => page.locator("#result").textContent()).toMatch(/^Not done: kim@example\.com is answering/);
      await untilQuiet(h);
      expect(textsSent().slice(sentBefore)).toEqual(["Kim here, how can I help?"]);

      await kim.getByText("History of this item").click();
      await expect.poll(() => kim.locator("#actions").textContent()).toContain("kim@example.com: took the item over from sam@example.com");
      expect(cspViolations).toEqual([]);
    } catch (error) {
      await mkdir(ARTIFACTS, { recursive: true });
      await kim.screenshot({ path: `${ARTIFACTS}/handoff-second-person.png`, fullPage: true }).catch(() => undefined);
      throw error;
    } finally {
      await kimContext.close();
    }
  }, 90_000);
});
