// The staff page: static files over the JSON API (the one way actions happen), no build step.
// This module routes between sign-in, the list and one item (#/item/<id>), keeps the view
// fresh as the live queue (live.js) says things change, and owns the keyboard shortcuts.

import { api, onSignedOut, setCsrfToken } from "./api.js";
import { loadCosts, wireCosts } from "./costs.js";
import { act, detail, neighbour, openItem, refreshDetail, wireDraft } from "./detail.js";
import { $, isTyping } from "./dom.js";
import { startLive, stopLive } from "./live.js";
import { leavePresence } from "./presence.js";
import { focusItemAt, loadQueue, moveInList, queue, wireQueue } from "./queue.js";
import { wireTemplates } from "./templates.js";

let view = "sign-in";
let signedIn = false;

function show(section) {
  view = section;
  for (const id of ["sign-in", "queue", "detail", "costs"]) $(`#${id}`).hidden = id !== section;
  $("#sign-out").hidden = section === "sign-in";
  $("#views").hidden = section === "sign-in";
  // The queue's link stays current on an item: it is part of the queue.
  for (const [link, current] of [
    ["#nav-queue", section !== "costs"],
    ["#nav-costs", section === "costs"],
  ]) {
    if (current) $(link).setAttribute("aria-current", "page");
    else $(link).removeAttribute("aria-current");
  }
}

const refreshView = () => (view === "detail" ? refreshDetail() : view === "queue" ? loadQueue() : view === "costs" ? loadCosts() : Promise.resolve());

/**
 * Something changed: the list or the item on screen is read again (refreshDetail never writes
 * over a reply box someone is in or has changed). Costs are not: the person may be choosing
 * days. Changes that come while a refresh runs make one more, not one each; a hidden page reads
 * again when it is shown (visibilitychange).
 */
let refreshing = false;
let changedMeanwhile = false;
async function onChange() {
  if (document.hidden || view === "costs" || view === "sign-in") return;
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
  detail.current = null;
  leavePresence();
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

async function showCosts() {
  detail.current = null;
  leavePresence();
  show("costs");
  document.title = "Costs · Support queue";
  // Not refreshed by the live queue: the person may be choosing days; a new visit or the Show button reads it again.
  await loadCosts();
  if (view === "costs") $("#costs-title").focus({ preventScroll: true });
}

let routeId = null;
let pendingMessage;

/** The address says what to show: #/item/<id> for an item, anything else for the list. */
function route() {
  if (!signedIn) return;
  const previous = routeId;
  if (location.hash === "#/costs") {
    routeId = null;
    return showCosts();
  }
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
  if (view === "queue") {
    if (key === "j" || key === "ArrowDown") moveInList(1);
    else if (key === "k" || key === "ArrowUp") moveInList(-1);
    else if (key === "/") $("#search").focus();
    else return;
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
  $("#sign-in").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const { status, data } = await api("POST", "/admin/session", { email: form.get("email"), password: form.get("password") });
    $("#sign-in .error").textContent = status === 200 ? "" : (data.error ?? "could not sign in");
    if (status === 200) start();
  });
  $("#back").addEventListener("click", () => go(""));
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
