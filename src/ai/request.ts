import type Anthropic from "@anthropic-ai/sdk";
import { PDF_PAGE_IMAGE_TOKENS } from "../knowledge/estimate.ts";
import type { ToolDefinition } from "../tools/definitions.ts";
import { type CacheTtl, cacheControl, estimateTokens, placeBreakpoints } from "./cache-breakpoints.ts";

/**
 * What one Claude call of a reply is shown, in the order Anthropic caches it: the business's
 * tools, the system prompt and the business's knowledge (the stable prefix, the same for every
 * reply of the number: cached for an hour), then the conversation's history (cached for five
 * minutes, for the customer's next message), then the customer's words and, in a tool loop,
 * the steps taken so far. Anthropic caches nothing below a model's minimum prefix, silently: a
 * breakpoint is placed only where the prefix before it passes that minimum.
 */

export interface ChatTurn {
  role: "user" | "assistant";
  text: string;
  /** The end of the history (history.ts marks it): cached for the customer's next message where it passes the model's minimum. */
  cacheBreakpoint?: boolean;
  /** An image or PDF the customer sent, shown to Claude before the turn's text. */
  media?: { kind: "image" | "pdf"; mimeType: string; data: Buffer };
}

const IMAGE_TYPES = new Set(["image/jpeg", "image/png", "image/gif", "image/webp"]);

function mediaBlock(media: NonNullable<ChatTurn["media"]>): Anthropic.ContentBlockParam | undefined {
  const data = media.data.toString("base64");
  if (media.kind === "pdf") return { type: "document", source: { type: "base64", media_type: "application/pdf", data } };
  const mimeType = media.mimeType.split(";")[0]!.trim();
  if (!IMAGE_TYPES.has(mimeType)) return undefined;
  return { type: "image", source: { type: "base64", media_type: mimeType as "image/jpeg" | "image/png" | "image/gif" | "image/webp", data } };
}

/** The business's knowledge as Claude reads it (src/knowledge/): whole files, or the passages that match the customer's words. */
export type ClaudeKnowledge =
  | { kind: "documents"; documents: { title: string; mediaType: "text/plain" | "application/pdf"; text?: string | undefined; base64?: string | undefined }[] }
  | { kind: "passages"; passages: { id: string; source: string; title: string; text: string }[] };

/** A content block as Claude answered it, kept whole (thinking blocks must go back unchanged). */
export type ContentBlockJson = { type: string; [key: string]: unknown };

/** What the business's endpoint answered a tool call, for Claude to read. */
export interface ToolResult {
  toolUseId: string;
  text: string;
  isError: boolean;
}

export interface ClaudeAsk {
  systemPrompt: string;
  knowledge?: ClaudeKnowledge | undefined;
  tools?: readonly ToolDefinition[] | undefined;
  /** "none" asks for an answer in words: the tool loop's bound was reached; `{ tool }` makes Claude call that one (an eval's judge). */
  toolChoice?: "auto" | "none" | { tool: string } | undefined;
  /** History, then the messages being answered (src/replies/history.ts). */
  turns: ChatTurn[];
  /** This reply's calls so far: what Claude answered, then what its tools answered. */
  steps?: readonly { content: readonly ContentBlockJson[]; results: readonly ToolResult[] }[] | undefined;
}

/**
 * Tokens a knowledge document adds to the prefix. A PDF's pages are not counted here: Claude
 * reads each page as an image too, about 1 500 tokens, and a page is some 3 KB of file at worst.
 */
function documentTokens(model: string, document: Extract<ClaudeKnowledge, { kind: "documents" }>["documents"][number]): number {
  if (document.text !== undefined) return estimateTokens(model, document.text);
  return Math.ceil(((document.base64?.length ?? 0) * 0.75) / 3000) * PDF_PAGE_IMAGE_TOKENS;
}

/** What Anthropic counts for an image at most: a larger one is scaled down to about 1.15 megapixels first. */
const IMAGE_TOKENS_AT_MOST = 1600;

/**
 * The most tokens the prompt of this call can count, for reserving its greatest cost before
 * it is made (the daily budget): every token is at least one byte of the request's text, so
 * its UTF-8 size bounds them; an image adds at most IMAGE_TOKENS_AT_MOST, a PDF each page's
 * image and its 3 KB of text.
 */
export function promptTokensAtMost(model: string, ask: ClaudeAsk): number {
  let media = 0;
  const text = JSON.stringify(assembleRequest(model, ask), function (this: Record<string, unknown>, key, value) {
    if (key !== "data" || this.type !== "base64" || typeof value !== "string") return value;
    const pages = Math.ceil((value.length * 0.75) / 3000);
    media += this.media_type === "application/pdf" ? pages * (PDF_PAGE_IMAGE_TOKENS + 3000) : IMAGE_TOKENS_AT_MOST;
    return "";
  });
  return Buffer.byteLength(text) + media;
}

function documentBlock(document: Extract<ClaudeKnowledge, { kind: "documents" }>["documents"][number]): Anthropic.DocumentBlockParam {
  const source: Anthropic.DocumentBlockParam["source"] =
    document.mediaType === "application/pdf"
      ? { type: "base64", media_type: "application/pdf", data: document.base64 ?? "" }
      : { type: "text", media_type: "text/plain", data: document.text ?? "" };
  return { type: "document", source, title: document.title, citations: { enabled: true } };
}

function searchResultBlock(passage: Extract<ClaudeKnowledge, { kind: "passages" }>["passages"][number]): Anthropic.SearchResultBlockParam {
  return {
    type: "search_result",
    source: passage.source,
    title: passage.title,
    content: [{ type: "text", text: passage.text }],
    citations: { enabled: true },
  };
}

