import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The compiled entry points (npm run build), as npm start, the image and the worker child run them. */
export const MAIN_JS = join(ROOT, "dist", "main.js");
export const STAFF_JS = join(ROOT, "dist", "cli", "staff.js");

let checked = false;

/**
 * Tests, scenarios and benchmarks that start the system's processes run dist/, as operators
 * do, so dist/ is built first whenever its inputs changed, the way npm start does it
 * (scripts/build.mjs --if-stale: one staleness check, one lock, a swap that never deletes
 * what a running process uses): `npx vitest run one.test.ts` or `npx tsx bench/isolation.ts`
 * after an edit never runs stale code. Once per process; vitest runs it as its globalSetup.
 */
export default function buildWhenStale(): void {
  if (checked) return;
  checked = true;
  const result = spawnSync(process.execPath, [join(ROOT, "scripts", "build.mjs"), "--if-stale"], { stdio: "inherit" });
  if (result.status !== 0) throw new Error(`npm run build's compile failed (exit ${result.status}): dist/ is what runs`);
}
