import { describe, expect, it } from "vitest";
import { splitForWhatsApp, WHATSAPP_TEXT_LIMIT } from "../src/whatsapp/split.ts";
import { LONG_REPLY_KINDS, type LongReplyKind, longReply } from "./support/long-replies.ts";

/** WHATSAPP.md §5: a text body is at most 4096 UTF-16 units; longer replies go out in parts. */

const LIMIT = WHATSAPP_TEXT_LIMIT;
const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });

interface Span {
  start: number;
  end: number;
}

/** Where each part lies in the text: in order, with nothing but whitespace before, between and after them. */
function spansOf(text: string, parts: string[]): Span[] {
  let cursor = 0;
  const spans = parts.map((part, i) => {
    const start = text.indexOf(part, cursor);
    expect(start, `part ${i} comes after part ${i - 1}`).toBeGreaterThanOrEqual(cursor);
    expect(text.slice(cursor, start).trim(), `only whitespace before part ${i}`).toBe("");
    cursor = start + part.length;
    return { start, end: cursor };
  });
  expect(text.slice(cursor).trim(), "only whitespace after the last part").toBe("");
  return spans;
}

/** Whether a cluster of the whole text starts at `p`: Intl.Segmenter on the original text, asked at that index. */
function clusterStartsOf(text: string): (p: number) => boolean {
  const segments = graphemes.segment(text);
  return (p) => p === 0 || p === text.length || segments.containing(p)?.index === p;
}

/** Every cluster boundary of the text, by iterating its segments from the start (slow on Node 20: short texts only). */
function allClusterStarts(text: string): Set<number> {
  const starts = new Set([text.length]);
  for (const { index } of graphemes.segment(text)) starts.add(index);
  return starts;
}

const isHighSurrogate = (unit: number) => unit >= 0xd800 && unit <= 0xdbff;
const isLowSurrogate = (unit: number) => unit >= 0xdc00 && unit <= 0xdfff;

describe("a reply within the limit", () => {
  it.each([
    ["empty", ""],
    ["with whitespace around it", "  Hello!\n"],
    ["of exactly 4096 units", "a".repeat(4096)],
    ["of 1024 thumbs with a skin tone (4096 units)", "👍🏽".repeat(1024)],
    ["of whitespace only", " ".repeat(4096)],
  ])("comes back unchanged, as one part: %s", (_, text) => {
    expect(splitForWhatsApp(text)).toEqual([text]);
  });
});

describe.each(Object.keys(LONG_REPLY_KINDS) as LongReplyKind[])("100 000 units of %s", (kind) => {
  const text = longReply(kind);
  let parts: string[] | undefined;
  const split = () => {
    parts ??= splitForWhatsApp(text);
    return parts;
  };

  it("are split into parts that never exceed 4096 units, none of them empty", () => {
    expect(text.length).toBeGreaterThan(99_000);
    expect(split().length).toBeGreaterThanOrEqual(Math.ceil(text.length / LIMIT));
    for (const part of split()) {
      expect(part.length).toBeLessThanOrEqual(LIMIT);
      expect(part.length).toBeGreaterThan(0);
    }
  });

  it("join back into the text, less only the whitespace trimmed at the cuts", () => {
    const spans = spansOf(text, split());
    expect(spans[0]?.start).toBe(0);
    expect(spans.at(-1)?.end).toBe(text.length);
  });

  it("never cut a grapheme cluster", () => {
    const startsCluster = clusterStartsOf(text);
    for (const { start, end } of spansOf(text, split())) {
      expect(startsCluster(start), `a cluster starts at ${start}`).toBe(true);
      expect(startsCluster(end), `a cluster starts at ${end}`).toBe(true);
    }
  });

  it("fill every part but the last to at least half the limit", () => {
    for (const part of split().slice(0, -1)) expect(part.length).toBeGreaterThanOrEqual(LIMIT / 2);
  });
});