type Cacheable = { cache_control?: Anthropic.CacheControlEphemeral | null };

/**
 * The request's body for `model`, but for the settings the client adds (max_tokens). The
 * stable prefix ends in a one-hour breakpoint where it passes the model's minimum; the
 * history's end in a five-minute one where the prefix up to there does (Anthropic wants the
 * longer TTL first).
 */
export function assembleRequest(
  model: string,
  ask: ClaudeAsk,
): Pick<Anthropic.MessageCreateParamsNonStreaming, "system" | "messages" | "tools" | "tool_choice"> {
  const tools: Anthropic.Tool[] = (ask.tools ?? []).map((t) => ({
    name: t.name,
    description: t.description,
    input_schema: t.input_schema as Anthropic.Tool.InputSchema,
  }));
  let prefix = tools.reduce((n, t) => n + estimateTokens(model, JSON.stringify(t)), 0) + estimateTokens(model, ask.systemPrompt);
  const system: Anthropic.TextBlockParam[] = [{ type: "text", text: ask.systemPrompt }];

  const messages = toAlternatingMessages(ask.turns) as { role: "user" | "assistant"; content: Anthropic.ContentBlockParam[] }[];
  if (messages.length === 0 || messages[0]!.role !== "user") messages.unshift({ role: "user", content: [] });

  // The stable prefix's end: the last knowledge document, else the system prompt.
  let stableEnd: Cacheable = system[0]!;
  if (ask.knowledge?.kind === "documents" && ask.knowledge.documents.length > 0) {
    const documents = ask.knowledge.documents.map(documentBlock);
    messages[0]!.content.unshift(...documents);
    prefix += ask.knowledge.documents.reduce((n, d) => n + documentTokens(model, d), 0);
    stableEnd = documents.at(-1)!;
  }
  const candidates: { block: Cacheable; prefixTokens: number; ttl: CacheTtl }[] = [{ block: stableEnd, prefixTokens: prefix, ttl: "1h" }];
  // The history's end: the turn history.ts marked (the last one before the customer's words).
  const marked = ask.turns.findLastIndex((t) => t.cacheBreakpoint);
  const historyEnd = marked >= 0 ? blockOfTurn(messages, marked) : undefined;
  if (historyEnd) {
    const historyTokens = ask.turns.slice(0, marked + 1).reduce((n, t) => n + estimateTokens(model, t.text), 0);
    candidates.push({ block: historyEnd, prefixTokens: prefix + historyTokens, ttl: "5m" });
  }
  for (const { index, ttl } of placeBreakpoints(model, candidates)) candidates[index]!.block.cache_control = cacheControl(ttl);

  // Passages match the customer's latest words: they go with them, after everything cached.
  if (ask.knowledge?.kind === "passages" && ask.knowledge.passages.length > 0) {
    const last = messages.findLastIndex((m) => m.role === "user");
    messages[last]!.content.unshift(...ask.knowledge.passages.map(searchResultBlock));
  }

  for (const step of ask.steps ?? []) {
    push(messages, "assistant", step.content as unknown as Anthropic.ContentBlockParam[]);
    if (step.results.length > 0) {
      push(
        messages,
        "user",
        step.results.map((r) => ({ type: "tool_result", tool_use_id: r.toolUseId, content: r.text, is_error: r.isError }) as Anthropic.ToolResultBlockParam),
      );
    }
  }

  return {
    system,
    messages,
    ...(tools.length > 0
      ? { tools, tool_choice: typeof ask.toolChoice === "object" ? { type: "tool", name: ask.toolChoice.tool } : { type: ask.toolChoice ?? "auto" } }
      : {}),
  };
}

/** Consecutive content of one role is one message (a paused turn continues Claude's own). */
function push(
  messages: { role: "user" | "assistant"; content: Anthropic.ContentBlockParam[] }[],
  role: "user" | "assistant",
  content: Anthropic.ContentBlockParam[],
): void {
  const last = messages.at(-1);
  if (last?.role === role) last.content.push(...content);
  else messages.push({ role, content: [...content] });
}

/** The text block toAlternatingMessages made of turn `index`: one text block per turn, in order (media blocks are not text). */
function blockOfTurn(messages: { content: Anthropic.ContentBlockParam[] }[], index: number): Cacheable | undefined {
  return messages.flatMap((m) => m.content.filter((b): b is Anthropic.TextBlockParam => b.type === "text"))[index];
}

/**
 * Claude wants alternating roles starting with the user: consecutive turns of one role
 * become text blocks of one message. History that opens with the business speaking (a person
 * wrote first from the WhatsApp Business app, or the window slid past the customer's first
 * message) is kept as a note at the start of the first user message.
 */
export function toAlternatingMessages(turns: ChatTurn[]): Anthropic.MessageParam[] {
  const out: { role: "user" | "assistant"; content: Anthropic.ContentBlockParam[] }[] = [];
  for (const turn of turns) {
    const opening = out.length === 0 && turn.role === "assistant";
    const words = opening ? `[Earlier in this chat, the business wrote: "${turn.text}"]` : turn.text;
    const text: Anthropic.TextBlockParam = { type: "text", text: words };
    const media = turn.media ? mediaBlock(turn.media) : undefined;
    const blocks = media ? [media, text] : [text];
    const role = opening ? "user" : turn.role;
    const last = out.at(-1);
    if (last && last.role === role) last.content.push(...blocks);
    else out.push({ role, content: blocks });
  }
  return out;
}
