// A conversation as chat bubbles, wherever staff read one (an item, a conversation): both sides
// with their delivery ticks, and under each reply why the bot said it (the knowledge it cited,
// the business actions it took).

import { clock, dayName, fullDate, h, messageWords } from "./dom.js";

/** A delivery tick as WhatsApp shows it, with words for screen readers and a hover title. */
function ticks(entry, failedReply) {
  const tick = (glyph, words, kind) =>
    h("span", { class: `tick tick-${kind}`, title: words }, h("span", { "aria-hidden": "true" }, glyph), h("span", { class: "sr-only" }, words));
  if (entry.status === "read") return tick("✓✓", "Read", "read");
  if (entry.status === "delivered") return tick("✓✓", "Delivered", "delivered");
  if (entry.status === "failed") return tick("!", "Not delivered", "failed");
  if (entry.status === "sent" || entry.sendState === "accepted") return tick("✓", "Sent", "sent");
  if (entry.sendState === "sending" || entry.sendState === "unconfirmed") return tick("?", "May have arrived: Meta never answered", "maybe");
  if (failedReply) return tick("!", "Not delivered", "failed");
  return tick("🕓", "Waiting to be sent", "pending");
}

function bubble(entry, failedReply) {
  const inbound = entry.direction === "in";
  const at = inbound ? (entry.sentAt ?? entry.at) : entry.at;
  const failed = !inbound && failedReply && entry.status !== "delivered" && entry.status !== "read";
  return h(
    "li",
    { class: `bubble ${inbound ? "in" : "out"}${failed ? " failed" : ""}${entry.deleted ? " deleted" : ""}` },
    h("span", { class: "sr-only" }, inbound ? "Customer: " : "Business: "),
    failed ? h("span", { class: "flag" }, "This reply did not reach the customer") : null,
    entry.template ? h("span", { class: "flag flag-template" }, `Template “${entry.template}”`) : null,
    h("span", { class: "text" }, inbound ? messageWords(entry) : entry.text),
    h("span", { class: "meta" }, h("time", { datetime: at, title: fullDate(at) }, clock(at)), inbound ? null : " ", inbound ? null : ticks(entry, failedReply)),
  );
}

const TOOL_STATE_WORDS = {
  requested: "asked for; no answer stored (it may have reached the business)",
  done: "answered",
  failed: "failed",
  unknown: "never confirmed, even asked again with the same key: it may have been done (a person checks)",
};

/** The citations and business actions behind one reply, as a fold under its bubble; nothing when it had none. */
function replyWork(work) {
  if (work.citations.length === 0 && work.toolCalls.length === 0) return [];
  const citations = work.citations.map((c) =>
    h(
      "li",
      { class: "citation" },
      h("span", { class: "source" }, c.title && c.title !== c.source ? `${c.title} (${c.source})` : c.source),
      c.location ? ` · ${c.location}` : "",
      h("blockquote", {}, c.citedText),
    ),
  );
  const calls = work.toolCalls.map((call) =>
    h(
      "li",
      { class: `tool-call tool-${call.state}${call.isError ? " tool-error" : ""}` },
      h("span", { class: "source" }, call.name),
      ` · ${TOOL_STATE_WORDS[call.state] ?? call.state}`,
      call.status ? ` · HTTP ${call.status}` : "",
      call.attempts > 1 ? ` · sent ${call.attempts} times with the same key` : "",
      h("code", { class: "tool-input" }, JSON.stringify(call.input)),
      call.request ? h("span", { class: "tool-request" }, `${call.request.method} ${call.request.url}`) : null,
      call.answer !== null ? h("pre", { class: "tool-answer" }, call.answer) : null,
    ),
  );
  const summary = [
    work.citations.length ? `${work.citations.length} source${work.citations.length === 1 ? "" : "s"} cited` : null,
    work.toolCalls.length ? `${work.toolCalls.length} business action${work.toolCalls.length === 1 ? "" : "s"}` : null,
  ]
    .filter(Boolean)
    .join(", ");
  return [
    h(
      "li",
      { class: "work" },
      h(
        "details",
        {},
        h("summary", {}, `Why the bot said this: ${summary}`),
        citations.length ? h("ol", { class: "citations", "aria-label": "Sources cited" }, citations) : null,
        calls.length ? h("ol", { class: "tool-calls", "aria-label": "Business actions" }, calls) : null,
      ),
    ),
  ];
}

/**
 * The list items of a conversation's timeline: a heading for each day, a bubble for each message
 * and part, and the reply's work under its last part. `failedReplyId` marks that reply's parts
 * as not delivered; `missing` ({ replyId, text }) places a reply that has no parts after the
 * last message it answers.
 */
export function chatItems(timeline, replies = [], { failedReplyId, missing } = {}) {
  const items = [];
  let lastDay = "";
  const lastAnswered = missing ? timeline.findLastIndex((entry) => entry.direction === "in" && entry.replyId === missing.replyId) : -1;
  timeline.forEach((entry, index) => {
    const at = entry.direction === "in" ? (entry.sentAt ?? entry.at) : entry.at;
    const day = dayName(at);
    if (day !== lastDay) items.push(h("li", { class: "day" }, day));
    lastDay = day;
    items.push(bubble(entry, failedReplyId !== undefined && entry.replyId === failedReplyId));
    // What the reply stood on, under its last part: the knowledge it cited, the actions it took.
    if (entry.direction === "out" && !timeline.slice(index + 1).some((later) => later.direction === "out" && later.replyId === entry.replyId)) {
      const work = replies.find((reply) => reply.id === entry.replyId);
      if (work) items.push(...replyWork(work));
    }
    if (index === lastAnswered) {
      items.push(
        h("li", { class: "bubble out failed missing" }, h("span", { class: "flag" }, "No reply was sent"), h("span", { class: "text" }, missing.text)),
      );
    }
  });
  if (items.length === 0) items.push(h("li", { class: "day" }, "No messages stored for this conversation."));
  return items;
}
