import { customerBlocks, groundedAnswer } from "./grounded.ts";
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
  /** What it did with the business's knowledge and tools, if anything: "cited hours.md". */
  did?: string;
}

export class OfflineClaude extends MessagesApiServer {
  /** `faultOf` says, at each request, whether to fail and how (the page's switch). */
  constructor(
    private readonly faultOf: () => ClaudeFault | undefined = () => undefined,
    private readonly observe: (call: OfflineCall) => void = () => undefined,
    onError?: (error: unknown) => void,
  ) {
    super({ onError });
  }

  protected override respond(request: ClaudeRequest): ClaudeAnswer {
    const asked = shorten(latestWords(request).join(" / "), 60);
    const fault = this.faultOf();
    if (fault) {
      this.observe({ answer: Number(fault), asked });
      return { status: Number(fault) };
    }
    if (request.tool_choice?.type === "tool" && request.tool_choice.name === "grade") return gradeByOverlap(request);
    const grounded = groundedAnswer(request, latestWords(request).join(" "), openingLines(request).join("\n\n"));
    this.observe({ answer: 200, asked, ...(grounded ? { did: grounded.did } : {}) });
    return grounded ?? { text: offlineReply(request) };
  }
}

/**
 * An eval's judge (src/eval/judge.ts) as the offline responder can be one: the rubric passes
 * when the last answer holds most of its words (four letters or more, roughly stemmed). Crude,
 * and said so on the eval's first line; Claude judges meaning.
 */
function gradeByOverlap(request: ClaudeRequest): ClaudeAnswer {
  const text = latestWords(request).join("\n");
  const rubric = /<rubric>\n?([\s\S]*?)\n?<\/rubric>/.exec(text)?.[1] ?? "";
  const conversation = text.split("</conversation>")[0] ?? "";
  const answer = conversation.slice(conversation.lastIndexOf("Assistant: ") + "Assistant: ".length).toLowerCase();
  const words = [...new Set(rubric.toLowerCase().match(/\p{L}{4,}/gu) ?? [])].map((w) => w.replace(/(ing|ed|es|s)$/, ""));
  const found = words.filter((w) => answer.includes(w));
  const pass = words.length > 0 && found.length / words.length >= 0.5;
  const reason = `${found.length} of the rubric's ${words.length} words are in the answer${pass ? "" : ` (missing: ${words.filter((w) => !found.includes(w)).join(", ")})`}`;
  return { content: [{ type: "tool_use", name: "grade", input: { pass, reason } }], stopReason: "tool_use" };
}

interface MediaBlock {
  type: "image" | "document";
  source?: { media_type?: string; data?: string };
}

/** The customer's latest message: their words (a burst is several) and media, without the business's knowledge. */
const latestBlocks = (request: ClaudeRequest): unknown[] => customerBlocks(request);

function latestWords(request: ClaudeRequest): string[] {
  return latestBlocks(request)
    .filter((b): b is Block => typeof (b as Block).text === "string")
    .map((b) => b.text.trim())
    .filter(Boolean);
}

