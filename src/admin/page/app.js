// The staff page: static files over the JSON API (the one way actions happen), no build step.
// This module routes between sign-in, the queue and one item (#/item/<id>), the conversations
// and one (#/conversations/<id>), insights, costs, customers and "Try it"; keeps the queue and
// the conversations fresh as the live feed (live.js) says things change, and owns the keyboard
// shortcuts.

import { api, onSignedOut, setCsrfToken } from "./api.js";
import { loadConversations, openConversation, opened, refreshConversation, wireConversations } from "./conversations.js";
import { loadCosts, wireCosts } from "./costs.js";
import { loadCustomers, setOperator, wireCustomers } from "./customers.js";
import { act, detail, neighbour, openItem, refreshDetail, wireDraft } from "./detail.js";
import { $, isTyping, moveInList } from "./dom.js";
import { loadInsights, wireInsights } from "./insights.js";
import { startLive, stopLive } from "./live.js";
import { leavePresence } from "./presence.js";
import { focusItemAt, loadQueue, queue, wireQueue } from "./queue.js";
import { wireTemplates } from "./templates.js";
import { loadTry, wireTry } from "./try.js";

let view = "sign-in";
let signedIn = false;

function show(section) {
  view = section;
  for (const id of ["sign-in", "queue", "detail", "conversations", "conversation", "insights", "costs", "try", "customers"])
    $(`#${id}`).hidden = id !== section;
  $("#sign-out").hidden = section === "sign-in";
  $("#views").hidden = section === "sign-in";
  // A view's link stays current on one of its own: an item is part of the queue, a conversation of the list.
  for (const [link, current] of [
    ["#nav-queue", section === "queue" || section === "detail"],
    ["#nav-conversations", section === "conversations" || section === "conversation"],
    ["#nav-insights", section === "insights"],
    ["#nav-costs", section === "costs"],
    ["#nav-try", section === "try"],
    ["#nav-customers", section === "customers"],
  ]) {
    if (current) $(link).setAttribute("aria-current", "page");
    else $(link).removeAttribute("aria-current");
  }
}

const REFRESH = {
  detail: refreshDetail,
  queue: loadQueue,
  conversations: loadConversations,
  conversation: refreshConversation,
  insights: loadInsights,
  costs: loadCosts,
};
const refreshView = () => REFRESH[view]?.() ?? Promise.resolve();
/** The views the live feed refreshes; the others show figures or forms the person may be in the middle of. */
const LIVE_VIEWS = new Set(["queue", "detail", "conversations", "conversation"]);

/**
 * Something changed: the list, the item or the conversation on screen is read again
 * (refreshDetail never writes over a reply box someone is in or has changed). Views outside LIVE_VIEWS
 * are not: the person may be choosing days or typing. Changes that come while a refresh runs make one more,
 * not one each; a hidden page reads again when it is shown (visibilitychange).
 */
let refreshing = false;
let changedMeanwhile = false;
async function onChange() {
  if (document.hidden || !LIVE_VIEWS.has(view)) return;
  if (refreshing) {
    changedMeanwhile = true;
    return;
  }
  refreshing = true;
  try {
    do {
      changedMeanwhile = false;
      await refreshView().catch(() => undefined);
    } while (changedMeanwhile);
  } finally {
    refreshing = false;
  }
}

function showSignIn() {
  signedIn = false;
  leavePresence();
  stopLive();
  show("sign-in");
  document.title = "Sign in · Support queue";
}

async function showQueue(message, fromItem) {
  leaveItem();
  const returningFrom = fromItem ? queue.ids.indexOf(fromItem) : -1;
  show("queue");
  document.title = "Support queue";
  $("#queue-status").textContent = message ?? "";
  await loadQueue();
  if (view !== "queue") return; // an item was opened meanwhile
  // Back from an item: the keyboard lands where it left off (after a send or discard, the next one in line).
  if (returningFrom >= 0) focusItemAt(returningFrom);
}

async function showItem(id) {
  if (queue.ids.length === 0) await loadQueue(); // opened by its link: the list gives previous / next
  const found = await openItem(id, () => routeId === id);
  if (routeId !== id) return; // the person moved on meanwhile
  if (!found) {
    pendingMessage = "That item could not be found.";
    return go("");
  }
  show("detail");
  $("#detail-title").focus({ preventScroll: false });
}

/** A view the live feed leaves alone (costs, insights, customers, Try it): the person may be choosing days or typing; a new visit reads again. */
async function showFigures(section, title, load) {
  leaveItem();
  show(section);
  document.title = `${title} · Support queue`;
  await load();
  if (view === section) $(`#${section}-title`).focus({ preventScroll: true });
}

async function showConversations() {
  leaveItem();
  const returningFrom = opened.id;
  opened.id = null;
  show("conversations");
  document.title = "Conversations · Support queue";
  await loadConversations();
  if (view !== "conversations") return;
  // Back from a conversation: the keyboard lands on it in the list.
  const link = returningFrom && $(`#conversation-list [data-conversation-id="${returningFrom}"]`);
  if (link) link.focus();
  else $("#conversations-title").focus({ preventScroll: true });
}

