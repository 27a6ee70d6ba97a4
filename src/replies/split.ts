/**
 * WhatsApp text bodies are at most 4096 characters, counted as UTF-16 units (WHATSAPP.md §5).
 * Longer replies are split at a paragraph, line or word break where one is near, and never
 * inside a character: grapheme clusters (emoji with modifiers, flags) stay whole.
 */
export const WHATSAPP_TEXT_LIMIT = 4096;

const segmenter = new Intl.Segmenter(undefined, { granularity: "grapheme" });

export function splitForWhatsApp(text: string, limit = WHATSAPP_TEXT_LIMIT): string[] {
  if (text.length <= limit) return [text];
  const chunks: string[] = [];
  let current = "";
  let lastBreak = -1; // index in `current` just after the last whitespace
  for (const { segment } of segmenter.segment(text)) {
    if (current.length + segment.length > limit) {
      // Break at whitespace when it keeps at least half the chunk; else cut between graphemes.
      const cut = lastBreak > limit / 2 ? lastBreak : current.length;
      chunks.push(current.slice(0, cut).trimEnd());
      current = current.slice(cut).trimStart();
      lastBreak = Math.max(...[" ", "\n", "\t"].map((ws) => current.lastIndexOf(ws))) + 1 || -1;
    }
    current += segment;
    if (/\s/.test(segment)) lastBreak = current.length;
  }
  if (current.trim()) chunks.push(current);
  return chunks.filter((c) => c.length > 0);
}