const shorten = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 1)}…` : text);

const kilobytes = (base64: string | undefined) => `${Math.max(1, Math.round(((base64?.length ?? 0) * 3) / 4 / 1024))} KB`;

/** What the offline responder says first: what it was shown. */
function openingLines(request: ClaudeRequest): string[] {
  const said = latestWords(request).join(" / ");
  const media = latestBlocks(request).filter((b): b is MediaBlock => (b as MediaBlock).type === "image" || (b as MediaBlock).type === "document");
  // The backend describes what is not plain text ("[Shared a location: …]"): that is what Claude would read.
  const lines = [`${OFFLINE_PREFIX}${said.startsWith("[") ? "Claude would be shown" : "You wrote"}: “${shorten(said, 300)}”.`];

  for (const m of media) {
    const type = m.source?.media_type ?? "a file";
    lines.push(
      m.type === "image"
        ? `I received your image (${type}, ${kilobytes(m.source?.data)}). Claude would look at it; the offline responder only knows its size.`
        : `I received your PDF (${kilobytes(m.source?.data)}). Claude would read it; the offline responder only knows its size.`,
    );
  }
  const place = /\[Shared a location: ([^\]]+)\]/.exec(said);
  if (place) lines.push(`Thanks for the location (${place[1]}). The demo shop is a short walk from there.`);
  return lines;
}

/** What the offline responder says when nothing of the business's answers: what it was shown, and a canned answer to the topic it spots. */
export function offlineReply(request: ClaudeRequest): string {
  const said = latestWords(request).join(" / ");
  const media = latestBlocks(request).filter((b): b is MediaBlock => (b as MediaBlock).type === "image" || (b as MediaBlock).type === "document");
  const place = /\[Shared a location: ([^\]]+)\]/.exec(said);
  const lines = openingLines(request);
  const topic = said.toLowerCase();
  if (/\blong\b|story|everything|detail/.test(topic)) lines.push(longAnswer());
  else if (/hour|open|close|sunday|monday|weekend/.test(topic)) lines.push("The demo shop is open Monday to Saturday, 9:00 to 18:00, and closed on Sundays.");
  else if (/price|cost|how much|cheap|expensive/.test(topic)) lines.push("Everything in the demo shop costs 42 demo coins.");
  else if (/order|deliver|track|ship|parcel/.test(topic))
    lines.push("Orders leave the demo warehouse within two working days; yours (a made-up one) is on its way.");
  else if (media.length === 0 && !place) {
    lines.push(
      'I am the demo\'s offline responder, not Claude (start the demo with ANTHROPIC_API_KEY for Claude). Ask about opening hours, prices or delivery, send a photo, a PDF or a location, or write "long" to see a long reply split into WhatsApp-sized parts.',
    );
  }
  return lines.join("\n\n");
}

/** Longer than one WhatsApp message (4096 characters), so the reply goes out in parts: what happened to the customer's message. */
const TOUR = [
  "Here is the long version: what happened to your message on its way to me and back.",
  "1. Your phone gave it to the simulated Meta, which wrote it as a webhook exactly the way Meta does: compact JSON in pure ASCII, every accented letter and emoji as a \\u escape and every slash as \\/. It signed those bytes with this run's app secret (X-Hub-Signature-256) and posted them to the backend's POST /webhook.",
  "2. The backend checked the signature over the raw bytes before anything else, in constant time. Had it parsed and re-serialised the JSON first, the escapes would have changed and the signature would not have matched: that is the most common bug in WhatsApp webhooks.",
  "3. In one Redis script it queued an inbound job whose id comes from the message id and claimed that id for a day beside it, so neither can exist without the other, and only then answered 200. Meta delivers the same webhook again whenever it does not get a 200 quickly, and sometimes anyway, so the claim and the job id make every copy after the first harmless.",
  "4. A worker stored your message in Postgres, whose unique message id is the second line of defence against duplicates, and told Meta it was read, with the typing indicator you may have seen under the shop's name.",
  "5. The worker then scheduled the conversation's reply job, debounced for a moment: several messages written in a burst get one answer, and one conversation never has two replies in flight at once, however many workers run.",
  "6. The reply job bound your unanswered messages to a new reply and asked Claude, once. In this demo Claude is the offline responder, which speaks Anthropic's Messages API over HTTP, so the real client code ran. The answer was stored before anything was sent: a retry, a crashed worker or a duplicate webhook never pays for a second answer.",
  "7. This answer is longer than the 4096 characters WhatsApp accepts in one message, so the backend split it at a paragraph break into parts, numbered and sent in order.",
  "8. Each part went to the simulated Graph API with the part's own id in biz_opaque_callback_data. Meta answers a send with a message id; when the answer is lost (a timeout, a 502 page from a proxy), the part counts as maybe sent and waits for its status webhook, which carries that id back, before anything sends it again.",
  "9. Then came the status webhooks, sent, delivered and read, which the backend records without ever moving backwards: switch on out-of-order statuses and read may come first, yet the ticks never fall back to one.",
  "10. When Meta refuses for good (131047: the 24-hour window has closed) or Claude fails beyond its retries, the reply becomes a dead letter. Staff see it on the staff page with the conversation and the error, and can send the stored draft, edit it or write their own; it goes out once.",
  "11. Retryable failures (a 500, Meta's throughput limit 130429, the pair limit 131056, Claude's 529) are retried with backoff and jitter; the sender-wide limits pause every reply without spending attempts.",
  "12. A photo or a PDF you send is not in the webhook itself: Meta keeps it and gives a media id. When the reply is written, the backend asks the Graph API for a short-lived download address and fetches the file with its token, within a size limit, so that Claude can look at it.",
  "13. A customer who hides their phone number behind a username is known by a business-scoped user id (BSUID) only; the backend answers them at that id, and keeps one conversation when the same person later writes with their number.",
  "14. Writing STOP turns the automatic replies off until START; writing human hands the conversation to a person on the staff page. And should anything be left unanswered (a worker gone, Redis lost), a reconciler finds it within minutes and drives it again once, then dead-letters it: nothing disappears.",
  "15. None of this is special to the demo. npm start runs the same web and worker code against the real Meta and the real Claude; only the two simulators and this page are the demo's own, and npm run demo refuses to start if GRAPH_API_BASE_URL points anywhere but its own simulated Meta.",
  "16. The log beside the chat shows each of these steps as it happens: every webhook delivery and its HTTP answer, each read receipt, each send and what Meta said, each status.",
];

function longAnswer(): string {
  return TOUR.join("\n\n");
}
