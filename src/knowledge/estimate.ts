import type { ExtractedContent } from "./extract.ts";

/**
 * Estimates err high: knowledge that does not fit is searched instead of sent whole, which
 * costs a little relevance; knowledge that overflows the budget costs every reply's tokens,
 * or the request itself.
 */

/**
 * Characters of Latin script (ASCII, Latin-1, Latin Extended) per token. Claude's older
 * tokenizers take about four; newer ones count some 30% more tokens for the same text.
 */
const LATIN_CHARACTERS_PER_TOKEN = 3.5;
/** Past Latin Extended-B: Cyrillic, Greek, Arabic, CJK... take up to a token a character, or more. */
const LAST_LATIN_CODE_POINT = 0x024f;

/**
 * Claude sees every PDF page twice: as its extracted text and as an image of the page. The
 * image costs about 1 500 tokens a page (Anthropic's PDF support guide: 1 500–3 000 a page,
 * text included), on top of the text's own estimate.
 */
export const PDF_PAGE_IMAGE_TOKENS = 1_500;

export function estimateTextTokens(text: string): number {
  let latin = 0;
  let other = 0;
  for (const character of text) {
    if (character.codePointAt(0)! <= LAST_LATIN_CODE_POINT) latin++;
    else other++;
  }
  return Math.ceil(latin / LATIN_CHARACTERS_PER_TOKEN + other);
}

export function estimateTokens(content: ExtractedContent): number {
  if (content.format !== "pdf") return estimateTextTokens(content.text);
  return content.pages.reduce((sum, page) => sum + estimateTextTokens(page) + PDF_PAGE_IMAGE_TOKENS, 0);
}
