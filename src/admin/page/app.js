// The staff page: a small script over the JSON API (the one way actions happen), no build step.
// Every change carries the session's CSRF token and one Idempotency-Key per intended action,
// so a double click never acts twice.
"use strict";

const $ = (selector) => document.querySelector(selector);
let csrfToken = "";
let current = null; // the dead letter on screen
let pollTimer = 0;

async function api(method, url, body, idempotencyKey) {
  const headers = { accept: "application/json" };
  if (method !== "GET") headers["x-csrf-token"] = csrfToken;
  if (body !== undefined) headers["content-type"] = "application/json";
  if (idempotencyKey) headers["idempotency-key"] = idempotencyKey;
  const res = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: "same-origin" });
  const data = await res.json().catch(() => ({}));
  if (res.status === 401) showSignIn();
  return { status: res.status, data };
}

function show(section) {
  for (const id of ["sign-in", "queue", "detail"]) $(`#${id}`).hidden = id !== section;
  $("#sign-out").hidden = section === "sign-in";
}

function showSignIn() {
  clearInterval(pollTimer);
  show("sign-in");
  document.title = "Sign in · Dead letters";
}

const age = (iso) => {
  const minutes = Math.round((Date.now() - new Date(iso).getTime()) / 60000);
  return minutes < 60 ? `${minutes} min` : minutes < 2880 ? `${Math.round(minutes / 60)} h` : `${Math.round(minutes / 1440)} d`;
};

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.append(td);
}

async function loadQueue() {
  const params = new URLSearchParams();
  for (const [key, value] of new FormData($("#filters"))) if (value) params.set(key, String(value));
  const { status, data } = await api("GET", `/admin/dlq?${params}`);
  if (status !== 200) return;
  $("#count").textContent = `(${data.total})`;
  document.title = `(${data.total}) Dead letters`;
  const body = $("#items");
  body.replaceChildren();
  for (const item of data.items) {
    const row = document.createElement("tr");
    row.tabIndex = 0;
    row.dataset.id = item.id;
    row.dataset.deadLetterId = item.id;
    const contact = item.conversation.contact;
    cell(row, `${contact.name ?? ""} ${contact.label}`.trim());
    cell(row, item.conversation.phoneNumberId);
    cell(row, `${item.code ?? item.source}: ${item.reason}`);
    cell(row, String(item.attempts));
    cell(row, age(item.createdAt));
    cell(row, item.reply?.draft ? "yes" : "no");
    row.addEventListener("click", () => openItem(item.id));
    row.addEventListener("keydown", (e) => e.key === "Enter" && openItem(item.id));
    body.append(row);
  }
}

function showQueue() {
  current = null;
  show("queue");
  loadQueue();
  clearInterval(pollTimer);
  pollTimer = setInterval(loadQueue, 10000); // the list refreshes itself
}

async function openItem(id) {
  clearInterval(pollTimer);
  const { status, data } = await api("GET", `/admin/dlq/${id}`);
  if (status !== 200) return;
  current = data;
  show("detail");
  const contact = data.conversation.contact;
  $("#detail-title").textContent = `${contact.name ?? ""} ${contact.label} — ${data.state}`;
  $("#window-warning").hidden = data.conversation.windowOpen;
  $("#maybe-sent-warning").hidden = !data.reply?.maybeSent;
  $("#delivered-note").hidden = !data.reply?.deliveredAfterAll;
  const paused = data.conversation.pausedUntil;
  $("#paused-note").hidden = !paused;
  if (paused) {
    const indefinitely = new Date(paused).getFullYear() > 9000;
    const by = data.conversation.pausedBy === "business app" ? " (a person answered from the WhatsApp Business app)" : data.conversation.pausedBy ? ` (by ${data.conversation.pausedBy})` : "";
    $("#paused-note").textContent = indefinitely
      ? `The bot is paused for this conversation until someone resumes it${by}.`
      : `The bot is paused for this conversation until ${new Date(paused).toLocaleString()}${by}; it resumes by itself then.`;
  }
  $("#error").textContent = JSON.stringify(data.error, null, 2);
  $("#draft").value = data.reply?.draft ?? "";
  const timeline = $("#timeline");
  timeline.replaceChildren();
  for (const entry of data.timeline) {
    const li = document.createElement("li");
    li.className = entry.direction;
    const ticks = entry.direction === "out" ? ` [${entry.status ?? entry.sendState}]` : "";
    li.textContent = `${new Date(entry.at).toLocaleString()}: ${entry.text ?? `(${entry.type})`}${ticks}`;
    timeline.append(li);
  }
  const actions = $("#actions");
  actions.replaceChildren();
  for (const action of data.actions) {
    const li = document.createElement("li");
    li.textContent = `${new Date(action.at).toLocaleString()}: ${action.action} by ${action.actor}`;
    actions.append(li);
  }
  $("#result").textContent = "";
}

