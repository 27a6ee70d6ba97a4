// The Conversations view (issue 33): every conversation, found by the customer or by words
// either side wrote, and one whole as chat bubbles with why the bot said each thing, what it
// cost, how the customer rated it and the items staff had on it.

import { api } from "./api.js";
import { chatItems } from "./chat.js";
import { $, $$, ago, cardTop, fullDate, h, messageWords } from "./dom.js";

const PAGE = 50;
/** The most timeline entries one read gives (GET /admin/conversations/:id's `limit`). */
const TIMELINE_MAX = 500;
const TIMELINE_PAGE = 100;

const RATING_WORDS = { good: "Good", okay: "Okay", bad: "Bad" };
const ITEM_STATE_WORDS = { open: "waiting", resent: "resent", discarded: "discarded", resolved: "given back to the bot" };

/** The list as shown: how many rows (a refresh reads as many again), its next page, and a digest to skip a refresh that changes nothing. */
const list = { shown: 0, nextCursor: null, signature: "" };
/** The conversation on screen: its id, the timeline and replies read so far (newest page plus older ones), and where older ones start. */
export const opened = { id: null, timeline: [], replies: [], olderCursor: null, signature: "" };

function filterParams() {
  const params = new URLSearchParams();
  for (const [key, value] of new FormData($("#conversation-filters"))) if (String(value).trim()) params.set(key, String(value).trim());
  return params;
}

/** Reads the list again from the top, as many rows as are shown (a live refresh keeps "Show more"'s rows); true when it could. */
export async function loadConversations() {
  const params = filterParams();
  params.set("limit", String(Math.min(200, Math.max(PAGE, list.shown))));
  const { status, data } = await api("GET", `/admin/conversations?${params}`);
  if (status !== 200) {
    $("#conversations-status").textContent = data.error ?? "The conversations could not be read.";
    return false;
  }
  const signature = JSON.stringify(data) + Math.floor(Date.now() / 60000);
  if (signature === list.signature) return true;
  list.signature = signature;
  showRows(data, { append: false });
  return true;
}

async function loadMore() {
  if (!list.nextCursor) return;
  const params = filterParams();
  params.set("cursor", list.nextCursor);
  params.set("limit", String(PAGE));
  const { status, data } = await api("GET", `/admin/conversations?${params}`);
  if (status !== 200) {
    $("#conversations-status").textContent = data.error ?? "The conversations could not be read.";
    return;
  }
  list.signature = "";
  const first = data.items[0]?.id;
  showRows(data, { append: true });
  // The keyboard goes on to the first new row, not back to the top.
  if (first) $(`#conversation-list [data-conversation-id="${first}"]`)?.focus();
}

function showRows(data, { append }) {
  const rows = data.items.map(row);
  const listEl = $("#conversation-list");
  const focused = document.activeElement?.dataset?.conversationId;
  if (append) listEl.append(...rows);
  else listEl.replaceChildren(...rows);
  if (focused && !append) $(`#conversation-list [data-conversation-id="${focused}"]`)?.focus({ preventScroll: true });
  list.shown = $$("#conversation-list > li").length;
  list.nextCursor = data.nextCursor;
  $("#conversations-more").hidden = !data.nextCursor;
  const filtered = [...filterParams().keys()].some((key) => key !== "limit");
  $("#conversations-count").textContent = list.shown ? `(${list.shown}${data.nextCursor ? "+" : ""})` : "";
  $("#conversations-status").textContent =
    list.shown === 0 ? (filtered ? "No conversation matches." : "No conversations yet: they appear here as customers write.") : "";
}

function row(item) {
  const contact = item.contact;
  const last = item.lastMessage;
  const badges = [
    item.handedOff ? h("span", { class: "badge badge-warn" }, "A person holds it") : null,
    item.openItems ? h("span", { class: "badge badge-warn" }, `${item.openItems} open item${item.openItems === 1 ? "" : "s"}`) : null,
    item.rating ? h("span", { class: `badge rating-${item.rating}` }, `Rated ${RATING_WORDS[item.rating] ?? item.rating}`) : null,
    h("span", { class: "badge" }, `${item.messageCount} message${item.messageCount === 1 ? "" : "s"}`),
  ].filter(Boolean);
  return h(
    "li",
    {},
    h(
      "a",
      { href: `#/conversations/${item.id}`, class: "item", dataset: { conversationId: item.id } },
      cardTop(contact, item.lastMessageAt),
      last
        ? h(
            "span",
            { class: "item-preview" },
            h("span", { class: "sr-only" }, "Last message: "),
            last.direction === "in" ? "" : "Business: ",
            `“${last.direction === "in" ? messageWords(last) : (last.text ?? "")}”`,
          )
        : null,
      h("span", { class: "item-badges" }, badges),
    ),
  );
}

/** Shows conversation `id` from its newest messages; false when it could not be read. */
export async function openConversation(id, stillWanted = () => true) {
  const { status, data } = await api("GET", `/admin/conversations/${id}?limit=${TIMELINE_PAGE}`);
  if (status !== 200) return false;
  if (!stillWanted()) return true;
  Object.assign(opened, { id, timeline: data.timeline, replies: data.replies, olderCursor: data.olderCursor, signature: "" });
  render(data);
  return true;
}

