import type { ExtractedContent } from "./extract.ts";

/**
 * Splits a knowledge file into passages a search can find and Claude can cite on their own:
 * Markdown by its headings, a PDF by its pages, then by paragraphs, each passage aiming at
 * 150–400 words and never cutting a word.
 */

export interface PassageDraft {
  /** The file's path relative to its knowledgeDir. */
  source: string;
  /** The file's path, and the nearest Markdown heading or the PDF page: what a person reading the citation looks for. */
  title: string;
  text: string;
}

export const PASSAGE_MAX_WORDS = 400;
/** A long paragraph is cut at a sentence or line end once a passage has this many words. */
export const PASSAGE_MIN_WORDS = 150;
/**
 * Also a bound on characters: text without spaces (Chinese, Japanese, Thai) is one "word" to
 * a whitespace split, and a passage of it would otherwise have no end.
 */
export const PASSAGE_MAX_CHARACTERS = 4_000;

interface Section {
  /** A heading or "page N"; none for plain text and what a Markdown file says before its first heading. */
  label: string | undefined;
  body: string;
}

export function splitIntoPassages(source: string, content: ExtractedContent): PassageDraft[] {
  return sectionsOf(content).flatMap(({ label, body }) => {
    const title = label ? `${source} › ${label}` : source;
    return packParagraphs(paragraphsOf(body)).map((text) => ({ source, title, text }));
  });
}

function sectionsOf(content: ExtractedContent): Section[] {
  if (content.format === "pdf") return content.pages.map((page, index) => ({ label: `page ${index + 1}`, body: page }));
  if (content.format === "markdown") return markdownSections(content.text);
  return [{ label: undefined, body: content.text }];
}

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const ATX_HEADING = /^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const SETEXT_UNDERLINE = /^ {0,3}(?:=+|-+)[ \t]*$/;

/**
 * Markdown's sections by ATX headings (`## Returns`) and by setext headings (a one-line
 * paragraph underlined with `===` or `---`); a `#` inside a fenced code block is code.
 */
function markdownSections(text: string): Section[] {
  const sections: Section[] = [];
  let label: string | undefined;
  let lines: string[] = [];
  let fence: string | undefined;
  const startSection = (heading: string) => {
    sections.push({ label, body: lines.join("\n") });
    label = heading;
    lines = [];
  };
  for (const line of text.split(/\r?\n/)) {
    const fenceMark = FENCE.exec(line)?.[1];
    if (fence !== undefined) {
      if (fenceMark !== undefined && fenceMark[0] === fence[0] && fenceMark.length >= fence.length) fence = undefined;
      lines.push(line);
      continue;
    }
    if (fenceMark) {
      fence = fenceMark;
      lines.push(line);
      continue;
    }
    const atx = ATX_HEADING.exec(line);
    if (atx) {
      startSection(atx[1]?.trim() ?? "");
      continue;
    }
    const previous = lines.at(-1);
    const beforePrevious = lines.at(-2);
    if (SETEXT_UNDERLINE.test(line) && previous?.trim() && !beforePrevious?.trim()) {
      lines.pop();
      startSection(previous.trim());
      continue;
    }
    lines.push(line);
  }
  sections.push({ label, body: lines.join("\n") });
  // An empty heading ("#") names nothing; the heading before it still does.
  return sections.map((section, index) => ({ ...section, label: section.label || sections[index - 1]?.label }));
}

/** Paragraphs are separated by blank lines, except inside a fenced code block, which stays whole. */
function paragraphsOf(body: string): string[] {
  const paragraphs: string[] = [];
  let lines: string[] = [];
  let fence: string | undefined;
  const endParagraph = () => {
    const paragraph = lines.join("\n").trim();
    if (paragraph) paragraphs.push(paragraph);
    lines = [];
  };
  for (const line of body.split(/\r?\n/)) {
    const fenceMark = FENCE.exec(line)?.[1];
    if (fence !== undefined) {
      if (fenceMark !== undefined && fenceMark[0] === fence[0] && fenceMark.length >= fence.length) fence = undefined;
    } else if (fenceMark) {
      fence = fenceMark;
    } else if (!line.trim()) {
      endParagraph();
      continue;
    }
    lines.push(line);
  }
  endParagraph();
  return paragraphs;
}

function wordCount(text: string): number {
  return text.match(/\S+/g)?.length ?? 0;
}

/** Whole paragraphs, several to a passage while they fit; a paragraph too long for one is cut first. */
function packParagraphs(paragraphs: string[]): string[] {
  const passages: string[] = [];
  let current = "";
  let currentWords = 0;
  for (const piece of paragraphs.flatMap(cutLongParagraph)) {
    const words = wordCount(piece);
    const fits = currentWords + words <= PASSAGE_MAX_WORDS && current.length + 2 + piece.length <= PASSAGE_MAX_CHARACTERS;
    if (current && !fits) {
      passages.push(current);
      current = "";
      currentWords = 0;
    }
    current = current ? `${current}\n\n${piece}` : piece;
    currentWords += words;
  }
  if (current) passages.push(current);
  return passages;
}

/** A word that ends a sentence or a line: where a long paragraph is best cut. */
const SENTENCE_END = /[.!?…。！？;:]["'”’»)\]]*\s*$|\n\s*$/;

/**
 * A paragraph over the bounds, cut between words: at the last sentence or line end past
 * PASSAGE_MIN_WORDS, else wherever the bound falls. Whitespace is kept as written.
 */
function cutLongParagraph(paragraph: string): string[] {
  if (wordCount(paragraph) <= PASSAGE_MAX_WORDS && paragraph.length <= PASSAGE_MAX_CHARACTERS) return [paragraph];
  // Each word with the whitespace after it, so joining a run of them gives the text back.
  const words = paragraph.match(/\S+\s*/g) ?? [];
  const pieces: string[] = [];
  let start = 0;
  let characters = 0;
  let bestCut = -1;
  const cutBefore = (end: number) => {
    const piece = words.slice(start, end).join("").trim();
    if (piece) pieces.push(piece);
    start = end;
    characters = 0;
    bestCut = -1;
  };
  for (let index = 0; index < words.length; index++) {
    const word = words[index]!;
    if (word.trim().length > PASSAGE_MAX_CHARACTERS) {
      cutBefore(index);
      pieces.push(...cutByCharacters(word.trim()));
      start = index + 1;
      continue;
    }
    if (index - start + 1 > PASSAGE_MAX_WORDS || characters + word.length > PASSAGE_MAX_CHARACTERS) {
      cutBefore(bestCut >= start ? bestCut + 1 : index);
      // The words between the cut and this one start the next piece.
      characters = words.slice(start, index).join("").length;
    }
    characters += word.length;
    if (index - start + 1 >= PASSAGE_MIN_WORDS && SENTENCE_END.test(word)) bestCut = index;
  }
  cutBefore(words.length);
  return pieces;
}

/** Text with no whitespace to cut at: cut between characters (never inside one). */
function cutByCharacters(text: string): string[] {
  const characters = Array.from(text);
  const pieces: string[] = [];
  for (let index = 0; index < characters.length; index += PASSAGE_MAX_CHARACTERS) {
    pieces.push(characters.slice(index, index + PASSAGE_MAX_CHARACTERS).join(""));
  }
  return pieces;
}