describe("where a long reply is cut", () => {
  it("prefers the last whitespace that keeps at least half the part", () => {
    expect(splitForWhatsApp(`${"a".repeat(3000)} ${"b".repeat(3000)}`)).toEqual(["a".repeat(3000), "b".repeat(3000)]);
    const paragraphs = `${"x".repeat(2500)}\n\n${"y".repeat(1000)} ${"z".repeat(1000)}`;
    expect(splitForWhatsApp(paragraphs)).toEqual([`${"x".repeat(2500)}\n\n${"y".repeat(1000)}`, "z".repeat(1000)]);
  });

  it("cuts at the limit when the only whitespace would leave the part less than half full", () => {
    const parts = splitForWhatsApp(`${"a".repeat(1000)} ${"b".repeat(5000)}`);
    expect(parts).toEqual([`${"a".repeat(1000)} ${"b".repeat(3095)}`, "b".repeat(1905)]);
  });

  it("takes whitespace just past the limit as the break, and trims all the whitespace at a cut", () => {
    expect(splitForWhatsApp(`${"a".repeat(4096)} ${"b".repeat(10)}`)).toEqual(["a".repeat(4096), "b".repeat(10)]);
    expect(splitForWhatsApp(`${"a".repeat(3000)} \n\t\u00a0\u3000 ${"b".repeat(3000)}`)).toEqual(["a".repeat(3000), "b".repeat(3000)]);
  });

  it("keeps the text's own leading and trailing whitespace, trimming only at the cuts", () => {
    const text = `  ${"a".repeat(3000)} ${"b".repeat(3000)}\n`;
    expect(splitForWhatsApp(text)).toEqual([`  ${"a".repeat(3000)}`, `${"b".repeat(3000)}\n`]);
  });

  it("moves a cluster that straddles the limit whole into the next part", () => {
    const family = "👨‍👩‍👧‍👦"; // 11 units
    const parts = splitForWhatsApp(`${"a".repeat(4090)}${family}${"b".repeat(100)}`);
    expect(parts).toEqual(["a".repeat(4090), `${family}${"b".repeat(100)}`]);
  });

  it.each([0, 1, 2, 3])("pairs flags from the start of their run, wherever the cut falls (%i letters before)", (letters) => {
    const text = `${"x".repeat(letters)}${"🇵🇹".repeat(3000)}`;
    const parts = splitForWhatsApp(text);
    expect(parts.join("")).toBe(text);
    expect(parts[0]).toMatch(/^x*(?:🇵🇹)+$/u);
    for (const part of parts.slice(1)) expect(part).toMatch(/^(?:🇵🇹)+$/u);
  });

  it.each([
    ["a letter under 5000 combining accents", `a${"\u0301".repeat(5000)}`],
    ["a letter under 3000 skin-tone modifiers (surrogate pairs)", `a${"🏽".repeat(3000)}`],
  ])("cuts one cluster longer than the limit, but never between surrogates: %s", (_, text) => {
    const parts = splitForWhatsApp(text);
    expect(parts.join("")).toBe(text);
    for (const part of parts) {
      expect(part.length).toBeLessThanOrEqual(LIMIT);
      expect(isHighSurrogate(part.charCodeAt(part.length - 1))).toBe(false);
      expect(isLowSurrogate(part.charCodeAt(0))).toBe(false);
    }
  });

  it.each([
    ["a space under a combining mark", `${"a".repeat(3000)}  \u0301b${"c".repeat(2000)}`],
    ["a space after a prepended sign (Arabic number sign)", `${"a".repeat(3000)}\u0600 ${"b".repeat(2000)}`],
  ])("keeps whitespace that belongs to a cluster with it: %s", (_, text) => {
    const parts = splitForWhatsApp(text);
    const starts = allClusterStarts(text);
    for (const { start, end } of spansOf(text, parts)) {
      expect(starts.has(start), `a cluster starts at ${start}`).toBe(true);
      expect(starts.has(end), `a cluster starts at ${end}`).toBe(true);
    }
  });
});

describe("random mixtures of the clusters that make cutting hard", () => {
  // Code points, and two that repeat into one long cluster: the generator glues them into ZWJ sequences, flags
  // out of phase, conjuncts, Hangul syllables, marks on whitespace, CR LF...
  const pieces = [
    ..."ab \n\r\t\u00a0\u3000",
    "\u0301", // combining acute (Extend)
    "\u200d", // zero-width joiner
    "\u0903", // Devanagari visarga (SpacingMark)
    "\u0600", // Arabic number sign (Prepend)
    ..."\u0915\u094d\u0937", // Devanagari ka, virama, ssa: conjuncts (GB9c)
    "\u0915\u094d", // repeated: one conjunct cluster as long as the run
    "👩\u200d", // repeated: one ZWJ sequence as long as the run
    ..."\u1100\u1161\u11a8\uac00\uac01", // Hangul jamo L, V, T and syllables LV, LVT
    "👩",
    "❤",
    "\ufe0f",
    "🏽",
    "🇵",
    "🇹",
    "中",
    "😀",
  ];

  /** mulberry32: the same texts on every run, so a failure can be replayed. */
  function random(seed: number): () => number {
    let state = seed;
    return () => {
      state = (state + 0x6d2b79f5) | 0;
      let t = Math.imul(state ^ (state >>> 15), 1 | state);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  it("keep every rule, at limits from 2 to 600 units", () => {
    const next = random(20260101);
    const pick = <T>(list: readonly T[]): T => list[Math.floor(next() * list.length)]!;
    for (let round = 0; round < 250; round++) {
      const length = 10 + Math.floor(next() * 1500);
      let text = "";
      // Half the texts are single pieces; half are runs, long enough for windows to start inside them.
      while (text.length < length) text += pick(pieces).repeat(round % 2 === 0 ? 1 : 1 + Math.floor(next() * 300));
      const limit = 2 + Math.floor(next() * 600);
      const parts = splitForWhatsApp(text, limit);
      const starts = allClusterStarts(text);
      const clusterAround = (p: number) => {
        let from = p;
        while (!starts.has(from)) from--;
        let to = p;
        while (!starts.has(to)) to++;
        return to - from;
      };
      const context = `round ${round}, limit ${limit}: ${JSON.stringify(text)}`;
      for (const part of parts) {
        expect(part.length, context).toBeLessThanOrEqual(limit);
        expect(part.length, context).toBeGreaterThan(0);
      }
      for (const { start, end } of spansOf(text, parts)) {
        for (const p of [start, end]) {
          // Only a cluster longer than the limit may be cut, and then never inside a code point.
          if (!starts.has(p)) {
            expect(clusterAround(p), context).toBeGreaterThan(limit);
            expect(isLowSurrogate(text.charCodeAt(p)) && isHighSurrogate(text.charCodeAt(p - 1)), context).toBe(false);
          }
        }
      }
    }
  });
});
