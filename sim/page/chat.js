// The demo's chat page: a small script over the demo's JSON API (/demo/api), no build step.
// It writes as the customer you pick; the simulated Meta turns that into webhooks to the real
// backend and shows what comes back. It polls: the chat every 0.7 s, the log every second.
// biome-ignore lint/suspicious/noRedundantUseStrict: a classic script (not a module), so strict mode is not implied
"use strict";

const $ = (selector) => document.querySelector(selector);
const state = { info: null, customers: [], current: null, quote: null, lastChat: "", logAfter: 0, faultsBusy: false };

async function api(method, url, body) {
  const res = await fetch(url, {
    method,
    headers: body === undefined ? { accept: "application/json" } : { accept: "application/json", "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await res.json().catch(() => ({}));
  return { status: res.status, data };
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const labelOf = (c) => (c.phone ? `+${c.phone}` : `@${c.username ?? "?"} · ${c.userId}`);
const time = (iso) => new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });

// Ticks as WhatsApp draws them: a clock before Meta has it, one tick sent, two delivered, two blue read.
const TICKS = {
  sending: ["◷", "on its way to the backend (POST /webhook not answered 200 yet)"],
  accepted: ["◷", "Meta took it; no status webhook recorded yet"],
  sent: ["✓", "sent (the backend recorded Meta's status webhook)"],
  delivered: ["✓✓", "delivered"],
  read: ["✓✓", "read"],
  failed: ["⚠", "failed"],
};

function renderCustomers() {
  const list = $("#customer-list");
  list.replaceChildren();
  for (const c of state.customers) {
    const li = el("li");
    const button = el("button", c.key === state.current ? "customer current" : "customer");
    button.type = "button";
    button.dataset.key = c.key;
    button.append(el("strong", "", c.name), el("span", "who", labelOf(c)));
    button.addEventListener("click", () => openChat(c.key));
    li.append(button);
    list.append(li);
  }
}

async function loadCustomers() {
  const { data } = await api("GET", "/demo/api/customers");
  state.customers = data.customers ?? [];
  renderCustomers();
}

function openChat(key) {
  state.current = key;
  state.lastChat = "";
  state.quote = null;
  $("#quote-preview").hidden = true;
  const c = state.customers.find((x) => x.key === key);
  // This is the customer's phone: the chat is with the business.
  $("#chat-subtitle").textContent = c ? `You are ${c.name}, ${c.phone ? `+${c.phone}` : `number hidden (BSUID ${c.userId})`}` : "";
  $("#text").disabled = false;
  $("#send").disabled = false;
  $("#text").focus();
  renderCustomers();
  filterLog();
  pollChat();
}

function menuCard() {
  const li = el("li", "msg out menu");
  li.append(el("div", "text", state.info.menu.text));
  const buttons = el("div", "buttons");
  for (const b of state.info.menu.buttons) {
    const button = el("button", "", b.title);
    button.type = "button";
    button.addEventListener("click", () => send({ button: { id: b.id, title: b.title } }));
    buttons.append(button);
  }
  li.append(buttons);
  return li;
}

function bubble(m) {
  const li = el("li", `msg ${m.direction}`);
  li.dataset.id = m.id;
  li.dataset.status = m.status;
  if (m.replyTo) li.append(el("div", `quote ${m.replyTo.direction}`, m.replyTo.text.slice(0, 140)));
  if (m.media?.mimeType.startsWith("image/")) {
    const img = el("img", "thumb");
    img.src = m.media.url;
    img.alt = "the image sent";
    li.append(img);
  } else if (m.media?.mimeType.startsWith("audio/")) {
    li.append(el("div", "file", "🎤 Voice note"));
  } else if (m.media) {
    const a = el("a", "file", `PDF: ${m.media.filename ?? "document"}`);
    a.href = m.media.url;
    a.target = "_blank";
    li.append(a);
  }
  if (!m.media || m.text !== (m.media.filename ?? (m.media.mimeType.startsWith("audio/") ? "Voice note" : "Photo"))) li.append(el("div", "text", m.text));
  const meta = el("div", "meta");
  if (m.part) meta.append(el("span", "part", `part ${m.part.n} of ${m.part.of}`));
  meta.append(el("span", "time", time(m.at)));
  const [mark, title] = TICKS[m.status] ?? ["?", m.status];
  const ticks = el("span", `ticks ${m.status}`, mark);
  ticks.title = title;
  ticks.setAttribute("aria-label", m.status);
  meta.append(ticks);
  const reply = el("button", "reply", "↩");
  reply.type = "button";
  reply.title = "Reply to this message (a quote)";
  reply.setAttribute("aria-label", "Reply to this message");
  reply.addEventListener("click", () => {
    state.quote = m.id;
    $("#quote-text").textContent = m.text.slice(0, 80);
    $("#quote-preview").hidden = false;
    $("#text").focus();
  });
  meta.append(reply);
  li.append(meta);
  return li;
}

async function pollChat() {
  const key = state.current;
  if (!key) return;
  const { status, data } = await api("GET", `/demo/api/chats/${encodeURIComponent(key)}`);
  if (status !== 200 || key !== state.current) return;
  const json = JSON.stringify(data);
  if (json === state.lastChat) return;
  state.lastChat = json;
  const list = $("#messages");
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  list.replaceChildren(menuCard(), ...data.messages.map(bubble));
  if (atBottom) list.scrollTop = list.scrollHeight;
  $("#typing").hidden = !data.typing;
  $("#dead-letter-banner").hidden = !data.openDeadLetters;
}

async function send(message) {
  if (!state.current) return;
  const c = state.customers.find((x) => x.key === state.current);
  const who = c.phone ? { from: c.phone } : { userId: c.userId };
  const quote = state.quote && !message.button ? { replyTo: state.quote } : {};
  const { status, data } = await api("POST", "/demo/api/messages", { ...who, ...message, ...quote });
  $("#composer-error").textContent = status === 202 ? "" : (data.error ?? `not sent (${status})`);
  if (status !== 202) return false;
  state.quote = null;
  $("#quote-preview").hidden = true;
  $("#messages").scrollTop = $("#messages").scrollHeight;
  pollChat();
  return true;
}

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function sendFile(file) {
  if (file.size > 5 * 1024 * 1024) {
    $("#composer-error").textContent = "Files up to 5 MB (WhatsApp's image limit).";
    return;
  }
  const data = await readFile(file);
  const caption = $("#text").value.trim();
  const media =
    file.type === "application/pdf"
      ? { document: { data, mimeType: file.type, filename: file.name, ...(caption ? { caption } : {}) } }
      : { image: { data, mimeType: file.type, ...(caption ? { caption } : {}) } };
  if (await send(media)) $("#text").value = "";
}

/** "This chat only" hides the log lines of other chats. */
function filterLog() {
  for (const li of $("#log").children) li.hidden = $("#log-this-chat").checked && li.dataset.chat !== state.current;
}

async function pollLog() {
  const { status, data } = await api("GET", `/demo/api/events?after=${state.logAfter}`);
  if (status !== 200) return;
  const log = $("#log");
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  for (const e of data.events) {
    const li = el("li", `${e.kind}${e.ok ? "" : " bad"}`);
    li.dataset.chat = e.chat ?? "";
    li.append(el("time", "", time(e.at)), el("span", "", ` ${e.text}`));
    li.hidden = $("#log-this-chat").checked && li.dataset.chat !== state.current;
    log.append(li);
  }
  while (log.children.length > 400) log.firstElementChild.remove();
  if (atBottom) log.scrollTop = log.scrollHeight;
  state.logAfter = data.last;
  if (!state.faultsBusy) showFaults(data.faults);
}

function showFaults(faults) {
  const form = $("#faults");
  form.elements.duplicates.checked = faults.duplicates;
  form.elements.statusesOutOfOrder.checked = faults.statusesOutOfOrder;
  form.elements.send.value = faults.send ?? "";
  form.elements.claude.value = faults.claude ?? "";
  form.elements.shop.value = faults.shop ?? "";
}

async function changeFaults() {
  const form = $("#faults");
  state.faultsBusy = true;
  const { data } = await api("POST", "/demo/api/faults", {
    duplicates: form.elements.duplicates.checked,
    statusesOutOfOrder: form.elements.statusesOutOfOrder.checked,
    send: form.elements.send.value || null,
    shop: form.elements.shop.value || null,
    ...(state.info.claude === "offline" ? { claude: form.elements.claude.value || null } : {}),
  });
  state.faultsBusy = false;
  if (data.send !== undefined) showFaults(data);
  pollLog();
}

function randomBsuid() {
  const digits = Array.from(crypto.getRandomValues(new Uint8Array(20)), (b) => String(b % 10)).join("");
  return `US.${digits}`;
}

async function addCustomer(event) {
  event.preventDefault();
  const form = event.target;
  const kind = form.elements.kind.value;
  const body =
    kind === "phone"
      ? { name: form.elements.name.value, phone: form.elements.phone.value }
      : { username: form.elements.username.value, userId: form.elements.userId.value };
  const { status, data } = await api("POST", "/demo/api/customers", body);
  form.querySelector(".error").textContent = status === 201 ? "" : (data.error ?? `not added (${status})`);
  if (status !== 201) return;
  form.reset();
  form.elements.userId.value = randomBsuid();
  showKind("phone");
  await loadCustomers();
  openChat(data.customer.key);
}

function showKind(kind) {
  for (const label of document.querySelectorAll("#new-customer [data-kind]")) label.hidden = label.dataset.kind !== kind;
}

async function start() {
  const { data } = await api("GET", "/demo/api/info");
  state.info = data;
  $("#chat-title").textContent = data.business.name;
  $("#staff-note").textContent = `Staff page: sign in as ${data.staff.email} with the password printed in the terminal.`;
  $("#about").textContent =
    `Meta is simulated on this machine; nothing reaches WhatsApp. Claude: ${data.claude === "offline" ? "the offline responder (start with ANTHROPIC_API_KEY for the real Claude)" : "the real Claude"}.`;
  if (data.claude !== "offline") {
    for (const input of document.querySelectorAll("#claude-faults input")) input.disabled = true;
    $("#claude-note").textContent = "Claude is real in this run: it cannot be told to fail.";
  }
  await loadCustomers();
  if (state.customers.length > 0) openChat(state.customers[0].key);
  setInterval(pollChat, 700);
  setInterval(pollLog, 1000);
  pollLog();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#composer").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = $("#text").value.trim();
    if (!text) return;
    if (await send({ text })) $("#text").value = "";
  });
  $("#file").addEventListener("change", async (event) => {
    const file = event.target.files[0];
    event.target.value = "";
    if (file) await sendFile(file);
  });
  $("#voice").addEventListener("click", async () => {
    const says = $("#text").value.trim();
    if (!says) {
      $("#composer-error").textContent = "Type what the voice note says, then press the microphone.";
      return;
    }
    if (await send({ voice: { says } })) $("#text").value = "";
  });
  $("#location-toggle").addEventListener("click", () => {
    $("#location-form").hidden = !$("#location-form").hidden;
  });
  $("#location-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = event.target.elements;
    const location = {
      latitude: Number(f.latitude.value),
      longitude: Number(f.longitude.value),
      ...(f.name.value.trim() ? { name: f.name.value.trim() } : {}),
    };
    if (await send({ location })) $("#location-form").hidden = true;
  });
  $("#quote-cancel").addEventListener("click", () => {
    state.quote = null;
    $("#quote-preview").hidden = true;
  });
  $("#faults").addEventListener("change", changeFaults);
  $("#log-this-chat").addEventListener("change", filterLog);
  $("#new-customer").addEventListener("submit", addCustomer);
  for (const radio of document.querySelectorAll('#new-customer input[name="kind"]')) radio.addEventListener("change", () => showKind(radio.value));
  $("#new-customer").elements.userId.value = randomBsuid();
  start();
});
