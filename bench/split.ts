import { pathToFileURL } from "node:url";
import { splitForWhatsApp, WHATSAPP_TEXT_LIMIT } from "../src/whatsapp/split.ts";
import { LONG_REPLY_KINDS, type LongReplyKind, longReply } from "../test/support/long-replies.ts";
import { fmt, median, table } from "./stats.ts";

/**
 * Benchmark 7: splitForWhatsApp on 100 000 units of each kind of text, beside a floor measured in
 * the same run, the least any split can do: slicing the text every 4096 units, with no look at
 * whitespace or clusters. It runs on a worker's event loop, so its time is time no lock is renewed.
 */

export interface SplitSettings {
  units: number;
  /** Samples per kind; each sample times enough calls to last about a millisecond. */
  samples: number;
}

export interface SplitFigure {
  kind: LongReplyKind;
  units: number;
  parts: number;
  splitMs: number;
  floorMs: number;
}

function floorSplit(text: string): string[] {
  const parts: string[] = [];
  for (let i = 0; i < text.length; i += WHATSAPP_TEXT_LIMIT) parts.push(text.slice(i, i + WHATSAPP_TEXT_LIMIT));
  return parts;
}

/** Milliseconds per call of `run` on `text`, over `calls` calls. */
function timePerCall(run: (text: string) => string[], text: string, calls: number): number {
  let parts = 0;
  const started = performance.now();
  for (let i = 0; i < calls; i++) parts += run(text).length;
  const ms = (performance.now() - started) / calls;
  // Reading the results keeps the compiler from dropping the calls that made them.
  if (parts < calls) throw new Error("a split returned no parts");
  return ms;
}

/** How many calls make a sample of about a millisecond. */
function callsFor(run: (text: string) => string[], text: string): number {
  let calls = 1;
  while (timePerCall(run, text, calls) * calls < 1 && calls < 1_000_000) calls *= 2;
  return calls;
}

export function runSplitBench(settings: SplitSettings): SplitFigure[] {
  return (Object.keys(LONG_REPLY_KINDS) as LongReplyKind[]).map((kind) => {
    const text = longReply(kind, settings.units);
    const splitCalls = callsFor(splitForWhatsApp, text); // also warms both up
    const floorCalls = callsFor(floorSplit, text);
    const split: number[] = [];
    const floor: number[] = [];
    // Alternating, so whatever else the machine does weighs on both alike.
    for (let i = 0; i < settings.samples; i++) {
      split.push(timePerCall(splitForWhatsApp, text, splitCalls));
      floor.push(timePerCall(floorSplit, text, floorCalls));
    }
    return { kind, units: text.length, parts: splitForWhatsApp(text).length, splitMs: median(split), floorMs: median(floor) };
  });
}

export function formatSplit(figures: SplitFigure[]): string {
  const rows = figures.map((f) => [f.kind, fmt(f.units), fmt(f.parts), fmt(f.splitMs, 3), fmt(f.floorMs * 1000, 2), fmt(f.splitMs / f.floorMs)]);
  return [
    table(["text", "UTF-16 units", "parts", "splitForWhatsApp ms (median)", "floor µs (median)", "split ÷ floor"], rows),
    `  floor: text.slice every ${WHATSAPP_TEXT_LIMIT} units, nothing else; medians of samples of ~1 ms of calls each`,
  ].join("\n");
}

/** npm run bench's settings; `quick` (BENCH_QUICK=1) takes fewer samples. */
export function splitSettings(quick: boolean): SplitSettings {
  return { units: 100_000, samples: quick ? 5 : 31 };
}

/** `tsx bench/split.ts`: benchmark 7 alone, a few seconds. */
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(formatSplit(runSplitBench(splitSettings(process.env.BENCH_QUICK === "1"))));
}
