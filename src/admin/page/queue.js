// The list of items waiting for a person: counts by reason, search, cards, keyboard moves.

import { api } from "./api.js";
import { $, $$, ago, cardTop, fullDate, h, messageWords } from "./dom.js";

const STATE_NAMES = { open: "Open items", resent: "Resent items", discarded: "Discarded items", resolved: "Given back to the bot" };

/** What the list shows now, and its order (the detail's previous / next follow it). */
export const queue = { ids: [], items: new Map(), reason: "", signature: "" };

function filterParams() {
  const params = new URLSearchParams();
  for (const [key, value] of new FormData($("#filters"))) if (String(value).trim()) params.set(key, String(value).trim());
  if (queue.reason) params.set("reason", queue.reason);
  return params;
}

/** Reads the list and its counts; true when it could. */
export async function loadQueue() {
  const params = filterParams();
  const summaryParams = new URLSearchParams();
  for (const key of ["state", "phoneNumberId"]) if (params.has(key)) summaryParams.set(key, params.get(key));
  const [list, summary] = await Promise.all([api("GET", `/admin/dlq?${params}`), api("GET", `/admin/dlq/summary?${summaryParams}`)]);
  if (list.status !== 200) return false;
  if (summary.status === 200) renderReasons(summary.data);
  renderItems(list.data);
  return true;
}

function renderReasons(summary) {
  const state = summary.state;
  $("#queue-name").textContent = STATE_NAMES[state] ?? "Items";
  document.title = state === "open" ? `(${summary.total}) Support queue` : "Support queue";
  const oldest = $("#oldest");
  oldest.textContent = state === "open" && summary.oldestAt ? `Oldest came in ${ago(summary.oldestAt)}` : "";
  oldest.title = summary.oldestAt ? fullDate(summary.oldestAt) : "";
  const chip = (kind, label, count, oldestAt) =>
    h(
      "button",
      { type: "button", class: "chip", "aria-pressed": String(queue.reason === kind), dataset: { reason: kind }, onclick: () => chooseReason(kind) },
      h("span", { class: "chip-label" }, label),
      " ",
      h("span", { class: "chip-count" }, String(count)),
      oldestAt ? h("span", { class: "sr-only" }, `, oldest ${ago(oldestAt)}`) : null,
    );
  const chips = [chip("", "All", summary.total)];
  for (const reason of summary.reasons) chips.push(chip(reason.kind, reason.label, reason.count, reason.oldestAt));
  if (queue.reason && !summary.reasons.some((r) => r.kind === queue.reason))
    chips.push(chip(queue.reason, $(`[data-reason="${queue.reason}"] .chip-label`)?.textContent ?? queue.reason, 0));
  const focused = document.activeElement?.dataset?.reason;
  $("#reasons").replaceChildren(...chips);
  if (focused !== undefined) $(`#reasons [data-reason="${focused}"]`)?.focus();
}

function chooseReason(kind) {
  queue.reason = kind;
  loadQueue();
}

function card(item) {
  const contact = item.conversation.contact;
  const why = item.explanation;
  const last = item.lastMessage;
  const badges = [
    item.reply?.maybeSent ? h("span", { class: "badge badge-warn" }, "May already have arrived") : null,
    item.reply && !item.reply.draft ? h("span", { class: "badge" }, "No draft yet") : null,
    item.state !== "open" ? h("span", { class: "badge" }, item.state) : null,
  ].filter(Boolean);
  return h(
    "li",
    {},
    h(
      "a",
      { href: `#/item/${item.id}`, class: `item kind-${why.kind}`, dataset: { deadLetterId: item.id } },
      cardTop(contact, item.createdAt),
      h("span", { class: "item-why" }, why.title),
      last ? h("span", { class: "item-preview" }, h("span", { class: "sr-only" }, "Last message: "), `“${messageWords(last)}”`) : null,
      badges.length ? h("span", { class: "item-badges" }, badges) : null,
    ),
  );
}

function renderItems(data) {
  $("#count").textContent = `(${data.total})`;
  // Unchanged since the last look (ages change by the minute): leave the list, and whoever is reading it, alone.
  const signature = JSON.stringify(data.items) + Math.floor(Date.now() / 60000);
  if (signature === queue.signature) return;
  queue.signature = signature;
  queue.ids = data.items.map((item) => item.id);
  queue.items = new Map(data.items.map((item) => [item.id, item]));
  const list = $("#items");
  const links = $$("[data-dead-letter-id]", list);
  const focusedAt = links.indexOf(document.activeElement);
  const focusedId = focusedAt >= 0 ? links[focusedAt].dataset.deadLetterId : undefined;
  list.replaceChildren(...data.items.map(card));
  $("#empty").hidden = data.items.length > 0;
  // A refresh keeps the keyboard where it was: on the same item, or on the one now in its place.
  if (focusedId !== undefined) {
    const fresh = $$("[data-dead-letter-id]", list);
    const same = fresh.find((link) => link.dataset.deadLetterId === focusedId) ?? fresh[Math.min(focusedAt, fresh.length - 1)];
    (same ?? $("#search")).focus({ preventScroll: true });
  }
}

/** Puts the keyboard on the item at `index` (after one was handled: the next in line), or the search box. */
export function focusItemAt(index) {
  const links = $$("#items [data-dead-letter-id]");
  const link = links[Math.min(index, links.length - 1)];
  (link ?? $("#search")).focus();
}

let searchTimer = 0;

export function wireQueue() {
  $("#filters").addEventListener("submit", (event) => {
    event.preventDefault();
    loadQueue();
  });
  // The list follows the search box as it is typed into, and the filters as they change.
  $("#search").addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(loadQueue, 250);
  });
  for (const field of $$("#more-filters select")) field.addEventListener("change", loadQueue);
  $("#bulk").addEventListener("click", async () => {
    const code = String(new FormData($("#filters")).get("code") ?? "").trim();
    if (!code) {
      $("#queue-status").textContent = "Type the error code to resend first (e.g. 133004), under More filters.";
      return;
    }
    const { status, data } = await api("POST", "/admin/dlq/bulk-retry", { code }, crypto.randomUUID());
    $("#queue-status").textContent =
      status < 300 ? `Resending ${data.resent} item(s), spaced out; ${data.skipped} left as they were.` : `Not done: ${data.error ?? "unknown error"}`;
    loadQueue();
  });
}