async function showConversation(id) {
  leaveItem();
  const found = await openConversation(id, () => routeConversation === id);
  if (routeConversation !== id) return;
  if (!found) {
    opened.id = null;
    $("#conversations-status").textContent = "That conversation could not be found.";
    return go("#/conversations");
  }
  show("conversation");
  $("#conversation-title").focus({ preventScroll: false });
}

/** Leaving an item for another view: nobody is shown as on it any more. */
function leaveItem() {
  detail.current = null;
  leavePresence();
}

let routeId = null;
let routeConversation = null;
let pendingMessage;

/** The address says what to show: a view by name, #/item/<id>, #/conversations/<id>, anything else the queue. */
function route() {
  if (!signedIn) return;
  const previous = routeId;
  const conversation = /^#\/conversations\/([0-9a-f-]{36})$/.exec(location.hash);
  routeConversation = conversation ? conversation[1] : null;
  if (conversation || ["#/costs", "#/insights", "#/conversations", "#/try", "#/customers"].includes(location.hash)) routeId = null;
  if (conversation) return showConversation(conversation[1]);
  if (location.hash === "#/conversations") return showConversations();
  if (location.hash === "#/insights") return showFigures("insights", "Insights", loadInsights);
  if (location.hash === "#/costs") return showFigures("costs", "Costs", loadCosts);
  if (location.hash === "#/try") return showFigures("try", "Try it", loadTry);
  if (location.hash === "#/customers") return showFigures("customers", "Customers", loadCustomers);
  const match = /^#\/item\/([0-9a-f-]{36})$/.exec(location.hash);
  routeId = match ? match[1] : null;
  if (match) return showItem(match[1]);
  const message = pendingMessage;
  pendingMessage = undefined;
  return showQueue(message, previous);
}

const go = (hash) => {
  if (location.hash === hash)
    route(); // no hashchange to wait for
  else location.hash = hash;
};

async function doAction(action) {
  const done = await act(action);
  if (done === undefined) return;
  pendingMessage = done;
  go("");
}

async function start() {
  const { status, data } = await api("GET", "/admin/session");
  if (status !== 200) return showSignIn();
  setCsrfToken(data.csrfToken);
  signedIn = true;
  $("#who").textContent = `Signed in as ${data.email}`;
  // Trying the bot spends money: operators only (the API refuses anyone else too).
  $("#nav-try").hidden = !data.operator;
  setOperator(data.operator);
  startLive(onChange);
  route();
}

/** Single keys, only while nobody is typing in a field (README: the staff page). */
function onKey(event) {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey || isTyping(event.target) || !signedIn) return;
  const key = event.key;
  if (key === "?") {
    const help = $("#shortcuts");
    help.open = !help.open;
    if (help.open) help.scrollIntoView({ block: "nearest" });
    return event.preventDefault();
  }
  const lists = { queue: ["#items [data-dead-letter-id]", "#search"], conversations: ["#conversation-list [data-conversation-id]", "#conversation-search"] };
  if (lists[view]) {
    const [rows, search] = lists[view];
    if (key === "j" || key === "ArrowDown") moveInList(rows, 1);
    else if (key === "k" || key === "ArrowUp") moveInList(rows, -1);
    else if (key === "/") $(search).focus();
    else return;
    return event.preventDefault();
  }
  if (view === "conversation" && key === "Escape") {
    go("#/conversations");
    return event.preventDefault();
  }
  if (view === "detail") {
    const visible = (action) => !$(`[data-action="${action}"]`).hidden && !$(`[data-action="${action}"]`).disabled;
    if (key === "s" && visible("send-edited")) doAction("send-edited");
    else if (key === "s" && visible("answer")) doAction("answer");
    else if (key === "d" && visible("discard")) {
      if (confirm("Discard this item?")) doAction("discard");
    } else if (key === "e" && !$("#draft").disabled) $("#draft").focus();
    else if (key === "j" && neighbour(1)) go(`#/item/${neighbour(1)}`);
    else if (key === "k" && neighbour(-1)) go(`#/item/${neighbour(-1)}`);
    else if (key === "Escape") go("");
    else return;
    return event.preventDefault();
  }
}

document.addEventListener("DOMContentLoaded", () => {
  onSignedOut(showSignIn);
  wireQueue();
  wireDraft();
  wireTemplates();
  wireCosts();
  wireInsights();
  wireConversations();
  wireTry();
  wireCustomers();
  $("#sign-in").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const { status, data } = await api("POST", "/admin/session", { email: form.get("email"), password: form.get("password") });
    $("#sign-in .error").textContent = status === 200 ? "" : (data.error ?? "could not sign in");
    if (status === 200) start();
  });
  $("#back").addEventListener("click", () => go(""));
  $("#conversation-back").addEventListener("click", () => go("#/conversations"));
  $("#prev").addEventListener("click", () => neighbour(-1) && go(`#/item/${neighbour(-1)}`));
  $("#next").addEventListener("click", () => neighbour(1) && go(`#/item/${neighbour(1)}`));
  $("#sign-out").addEventListener("click", async () => {
    await api("DELETE", "/admin/session");
    showSignIn();
  });
  for (const button of document.querySelectorAll("#detail [data-action]")) button.addEventListener("click", () => doAction(button.dataset.action));
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && signedIn) refreshView();
  });
  start();
});
