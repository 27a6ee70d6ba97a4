import { existsSync } from "node:fs";

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
