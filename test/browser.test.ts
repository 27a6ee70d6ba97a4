import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 4, in a real browser: Debian's Chromium driven by playwright-core (.ci/run installs
 * it; on a machine without it this file has nothing to drive). A screenshot is saved as a
 * test artifact on failure, and README's screenshot comes from this test (SCREENSHOT=path).
 */

const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = "test-artifacts";
const PASSWORD = "correct horse battery staple";

describe.runIf(existsSync(CHROMIUM))("the staff page in Chromium", () => {
  let h: Harness;
  let browser: Browser;
  let page: Page;
  let base: string;

  beforeAll(async () => {
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false" } });
    await addStaff(h.db, "sam@example.com", PASSWORD);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
    });
    page = await browser.newPage({ viewport: { width: 1100, height: 800 } });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await h?.close();
  });

  it("sign in, open the dead letter Meta refused with 131047, edit the draft, send: Meta gets that text once", async () => {
    try {
      h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message", "Message failed to send because more than 24 hours have passed") });
      await h.deliver(textWebhook({ text: "Where is my order #4417?", from: "447700900123" }).body);
      await eventually(() => h.db.deadLetter.findFirst({ where: { state: "open" } }), "a dead letter");

      await page.goto(`${base}/admin`);
      await page.getByLabel("Email").fill("sam@example.com");
      await page.getByLabel("Password").fill(PASSWORD);
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByText("Signed in as sam@example.com").waitFor();
      const row = page.locator("#items tr", { hasText: "447700900123" });
      await row.waitFor();
      await expect.poll(() => page.title()).toBe("(1) Dead letters");
      await expect.poll(() => row.textContent()).toContain("131047");

      await row.click();
      await page.locator("#timeline li.in").first().waitFor();
      if (process.env.SCREENSHOT) await page.screenshot({ path: process.env.SCREENSHOT, fullPage: true });
      await page.getByLabel("Draft (edit before sending if needed)").fill("Hi! Order #4417 left our warehouse today.");
      await page.getByRole("button", { name: "Send this text" }).click();
      await page.getByText("Done: send-edited.").waitFor();

      await eventually(() => h.graph.sentTexts.includes("Hi! Order #4417 left our warehouse today."), "the edited text to reach Meta");
      await page.getByRole("heading", { name: /Open items/ }).waitFor();
      await expect.poll(() => page.locator("#items tr").count()).toBe(0);
      expect(h.graph.sentTexts.filter((t) => t === "Hi! Order #4417 left our warehouse today.")).toHaveLength(1);
      expect(await h.db.deadLetter.findFirstOrThrow()).toMatchObject({ state: "resent", actedBy: "sam@example.com" });
    } catch (error) {
      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}/staff-page-failure.png`, fullPage: true }).catch(() => undefined);
      throw error;
    }
  }, 60_000);
});
