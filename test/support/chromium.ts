import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { Page } from "playwright-core";

/** Debian's Chromium, driven by playwright-core (TOOLCHAIN.md: `npx playwright install` cannot download here). */
export const CHROMIUM = "/usr/bin/chromium";

/** CI as the usual variable says it: set, and not "false" or "0". .ci/run sets CI=true. */
const onCi = (env: NodeJS.ProcessEnv = process.env) => env.CI !== undefined && !["", "false", "0"].includes(env.CI.toLowerCase());

/**
 * Whether a browser test file can run. Without Chromium a developer's run skips it, saying
 * why; under CI a missing browser fails the run instead, since a browser test that quietly did
 * not run would read as a pass.
 */
export function chromiumAvailable(testFile: string): boolean {
  if (existsSync(CHROMIUM)) return true;
  const install = `${CHROMIUM} is missing: install it with \`apt-get install -y chromium\` (.ci/run does)`;
  if (onCi()) throw new Error(`${testFile}: ${install}. CI is set, so the browser tests must run.`);
  process.stderr.write(`${testFile}: skipped, ${install}.\n`);
  return false;
}

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** Every violation axe-core finds on the page, as "impact id (targets)". */
export async function axeViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate<boolean>("typeof axe === 'object'"))) await page.evaluate(AXE_SOURCE);
  const result = await page.evaluate<{ violations: { id: string; impact: string; nodes: { target: string[] }[] }[] }>("axe.run()");
  return result.violations.map((v) => `${v.impact} ${v.id} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`);
}

/** A README screenshot, taken when SCREENSHOT names the folder (`SCREENSHOT=docs npx vitest run test/…-browser.test.ts`). */
export async function readmeScreenshot(page: Page, name: string): Promise<void> {
  if (process.env.SCREENSHOT) await page.screenshot({ path: `${process.env.SCREENSHOT}/${name}`, fullPage: true });
}
