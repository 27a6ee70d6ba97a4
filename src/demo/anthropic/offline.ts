import { type Block, type ClaudeAnswer, type ClaudeRequest, MessagesApiServer } from "./messages-api.ts";

/**
 * Claude's stand-in when the demo runs without ANTHROPIC_API_KEY: the real Claude client
 * reaches it over HTTP (ANTHROPIC_BASE_URL), so the whole path runs as with Claude, and
 * it answers like a modest shop assistant that repeats what it was shown. Every answer
 * starts with OFFLINE_PREFIX, so nobody takes it for Claude. Told to, it fails as
 * Anthropic does on a bad day: 529 (overloaded, retried) or 400 (invalid, dead-lettered).
 */

export const OFFLINE_PREFIX = "(offline demo) ";

export type ClaudeFault = "529" | "400";

export interface OfflineCall {
  /** The HTTP status answered. */
  answer: number;
  /** What the customer's latest words were, shortened, for the log. */
  asked: string;
}

export class OfflineClaude extends MessagesApiServer {
  /** `faultOf` says, at each request, whether to fail and how (the page's switch). */
  constructor(
    private readonly faultOf: () => ClaudeFault | undefined = () => undefined,
    private readonly observe: (call: OfflineCall) => void = () => undefined,
    onError?: (error: unknown) => void,
  ) {
    super(onError);
  }

  protected override respond(request: ClaudeRequest): ClaudeAnswer {
    const asked = shorten(latestWords(request).join(" / "), 60);
    const fault = this.faultOf();
    if (fault) {
      this.observe({ answer: Number(fault), asked });
      return { status: Number(fault) };
    }
    this.observe({ answer: 200, asked });
    return { text: offlineReply(request) };
  }
}

interface MediaBlock {
  type: "image" | "document";
  source?: { media_type?: string; data?: string };
}

/** The blocks of the last user message: the customer's latest words (a burst is several). */
function latestBlocks(request: ClaudeRequest): unknown[] {
  const last = request.messages.findLast((m) => m.role === "user");
  if (!last) return [];
  return typeof last.content === "string" ? [{ type: "text", text: last.content }] : Array.isArray(last.content) ? last.content : [];
}

function latestWords(request: ClaudeRequest): string[] {
  return latestBlocks(request)
    .filter((b): b is Block => typeof (b as Block).text === "string")
    .map((b) => b.text.trim())
    .filter(Boolean);
}

const shorten = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

const kilobytes = (base64: string | undefined) => `${Math.max(1, Math.round(((base64?.length ?? 0) * 3) / 4 / 1024))} KB`;

/** What the offline responder says: what it was shown, and a canned answer to the topic it spots. */
export function offlineReply(request: ClaudeRequest): string {
  const words = latestWords(request);
  const said = words.join(" / ");
  const media = latestBlocks(request).filter((b): b is MediaBlock => (b as MediaBlock).type === "image" || (b as MediaBlock).type === "document");
  const lines = [`${OFFLINE_PREFIX}You wrote: “${shorten(said, 300)}”.`];

  for (const m of media) {
    const type = m.source?.media_type ?? "a file";
    lines.push(
      m.type === "image"
        ? `I received your image (${type}, ${kilobytes(m.source?.data)}). Claude would look at it; the offline responder only knows its size.`
        : `I received your PDF (${kilobytes(m.source?.data)}). Claude would read it; the offline responder only knows its size.`,
    );
  }
  const choice = /\[Chose the option "([^"]+)"/.exec(said);
  if (choice) lines.push(`You chose “${choice[1]}”.`);
  const place = /\[Shared a location: ([^\]]+)\]/.exec(said);
  if (place) lines.push(`Thanks for the location (${place[1]}). The demo shop is a short walk from there.`);

  const topic = said.toLowerCase();
  if (/\blong\b|story|everything|detail/.test(topic)) lines.push(longAnswer());
  else if (/hour|open|close|sunday|monday|weekend/.test(topic)) lines.push("The demo shop is open Monday to Saturday, 9:00 to 18:00, and closed on Sundays.");
  else if (/price|cost|how much|cheap|expensive/.test(topic)) lines.push("Everything in the demo shop costs 42 demo coins.");
  else if (/order|deliver|track|ship|parcel/.test(topic)) lines.push("Orders leave the demo warehouse within two working days; yours (a made-up one) is on its way.");
  else if (media.length === 0 && !choice && !place) {
    lines.push('Ask about opening hours, prices or delivery, send a photo, a PDF or a location, or write "long" to see a long reply split into WhatsApp-sized parts.');
  }
  lines.push("(This answer comes from the demo's offline responder, not from Claude: start the demo with ANTHROPIC_API_KEY set to talk to Claude.)");
  return lines.join("\n\n");
}

/** Longer than one WhatsApp message (4096 characters), so the reply goes out in parts. */
function longAnswer(): string {
  const paragraph = (n: number) =>
    `${n}. This is paragraph ${n} of the long answer. WhatsApp takes at most 4096 characters in one message, so the backend splits a longer reply at a paragraph or word break and sends the parts in order, each exactly once.`;
  return ["Here is the long version:", ...Array.from({ length: 24 }, (_, i) => paragraph(i + 1))].join("\n\n");
}