/**
 * Reads the conversation on screen again: as many of its newest entries as are shown (up to
 * TIMELINE_MAX), so that a new message joins the bottom and the older pages read stay.
 */
export async function refreshConversation() {
  const id = opened.id;
  if (!id) return;
  const limit = Math.min(TIMELINE_MAX, Math.max(TIMELINE_PAGE, opened.timeline.length));
  const { status, data } = await api("GET", `/admin/conversations/${id}?limit=${limit}`);
  if (status !== 200 || opened.id !== id) return;
  Object.assign(opened, { timeline: data.timeline, replies: data.replies, olderCursor: data.olderCursor });
  render(data);
}

async function showOlder() {
  const id = opened.id;
  if (!id || !opened.olderCursor) return;
  const { status, data } = await api("GET", `/admin/conversations/${id}?limit=${TIMELINE_PAGE}&before=${encodeURIComponent(opened.olderCursor)}`);
  if (status !== 200 || opened.id !== id) return;
  const known = new Set(opened.replies.map((reply) => reply.id));
  opened.timeline = [...data.timeline, ...opened.timeline];
  opened.replies = [...data.replies.filter((reply) => !known.has(reply.id)), ...opened.replies];
  opened.olderCursor = data.olderCursor;
  opened.signature = "";
  render(data);
  // The keyboard stays at the top of the conversation: on the button while older remain, else at its start.
  if ($("#conversation-older").hidden) $("#conversation-timeline").focus();
  else $("#conversation-older").focus();
}

/** `data` is the last read: its facts are the conversation's now; the timeline is what `opened` gathered. */
function render(data) {
  const signature = JSON.stringify([data, opened.timeline.length]) + Math.floor(Date.now() / 60000);
  if (signature === opened.signature) return;
  opened.signature = signature;
  const contact = data.contact;
  $("#conversation-title").textContent = contact.name || contact.label;
  document.title = `${contact.name || contact.label} · Conversations`;
  $("#conversation-sub").textContent = [contact.name ? contact.label : null, `business number id ${data.phoneNumberId}`].filter(Boolean).join(" · ");
  renderFacts(data);
  renderItems(data.items);
  $("#conversation-older").hidden = !opened.olderCursor;
  $("#conversation-timeline").replaceChildren(...chatItems(opened.timeline, opened.replies));
}

const usd = (amount) => `$${amount.toLocaleString("en-GB", { minimumFractionDigits: 2, maximumFractionDigits: 4 })}`;
const whole = new Intl.NumberFormat("en-GB");

function renderFacts(data) {
  const { cost } = data;
  const tokens = cost.tokens;
  const latest = data.ratings.at(-1);
  const facts = [
    ["24-hour window", data.windowOpen ? "open: the bot may write" : "closed: only a template reaches them"],
    ["The bot", data.pausedUntil ? `paused for a person (${data.pausedBy ?? "staff"}) until ${fullDate(data.pausedUntil)}` : "answers"],
    ["Rating", latest ? `${RATING_WORDS[latest.rating] ?? latest.rating}, ${fullDate(latest.ratedAt)}` : "not rated"],
    data.ratings.length > 1
      ? [
          "Earlier ratings",
          data.ratings
            .slice(0, -1)
            .map((r) => RATING_WORDS[r.rating] ?? r.rating)
            .join(", "),
        ]
      : null,
    ["Claude", `${usd(cost.claudeUsd)} · ${whole.format(tokens.input)} in, ${whole.format(tokens.output)} out`],
    ["Meta", cost.meta ? `${cost.meta.toLocaleString("en-GB", { maximumFractionDigits: 4 })} (rate card)` : "nothing billed, or no rate card"],
  ].filter(Boolean);
  $("#conversation-facts").replaceChildren(...facts.flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
}

function renderItems(items) {
  const rows = items
    .slice()
    .reverse()
    .map((item) =>
      h(
        "li",
        { class: item.state === "open" ? "open-item" : undefined },
        h("a", { href: `#/item/${item.id}` }, item.title),
        ` · ${ITEM_STATE_WORDS[item.state] ?? item.state} · `,
        h("time", { datetime: item.createdAt, title: fullDate(item.createdAt) }, ago(item.createdAt)),
      ),
    );
  $("#conversation-items").replaceChildren(...(rows.length ? rows : [h("li", {}, "None: the bot handled it.")]));
}

let searchTimer = 0;

export function wireConversations() {
  const form = $("#conversation-filters");
  const reload = () => {
    list.shown = 0;
    loadConversations();
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    reload();
  });
  // The list follows the search box as it is typed into, and the filters as they change.
  $("#conversation-search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(reload, 250);
  });
  for (const field of $$("#conversation-more-filters input, #conversation-more-filters select")) field.addEventListener("change", reload);
  $("#conversations-more").addEventListener("click", loadMore);
  $("#conversation-older").addEventListener("click", showOlder);
}
