import { execFileSync } from "node:child_process";
import { resolve } from "node:path";
import { fmt, median, table } from "./stats.ts";

/**
 * An A/B of one lever: the same bench command run in two checkouts of the project (A the code
 * before the lever, B with it), alternating A B A B so a drift of the machine reaches both
 * alike. The command prints one JSON object of figures as its last line; this prints each
 * figure's median per side and the median of the pair-by-pair ratios B ÷ A.
 *
 *   git worktree add /tmp/before <commit> && (cd /tmp/before && npm ci && npm run generate)
 *   npx tsx bench/ab.ts --pairs 3 /tmp/before . -- npx tsx bench/ingest.ts --figures
 */

function parseArgs(argv: string[]): { pairs: number; dirs: [string, string]; command: string[] } {
  const dash = argv.indexOf("--");
  const own = dash < 0 ? argv : argv.slice(0, dash);
  const command = dash < 0 ? [] : argv.slice(dash + 1);
  const pairsAt = own.indexOf("--pairs");
  const pairs = pairsAt < 0 ? 3 : Number(own[pairsAt + 1]);
  const dirs = own.filter((_, i) => i !== pairsAt && i !== pairsAt + 1);
  if (dirs.length !== 2 || command.length === 0 || !(pairs >= 1)) throw new Error("usage: tsx bench/ab.ts [--pairs N] DIR_A DIR_B -- COMMAND [ARG ...]");
  return { pairs, dirs: [resolve(dirs[0] as string), resolve(dirs[1] as string)], command };
}

function runIn(dir: string, command: string[]): Record<string, number> {
  const [file, ...args] = command as [string, ...string[]];
  const out = execFileSync(file, args, { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 64 * 1024 * 1024 });
  const last = out.trim().split("\n").at(-1) ?? "";
  return JSON.parse(last) as Record<string, number>;
}

const { pairs, dirs, command } = parseArgs(process.argv.slice(2));
const runs: { a: Record<string, number>; b: Record<string, number> }[] = [];
for (let pair = 1; pair <= pairs; pair++) {
  const a = runIn(dirs[0], command);
  const b = runIn(dirs[1], command);
  runs.push({ a, b });
  console.log(`pair ${pair}: A ${JSON.stringify(a)}  B ${JSON.stringify(b)}`);
}
const names = Object.keys(runs[0]?.a ?? {});
console.log(`\nA = ${dirs[0]}\nB = ${dirs[1]}\n${command.join(" ")}, ${pairs} pairs, alternating\n`);
console.log(
  table(
    ["figure", "A median", "B median", "B ÷ A, median of pairs", "pairs"],
    names.map((name) => {
      const ratios = runs.map((r) => (r.b[name] ?? Number.NaN) / (r.a[name] ?? Number.NaN));
      return [
        name,
        fmt(median(runs.map((r) => r.a[name] ?? Number.NaN)), 2),
        fmt(median(runs.map((r) => r.b[name] ?? Number.NaN)), 2),
        fmt(median(ratios), 3),
        ratios.map((x) => fmt(x, 2)).join(" "),
      ];
    }),
  ),
);
