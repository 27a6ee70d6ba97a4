import { mkdir } from "node:fs/promises";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { axeViolations, CHROMIUM, chromiumAvailable, readmeScreenshot } from "./support/chromium.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 21.1 in a real browser: a closed-window dead letter resolved from the staff page with an
 * approved template that reaches the customer once, however often "Send" is pressed, with no
 * accessibility violation axe-core can find.
 */

const ARTIFACTS = "test-artifacts";
const PASSWORD = "correct horse battery staple";
// textWebhook names every sender so.
const CUSTOMER = { name: "José Müller", phone: "447700900777" };

describe.runIf(chromiumAvailable("templates-browser.test.ts"))("sending a template from the staff page", () => {
  let h: Harness;
  let browser: Browser;
  let page: Page;
  let base: string;
  let letterId: string;
  const cspViolations: string[] = [];

  beforeAll(async () => {
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false", JOB_ATTEMPTS: "1", WHATSAPP_BUSINESS_ACCOUNT_ID: "102290129340398" } });
    await addStaff(h.db, "sam@example.com", PASSWORD);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu", "--no-first-run"] });
    page = await browser.newPage({ viewport: { width: 1200, height: 900 }, locale: "en-GB", timezoneId: "Europe/London" });
    page.on("console", (message) => {
      if (/Content Security Policy/i.test(message.text())) cspViolations.push(message.text());
    });
    // Meta refuses the reply: the 24-hour window has closed.
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
    await h.deliver(textWebhook({ text: "Where is my order?", from: CUSTOMER.phone }).body);
    letterId = (await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open" } }), "the dead letter")).id;
    await eventually(async () => (await h.db.reply.count({ where: { state: { in: ["generating", "ready"] } } })) === 0, "the holding reply to go out");
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await h?.close();
  });

  it("a closed-window item: the template is offered first, filled with the customer's name, previewed, and arrives once however often Send is pressed", async () => {
    try {
      await page.goto(`${base}/admin`);
      await page.getByLabel("Email").fill("sam@example.com");
      await page.getByLabel("Password").fill(PASSWORD);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.locator(`[data-dead-letter-id="${letterId}"]`).click();
      await page.getByRole("heading", { level: 2, name: CUSTOMER.name }).waitFor();

      // Offered first: before the free text, which WhatsApp would refuse.
      const box = page.locator("#template-box");
      await box.waitFor();
      expect(
        await page.evaluate<boolean>(
          "!!(document.querySelector('#template-box').compareDocumentPosition(document.querySelector('#draft')) & Node.DOCUMENT_POSITION_FOLLOWING)",
        ),
      ).toBe(true);
      const picker = page.getByLabel("Template (language, category)");
      expect(await picker.locator("option").allTextContents()).toEqual(["order_update (en_US, utility)", "we_are_here (en_US, utility)"]);
      // The customer's name is offered for {{1}}.
      expect(await page.getByLabel(/\{\{1\}\}/).inputValue()).toBe(CUSTOMER.name);
      await page.getByLabel("{{2}}").fill("A-1042");
      await expect.poll(() => page.locator("#template-preview").textContent()).toBe("Hello José Müller, your order A-1042 is on its way.");
      expect(await axeViolations(page)).toEqual([]);
      await readmeScreenshot(page, "staff-template.png");

      // Another template: its own values, its own preview.
      await picker.selectOption({ label: "we_are_here (en_US, utility)" });
      await expect.poll(() => page.locator("#template-params input").count()).toBe(1);
      await picker.selectOption({ label: "order_update (en_US, utility)" });
      await page.getByLabel("{{2}}").fill("A-1042");

      // Pressed three times at once, and the request sent again with the same key: one template reaches Meta.
      const keys: string[] = [];
      page.on("request", (request) => {
        if (request.method() === "POST" && request.url().endsWith("/template")) keys.push(request.headers()["idempotency-key"] ?? "");
      });
      const send = page.getByRole("button", { name: "Send this template" });
      await send.evaluate((button: { click(): void }) => {
        button.click();
        button.click();
        button.click();
      });
      await page.getByText(`Sent: the template is on its way to ${CUSTOMER.name}.`).waitFor();
      await eventually(() => h.graph.templateSends.length === 1, "the template to reach Meta");
      await eventually(async () => (await h.db.reply.count({ where: { state: { in: ["generating", "ready"] } } })) === 0, "the reply to be sent");
      // The page's request again, with its key: replayed, not sent; with another key: refused, the item being resent already.
      expect(keys).toHaveLength(1);
      const resend = (key: string) =>
        page.evaluate<{ status: number; replayed: string | null }>(
          `(async () => {
            const session = await (await fetch("/admin/session")).json();
            const res = await fetch("/admin/dlq/${letterId}/template", {
              method: "POST",
              headers: { "content-type": "application/json", "x-csrf-token": session.csrfToken, "idempotency-key": ${JSON.stringify(key)} },
              body: JSON.stringify({ name: "order_update", language: "en_US", parameters: ["José Müller", "A-1042"] }),
            });
            return { status: res.status, replayed: res.headers.get("idempotent-replayed") };
          })()`,
        );
      expect(await resend(keys[0]!)).toEqual({ status: 202, replayed: "true" });
      expect((await resend("another-key")).status).toBe(409);
      await new Promise((r) => setTimeout(r, 300));
      expect(h.graph.templateSends).toHaveLength(1);
      expect(h.graph.templateSends[0]!.body.template).toMatchObject({
        name: "order_update",
        components: [
          {
            type: "body",
            parameters: [
              { type: "text", text: "José Müller" },
              { type: "text", text: "A-1042" },
            ],
          },
        ],
      });
      expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id: letterId } })).state).toBe("resent");

      // The item's history says who sent which template.
      await page.goto(`${base}/admin#/item/${letterId}`);
      await page.getByRole("heading", { level: 2, name: CUSTOMER.name }).waitFor();
      await page.getByText("History of this item").click();
      await expect.poll(() => page.locator("#actions").textContent()).toContain("sam@example.com: sent an approved template (“order_update”, en_US)");
      expect(await axeViolations(page)).toEqual([]);
      expect(cspViolations).toEqual([]);
    } catch (error) {
      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}/templates-page.png`, fullPage: true }).catch(() => undefined);
      throw error;
    }
  }, 60_000);
});
