import { extractText, getDocumentProxy } from "unpdf";
import type { KnowledgeFormat } from "./formats.ts";

/** What a file says: its text, or a PDF's text page by page (a page may be empty: a scan). */
export type ExtractedContent = { format: "markdown" | "text"; text: string } | { format: "pdf"; pages: string[] };

/** A file that cannot be read as its extension says; the message names the problem, never the content. */
export class UnreadableKnowledge extends Error {
  override readonly name = "UnreadableKnowledge";
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

export async function extractContent(format: KnowledgeFormat, bytes: Buffer): Promise<ExtractedContent> {
  if (format === "pdf") return { format, pages: await extractPdfPages(bytes) };
  try {
    return { format, text: utf8.decode(bytes) };
  } catch {
    // Guessing another encoding would show Claude (and the customer) mojibake as if it were the business's words.
    throw new UnreadableKnowledge("not valid UTF-8");
  }
}

async function extractPdfPages(bytes: Buffer): Promise<string[]> {
  let pdf: Awaited<ReturnType<typeof getDocumentProxy>>;
  try {
    // PDF.js takes ownership of (detaches) the buffer it is given: hand it a copy, the bytes are sent to Claude as they are.
    // Verbosity 0: PDF.js writes its warnings about damaged files to the console, outside our logger.
    pdf = await getDocumentProxy(new Uint8Array(bytes), { verbosity: 0 });
  } catch (error) {
    throw new UnreadableKnowledge(`not a readable PDF: ${(error as Error).message}`);
  }
  try {
    const { text } = await extractText(pdf, { mergePages: false });
    return text;
  } catch (error) {
    throw new UnreadableKnowledge(`PDF text could not be extracted: ${(error as Error).message}`);
  } finally {
    // Frees what PDF.js keeps of the document; a knowledge reader runs for the life of the worker.
    await pdf.loadingTask.destroy();
  }
}
