import { extname } from "node:path";

/**
 * Which files are knowledge, by their extension: kept apart from reading them (extract.ts,
 * which loads PDF.js), so start-up can check a folder without loading it.
 */

/** How a knowledge file is read, by its extension; anything else is not knowledge. */
export type KnowledgeFormat = "markdown" | "text" | "pdf";

const FORMATS: Readonly<Record<string, KnowledgeFormat>> = {
  ".md": "markdown",
  ".markdown": "markdown",
  ".txt": "text",
  ".pdf": "pdf",
};

export function formatOf(path: string): KnowledgeFormat | undefined {
  return FORMATS[extname(path).toLowerCase()];
}
