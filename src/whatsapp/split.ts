/**
 * WhatsApp text bodies are at most 4096 characters, counted as UTF-16 units (WHATSAPP.md §5).
 * Longer replies are split at a paragraph, line or word break where one is near, and never
 * inside a character: grapheme clusters (emoji with modifiers, flags) stay whole.
 *
 * A reply job runs this on the event loop, where a worker that is busy renews no BullMQ lock and
 * answers no one, so it is linear and cheap: each cut looks back a bounded distance for
 * whitespace and asks Intl.Segmenter about a short window around the cut only. Never the whole
 * text: iterating its segments takes quadratic time on Node 20 (16 000 units, 70 ms), and even on
 * Node 24, where it is linear, one pass over 100 000 units costs many times the whole split.
 */
export const WHATSAPP_TEXT_LIMIT = 4096;

const segmenter = new Intl.Segmenter(undefined, { granularity: "grapheme" });

/** A chunk of the text ends at `end` (whitespace trimmed) and the next one starts at `next`. */
interface Cut {
  end: number;
  next: number;
}

/**
 * The text's parts, in order, each at most `limit` units; the whitespace at each cut is dropped.
 * A text within the limit comes back as it is, alone.
 */
export function splitForWhatsApp(text: string, limit = WHATSAPP_TEXT_LIMIT): string[] {
  if (text.length <= limit) return [text];
  if (!Number.isInteger(limit) || limit < 2) throw new RangeError(`limit must be a whole number of at least 2 UTF-16 units (a surrogate pair), not ${limit}`);
  const chunks: string[] = [];
  let start = 0;
  while (text.length - start > limit) {
    const { end, next } = nextCut(text, start, limit);
    if (end > start) chunks.push(text.slice(start, end));
    start = next;
  }
  if (start < text.length) chunks.push(text.slice(start));
  return chunks;
}

/** The cut of the chunk that starts at `start`, a cluster boundary, in a rest longer than `limit`. */
function nextCut(text: string, start: number, limit: number): Cut {
  const edge = start + limit; // the first unit that does not fit; it exists
  // After whitespace, when the break keeps at least half the chunk. A whitespace that a mark
  // follows is no break (the mark is its cluster's), so only a few are tried before giving up.
  let tries = 8;
  for (let i = edge; i >= start + Math.floor(limit / 2) && tries > 0; i--) {
    if (!isWhitespace(text.charCodeAt(i))) continue;
    tries--;
    if (!isBoundary(text, i + 1, start)) continue;
    const cut = trimmed(text, start, i + 1);
    if (cut.end - start <= limit) return cut; // whitespace at the edge itself fits only once trimmed
  }
  const at = clusterStart(text, edge, start);
  if (at > start) return trimmed(text, start, at);
  // One cluster longer than the whole chunk (a base under thousands of marks): it has to be cut,
  // but never between the two halves of a surrogate pair.
  const inPair = isHighSurrogate(text.charCodeAt(edge - 1)) && isLowSurrogate(text.charCodeAt(edge));
  const forced = inPair ? edge - 1 : edge;
  return { end: forced, next: forced };
}

/**
 * Trims the whitespace on both sides of `at`, a cluster boundary, except whitespace that shares a
 * cluster with what it touches: a space after a prepended mark, or before a combining one.
 */
function trimmed(text: string, start: number, at: number): Cut {
  let end = at;
  while (end > start && isWhitespace(text.charCodeAt(end - 1))) end--;
  while (end < at && !isBoundary(text, end, start)) end++;
  let next = at;
  while (next < text.length && isWhitespace(text.charCodeAt(next))) next++;
  if (!isBoundary(text, next, at)) next = clusterStart(text, next, at);
  return { end, next };
}

/** Whether a cluster starts at `p`, knowing one starts at `floor` ≤ p. */
function isBoundary(text: string, p: number, floor: number): boolean {
  return p <= floor || p >= text.length || clusterStart(text, p, floor) === p;
}

/**
 * The start of the grapheme cluster holding the unit at `p`, knowing one starts at `floor` ≤ p.
 * Intl.Segmenter sees a window from before `p` to the end of its code point (a boundary depends
 * on nothing after it). A window that starts inside a cluster may report one boundary that is not
 * there, its first (an emoji ZWJ sequence or an Indic conjunct cut off from its base): that one is
 * not trusted, and the window widens until the answer lies past it or the window starts at `floor`.
 */
function clusterStart(text: string, p: number, floor: number): number {
  const before = text.charCodeAt(p - 1);
  const at = text.charCodeAt(p);
  // ASCII has no marks, joiners or emoji: a boundary between any two of its units but CR LF (UAX #29 GB3–GB5, GB999).
  if (p > floor && before < 0x80 && at < 0x80 && !(before === 13 && at === 10)) return p;
  const hi = Math.min(text.length, p + (isHighSurrogate(at) ? 2 : 1));
  for (let reach = 32; ; reach *= 4) {
    let lo = Math.max(floor, p - reach);
    if (lo > floor && isLowSurrogate(text.charCodeAt(lo))) lo--;
    lo = pairingStart(text, lo, floor);
    const segments = segmenter.segment(text.slice(lo, hi));
    // containing() asks ICU for the boundaries around one index, without iterating from the start.
    const found = lo + segments.containing(p - lo)!.index;
    if (lo === floor || found > lo + segments.containing(0)!.segment.length) return found;
  }
}

/**
 * Regional indicators pair into flags from the start of their run (GB12, GB13): a window that
 * starts inside a run would pair them wrongly, so it starts an even number of flags into the run.
 */
function pairingStart(text: string, lo: number, floor: number): number {
  if (!(lo - 2 >= floor && isRegionalIndicator(text, lo) && isRegionalIndicator(text, lo - 2))) return lo;
  let run = lo - 2;
  while (run - 2 >= floor && isRegionalIndicator(text, run - 2)) run -= 2;
  return lo - ((lo - run) % 4);
}

/** U+1F1E6..U+1F1FF, as UTF-16: D83C DDE6..DDFF. */
function isRegionalIndicator(text: string, i: number): boolean {
  const low = text.charCodeAt(i + 1);
  return text.charCodeAt(i) === 0xd83c && low >= 0xdde6 && low <= 0xddff;
}

const isHighSurrogate = (unit: number) => unit >= 0xd800 && unit <= 0xdbff;
const isLowSurrogate = (unit: number) => unit >= 0xdc00 && unit <= 0xdfff;

/** Exactly what String.prototype.trim removes (WhiteSpace and LineTerminator), unit by unit. */
function isWhitespace(unit: number): boolean {
  if (unit <= 0x20) return unit === 0x20 || (unit >= 0x09 && unit <= 0x0d);
  if (unit < 0xa0) return false;
  return (
    unit === 0xa0 ||
    unit === 0x1680 ||
    (unit >= 0x2000 && unit <= 0x200a) ||
    unit === 0x2028 ||
    unit === 0x2029 ||
    unit === 0x202f ||
    unit === 0x205f ||
    unit === 0x3000 ||
    unit === 0xfeff
  );
}
