import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** The compiled entry points (npm run build), as npm start, the image and the worker child run them. */
export const MAIN_JS = join(ROOT, "dist", "main.js");
export const STAFF_JS = join(ROOT, "dist", "cli", "staff.js");

let checked = false;

/**
 * Tests, scenarios and benchmarks that start the system's processes run dist/, as operators
 * do, so dist/ is built first whenever a file in src/ is newer than it, or it is missing:
 * `npx vitest run one.test.ts` or `npx tsx bench/isolation.ts` after an edit never runs stale
 * code. Once per process; vitest runs it as its globalSetup.
 */
export default function buildWhenStale(): void {
  if (checked) return;
  checked = true;
  const built = modified(MAIN_JS);
  if (built !== undefined && newest(join(ROOT, "src")) <= built) return;
  const result = spawnSync(process.execPath, [join(ROOT, "scripts", "build.mjs")], { stdio: "inherit" });
  if (result.status !== 0) throw new Error(`npm run build's compile failed (exit ${result.status}): dist/ is what runs`);
}

function modified(path: string): number | undefined {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined;
  }
}

function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) latest = Math.max(latest, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  }
  return latest;
}
