import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { sources } from "./support/sources.ts";

/**
 * The clock is passed in (STYLE.md, 2): one Clock, made by the entry point, handed down. A
 * wall-clock read anywhere else in src/ (Date.now(), new Date() without arguments,
 * performance.now()) would be a time no test can hold still, so this test reads every source
 * for one. The simulators (sim/) are not the service and keep their own time; the staff page's
 * scripts (src/admin/page/) run in the person's browser, on its clock.
 */

const ROOT = join(import.meta.dirname, "..");
const CLOCK = "src/clock.ts";
const BROWSER = "src/admin/page/";
const READ = /\bDate\.now\b|\bnew Date\(\s*\)|\bperformance\.now\b/g;

/** The wall-clock reads in a source's code, comments left out. */
function readsIn(text: string): string[] {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/(^|[^:])\/\/.*$/gm, "$1");
  return [...code.matchAll(READ)].map((m) => m[0]);
}

describe("one clock (STYLE.md, 2)", () => {
  it("nothing in src/ reads the wall clock but src/clock.ts (and the staff page, in the browser)", () => {
    const reads = sources(join(ROOT, "src"))
      .map((path) => relative(ROOT, path))
      .filter((path) => path !== CLOCK && !path.startsWith(BROWSER))
      .flatMap((path) => readsIn(readFileSync(join(ROOT, path), "utf8")).map((read) => `${path}: ${read}`));
    expect(reads).toEqual([]);
  });

  it("the reading finds a wall-clock read in any of its forms, and not a date made from a value", () => {
    expect(readsIn("const t = Date.now();")).toEqual(["Date.now"]);
    expect(readsIn("const clock = { now: Date.now };")).toEqual(["Date.now"]);
    expect(readsIn("new Date( )")).toEqual(["new Date( )"]);
    expect(readsIn("const start = performance.now();")).toEqual(["performance.now"]);
    expect(readsIn("new Date(row.at); new Date(0); Date.parse(s); // Date.now() in a comment")).toEqual([]);
  });
});
