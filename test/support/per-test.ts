import { afterEach } from "vitest";
import { type Harness, type HarnessOptions, startHarness } from "./harness.ts";

/**
 * For a test file whose tests each build their own system: returns the builder, and closes
 * every system built after its test (kept apart from harness.ts, which the bench imports too).
 * `defaults` apply to every system of the file; a test's own options and variables win.
 */
export function harnessPerTest(defaults: HarnessOptions = {}): (options?: HarnessOptions) => Promise<Harness> {
  let open: Harness[] = [];
  afterEach(async () => {
    await Promise.all(open.map((h) => h.close()));
    open = [];
  });
  return async (options) => {
    const h = await startHarness({ ...defaults, ...options, env: { ...defaults.env, ...options?.env } });
    open.push(h);
    return h;
  };
}