async function act(action) {
  if (!current) return;
  if (action !== "pause" && action !== "discard" && !current.conversation.windowOpen
      && !confirm("The 24-hour window has closed; free text will fail with 131047. Send anyway?")) return;
  if (action === "regenerate" && !confirm("Regenerating calls Claude again (it costs money). Continue?")) return;
  const resending = action === "send-edited" || action === "send-draft" || action === "regenerate";
  // Law 5: a reply that may already have arrived is sent again only when the person says so.
  const confirmMaybeSent = resending && current.reply?.maybeSent
    ? confirm("This reply may already have arrived (Meta never answered its last send). Send it again anyway?")
    : false;
  if (resending && current.reply?.maybeSent && !confirmMaybeSent) return;
  const key = crypto.randomUUID(); // one key per intended action: a double click replays, never repeats
  const id = current.id;
  const confirmed = confirmMaybeSent ? { confirmMaybeSent: true } : {};
  const requests = {
    "send-edited": () => api("POST", `/admin/dlq/${id}/retry`, { text: $("#draft").value, ...confirmed }, key),
    "send-draft": () => api("POST", `/admin/dlq/${id}/retry`, confirmed, key),
    regenerate: () => api("POST", `/admin/dlq/${id}/regenerate`, confirmed, key),
    discard: () => api("POST", `/admin/dlq/${id}/discard`, $("#note").value ? { note: $("#note").value } : {}, key),
    pause: () => api("POST", `/admin/conversations/${current.conversation.id}/pause`, {}, key),
  };
  for (const button of document.querySelectorAll(".actions button")) button.disabled = true;
  const { status, data } = await requests[action]();
  for (const button of document.querySelectorAll(".actions button")) button.disabled = false;
  $("#result").textContent = status < 300 ? `Done: ${action}.` : `Not done (${status}): ${data.error ?? "unknown error"}`;
  if (status < 300 && action !== "pause") setTimeout(showQueue, 800);
}

async function start() {
  const { status, data } = await api("GET", "/admin/session");
  if (status !== 200) return showSignIn();
  csrfToken = data.csrfToken ?? "";
  $("#who").textContent = `Signed in as ${data.email}`;
  showQueue();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#sign-in").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    const { status, data } = await api("POST", "/admin/session", { email: form.get("email"), password: form.get("password") });
    $("#sign-in .error").textContent = status === 200 ? "" : data.error ?? "could not sign in";
    if (status === 200) start();
  });
  $("#filters").addEventListener("submit", (event) => {
    event.preventDefault();
    loadQueue();
  });
  $("#bulk").addEventListener("click", async () => {
    const code = new FormData($("#filters")).get("code");
    if (!code) return alert("Type the reason code to resend first (e.g. 133004).");
    const { status, data } = await api("POST", "/admin/dlq/bulk-retry", { code }, crypto.randomUUID());
    alert(status < 300 ? `Resending ${data.resent} item(s), paced.` : `Not done: ${data.error}`);
    loadQueue();
  });
  $("#back").addEventListener("click", showQueue);
  $("#sign-out").addEventListener("click", async () => {
    await api("DELETE", "/admin/session");
    showSignIn();
  });
  for (const button of document.querySelectorAll(".actions button")) button.addEventListener("click", () => act(button.dataset.action));
  start();
});
