import type { AnswerBlock, ClaudeRequest } from "./messages-api.ts";

/**
 * What the offline responder does with the business's knowledge and tools, as Claude would:
 * it reads a tool's result and answers from it, looks an order up when the customer gives its
 * id, hands a complaint to a person, and cites the sentence of the knowledge that answers the
 * customer's words (a `char_location` in a document, a `search_result_location` in a passage).
 * Simple matching, not understanding: enough to show the whole path with no Claude at all.
 */

interface Block {
  type?: string;
  text?: string;
  title?: string;
  source?: { type?: string; data?: string } | string;
  content?: unknown;
  citations?: { enabled?: boolean } | unknown[] | null;
  tool_use_id?: string;
  is_error?: boolean;
  name?: string;
}

export type Grounded = { content: AnswerBlock[]; did: string };

const ORDER_ID = /\b([A-Z]\d{4})\b/i;
const COMPLAINT = /\b(complain\w*|manager|damaged|broken|faulty|angry|unacceptable)\b/i;
const STOP = new Set([
  "what",
  "when",
  "where",
  "which",
  "your",
  "have",
  "with",
  "does",
  "that",
  "this",
  "there",
  "about",
  "could",
  "would",
  "please",
  "hello",
  "thanks",
  "they",
  "them",
  "from",
  "will",
  "want",
]);

const blocksOf = (content: unknown): Block[] =>
  Array.isArray(content) ? (content as Block[]) : typeof content === "string" ? [{ type: "text", text: content }] : [];

/** The knowledge is the business's, not the customer's: documents with citations on, and search results. */
export const isKnowledge = (block: Block) => block.type === "search_result" || (block.type === "document" && isCited(block));
const isCited = (block: Block) => !!block.citations && !Array.isArray(block.citations) && block.citations.enabled === true;

const offers = (request: ClaudeRequest, name: string) => Array.isArray(request.tools) && (request.tools as Block[]).some((t) => t.name === name);

/** The user message the customer's words are in: the last one that is not only tool results. */
export function customerBlocks(request: ClaudeRequest): Block[] {
  const message = request.messages.findLast((m) => m.role === "user" && blocksOf(m.content).some((b) => b.type !== "tool_result"));
  return blocksOf(message?.content).filter((b) => !isKnowledge(b));
}

/** A grounded answer to `request` after `opening` (the responder's first lines), or undefined when none applies. */
export function groundedAnswer(request: ClaudeRequest, words: string, opening: string): Grounded | undefined {
  const last = request.messages.at(-1);
  const results = last?.role === "user" ? blocksOf(last.content).filter((b) => b.type === "tool_result") : [];
  if (results.length > 0)
    return { content: [{ type: "text", text: `${opening}\n\n${results.map(summarise).join("\n")}` }], did: "answered from the tool's result" };

  const order = ORDER_ID.exec(words)?.[1]?.toUpperCase();
  if (order && offers(request, "lookup_order"))
    return {
      content: [
        { type: "text", text: `${opening}\n\nLet me look that order up.` },
        { type: "tool_use", name: "lookup_order", input: { orderId: order } },
      ],
      did: `looked order ${order} up with lookup_order`,
    };
  if (COMPLAINT.test(words) && offers(request, "handoff_to_human"))
    return {
      content: [
        {
          type: "tool_use",
          name: "handoff_to_human",
          input: { reason: `The customer has a complaint the offline responder cannot resolve: “${words.slice(0, 120)}”` },
        },
      ],
      did: "handed the customer to a person",
    };
  const cited = citeKnowledge(request, words);
  if (cited) return { content: [{ type: "text", text: `${opening}\n\n` }, cited.block], did: `cited ${cited.title}` };
  return undefined;
}

/** A tool's result in a sentence for the customer. */
function summarise(result: Block): string {
  const text = blocksOf(result.content)
    .map((b) => b.text ?? "")
    .join("");
  if (result.is_error) return `I could not get that from the shop's system just now (${text.slice(0, 160)}). Write "human" and a person will check it for you.`;
  try {
    const answer = JSON.parse(text) as { orderId?: string; status?: string; items?: string[]; eta?: string; booked?: boolean; id?: string };
    if (answer.orderId)
      return `Order ${answer.orderId} is ${answer.status}${answer.items ? ` (${answer.items.join(", ")})` : ""}${answer.eta ? `; it arrives in ${answer.eta}` : ""}.`;
    if (answer.booked) return `Booked: fitting ${answer.id}.`;
  } catch {
    // not JSON: said as it came
  }
  return `The shop's system said: ${text.slice(0, 300)}`;
}

/** The sentence of the knowledge sharing most of the customer's words, cited where it stands. */
function citeKnowledge(request: ClaudeRequest, words: string): { block: AnswerBlock; title: string } | undefined {
  // Stems, roughly: "opening" finds "open", "hours" finds "hour".
  const asked = [...new Set(words.toLowerCase().match(/\p{L}{4,}/gu) ?? [])].filter((w) => !STOP.has(w)).map((w) => w.replace(/(ing|ed|es|s)$/, ""));
  if (asked.length === 0) return undefined;
  const documents = request.messages.flatMap((m) => blocksOf(m.content)).filter((b) => b.type === "document");
  const passages = customerMessageKnowledge(request);
  let best: { score: number; block: AnswerBlock; title: string } | undefined;
  const consider = (text: string, cite: (sentence: string, start: number) => unknown, title: string) => {
    for (const match of text.matchAll(/[^.!?\n]+[.!?]?/g)) {
      const sentence = match[0].trim();
      const lower = sentence.toLowerCase();
      // The sentence's own words count most; the file's name tells which file a question is about.
      const score = 2 * asked.filter((w) => lower.includes(w)).length + asked.filter((w) => title.toLowerCase().includes(w)).length;
      if (sentence.length < 12 || sentence.startsWith("#") || score < 2 || score <= (best?.score ?? 0)) continue;
      const start = match.index + match[0].indexOf(sentence);
      best = { score, title, block: { type: "text", text: sentence, citations: [cite(sentence, start)] } };
    }
  };
  documents.forEach((document, index) => {
    const source = typeof document.source === "object" ? document.source : undefined;
    if (!isCited(document) || source?.type !== "text" || !source.data) return;
    const title = document.title ?? "document";
    consider(
      source.data,
      (sentence, start) => ({
        type: "char_location",
        cited_text: sentence,
        document_index: index,
        document_title: title,
        start_char_index: start,
        end_char_index: start + sentence.length,
      }),
      title,
    );
  });
  passages.forEach((passage, index) => {
    const text = blocksOf(passage.content)
      .map((b) => b.text ?? "")
      .join("\n");
    const source = typeof passage.source === "string" ? passage.source : "passage";
    consider(
      text,
      (sentence) => ({
        type: "search_result_location",
        cited_text: sentence,
        source,
        title: passage.title ?? null,
        search_result_index: index,
        start_block_index: 0,
        end_block_index: 0,
      }),
      source,
    );
  });
  return best;
}

/** The passages that came with the customer's words (search_result blocks). */
function customerMessageKnowledge(request: ClaudeRequest): Block[] {
  const message = request.messages.findLast((m) => m.role === "user" && blocksOf(m.content).some((b) => b.type !== "tool_result"));
  return blocksOf(message?.content).filter((b) => b.type === "search_result");
}
