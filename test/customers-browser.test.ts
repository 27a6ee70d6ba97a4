import { readFile } from "node:fs/promises";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { axeViolations, CHROMIUM, chromiumAvailable, readmeScreenshot } from "./support/chromium.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 35's page in a real browser (Debian's Chromium, as browser.test.ts): an operator finds
 * a customer, downloads the export, and erases them only once their label is typed; staff find
 * customers but see neither button. No accessibility violation axe-core can find, at desktop and
 * phone width. README's screenshot: `SCREENSHOT=docs npx vitest run test/customers-browser.test.ts`.
 */

const PASSWORD = "correct horse battery staple";
const ANA = { phone: "447700900123", name: "Ana Lima" };

describe.runIf(chromiumAvailable("customers-browser.test.ts"))("the Customers view in Chromium", () => {
  let h: Harness;
  let browser: Browser;
  let base: string;

  beforeAll(async () => {
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false", REPLY_DEBOUNCE_MS: "0" } });
    h.startWorkers();
    await addStaff(h.db, "ops@example.com", PASSWORD, "operator");
    await addStaff(h.db, "ana@example.com", PASSWORD);
    h.claude.answer({ text: "Yes, we ship to Porto." });
    await h.deliver(textWebhook({ text: "Do you ship to Porto?", from: ANA.phone, name: ANA.name }).body);
    await eventually(() => h.graph.sentTexts.includes("Yes, we ship to Porto."), "the answer");
    await untilQuiet(h);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await h?.close();
  });

  async function signIn(email: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 }, locale: "en-GB", timezoneId: "Europe/London", acceptDownloads: true });
    await page.goto(`${base}/admin`);
    await page.getByLabel("Email").fill(email);
    await page.getByLabel("Password").fill(PASSWORD);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.locator("#queue").waitFor();
    await page.getByRole("link", { name: "Customers" }).click();
    await page.getByRole("heading", { name: "A customer's data" }).waitFor();
    return page;
  }

  const find = async (page: Page, q: string) => {
    await page.getByLabel("Name, phone, @username or BSUID").fill(q);
    await page.getByRole("button", { name: "Find" }).click();
  };

  it("an operator finds a customer, downloads everything held about them, and erases it once their label is typed", async () => {
    const page = await signIn("ops@example.com");
    await find(page, "+44 7700");
    const row = page.locator("#customer-list [data-contact-id]");
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.textContent()).toContain(ANA.name);

    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: `Export the data of ${ANA.name} (+${ANA.phone})` }).click(),
    ]);
    const exported = JSON.parse(await readFile((await download.path())!, "utf8"));
    expect(exported.contact).toMatchObject({ name: ANA.name, phone: ANA.phone });
    expect(JSON.stringify(exported)).toContain("Do you ship to Porto?");

    await page.getByRole("button", { name: `Erase the data of ${ANA.name} (+${ANA.phone})` }).click();
    await page.getByLabel(`Type +${ANA.phone} to confirm`).fill("+44");
    await page.getByRole("button", { name: "Erase for good" }).click();
    await expect.poll(() => page.locator("#customers-status").textContent()).toBe(`Type +${ANA.phone} exactly to erase this customer.`);
    expect(await h.db.contact.count({ where: { waId: ANA.phone } })).toBe(1);
    expect(await axeViolations(page)).toEqual([]);
    await readmeScreenshot(page, "staff-customers.png");

    await page.getByLabel(`Type +${ANA.phone} to confirm`).fill(`+${ANA.phone}`);
    await page.getByRole("button", { name: "Erase for good" }).click();
    await expect.poll(() => page.locator("#customers-status").textContent()).toMatch(new RegExp(`^Erased \\+${ANA.phone}: .*1 conversations.*`));
    expect(await h.db.contact.count({ where: { waId: ANA.phone } })).toBe(0);
    expect(await page.locator("#customer-list [data-contact-id]").count()).toBe(0);

    await page.setViewportSize({ width: 375, height: 740 });
    expect(await page.evaluate<boolean>("document.documentElement.scrollWidth > window.innerWidth")).toBe(false);
    expect(await axeViolations(page)).toEqual([]);
    await page.close();
  }, 60_000);

  it("staff find customers but may neither export nor erase", async () => {
    h.claude.answer({ text: "Hello Ben." });
    await h.deliver(textWebhook({ text: "Hello", from: "351912000111", name: "Ben Costa" }).body);
    await eventually(() => h.graph.sentTexts.includes("Hello Ben."), "Ben's answer");
    const page = await signIn("ana@example.com");
    await find(page, "Ben");
    await expect.poll(() => page.locator("#customer-list [data-contact-id]").count()).toBe(1);
    expect(await page.locator("#customer-list button").count()).toBe(0);
    expect(await axeViolations(page)).toEqual([]);
    await page.close();
  }, 30_000);
});
