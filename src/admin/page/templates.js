// "Send a template" on an item (issue 21): pick one of the business account's approved templates,
// fill its {{1}}, {{2}}… (the customer's name offered for {{1}}), see the message as the customer
// will, and send it once. One Idempotency-Key per draft: clicking again sends the same request
// with the same key, so it is replayed or refused, never sent twice; changing the draft makes a new one.

import { api } from "./api.js";
import { $, h } from "./dom.js";
import { startedAnswering } from "./presence.js";

/** The account's approved templates, read once per page (the server caches Meta's list too). */
let catalog;
/** The draft on screen: which item, and the key its request goes with. */
const draft = { itemId: null, key: null };

async function templates() {
  if (catalog) return catalog;
  const { status, data } = await api("GET", "/admin/templates");
  if (status !== 200) return { configured: false, templates: [], error: data.error };
  catalog = data;
  return catalog;
}

const fill = (body, values) => body.replace(/\{\{\s*(\d+)\s*\}\}/g, (whole, n) => values[Number(n) - 1] || whole);

const chosen = () => catalog?.templates[Number($("#template-pick").value)];
const values = () => [...document.querySelectorAll("#template-params input")].map((input) => input.value.trim());

function renderPreview() {
  const template = chosen();
  $("#template-preview").textContent = template ? fill(template.body, values()) || `Template “${template.name}” (it has no body text)` : "";
  const missing = template ? values().filter((value) => !value).length : 0;
  $("#template-missing").textContent = missing ? `Fill in ${missing === 1 ? "the empty value" : `the ${missing} empty values`} before sending.` : "";
}

/** A changed draft is a new request: it gets a new key. */
function draftChanged() {
  draft.key = crypto.randomUUID();
  renderPreview();
}

function renderParameters(customerName) {
  const template = chosen();
  const fields = [];
  for (let n = 1; n <= (template?.parameterCount ?? 0); n++) {
    const id = `template-param-${n}`;
    fields.push(
      h(
        "div",
        { class: "template-param" },
        h("label", { for: id }, n === 1 && customerName ? `{{${n}}} (the customer's name is offered)` : `{{${n}}}`),
        h("input", { id, autocomplete: "off", maxlength: "1024", value: n === 1 && customerName ? customerName : "" }),
      ),
    );
  }
  $("#template-params").replaceChildren(...fields);
  for (const input of document.querySelectorAll("#template-params input"))
    input.addEventListener("input", () => {
      startedAnswering();
      draftChanged();
    });
  draftChanged();
}

/**
 * Shows the template box for this item: first for a closed window (only a template reaches the
 * customer then), after the free text while the window is open. A fresh item starts a new draft;
 * a refresh never touches the one being written.
 */
export async function renderTemplates(data, fresh) {
  const box = $("#template-box");
  const { configured, templates: list } = await templates();
  // A failed reply is resolved by a template; a waiting customer gets one as the person's message.
  const usable = configured && list.length > 0;
  box.hidden = !usable;
  if (!usable) return;
  const closed = !data.conversation.windowOpen || data.explanation.kind === "window_closed";
  const reply = $("#free-text");
  if (closed) reply.before(box);
  else reply.after(box);
  const open = data.state === "open";
  for (const control of box.querySelectorAll("select, input, button")) control.disabled = !open;
  if (!fresh && draft.itemId === data.id) return;
  draft.itemId = data.id;
  $("#template-pick").replaceChildren(
    ...list.map((template, index) =>
      h(
        "option",
        { value: String(index) },
        `${template.name} (${template.language}, ${template.category.toLowerCase()}${template.price !== null ? `, ${template.price} per message` : ""})`,
      ),
    ),
  );
  renderParameters(data.conversation.contact.name ?? "");
}

/** Wires the picker once. */
export function wireTemplates() {
  $("#template-pick").addEventListener("change", () => renderParameters(values()[0] ?? ""));
}

/** The request "Send this template" makes, with the draft's key; undefined (and why, on screen) when the draft is not complete. */
export function templateRequest(id) {
  const template = chosen();
  if (!template) return undefined;
  if (values().some((value) => !value)) {
    renderPreview();
    [...document.querySelectorAll("#template-params input")].find((input) => !input.value.trim())?.focus();
    return undefined;
  }
  const body = { name: template.name, language: template.language, parameters: values() };
  // A confirmed maybe-sent resend is another request than the plain one: it gets a key of its own.
  return (extra) => api("POST", `/admin/dlq/${id}/template`, { ...body, ...extra }, extra.confirmMaybeSent ? `${draft.key}.confirmed` : draft.key);
}
