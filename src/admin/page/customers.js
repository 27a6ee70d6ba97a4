// The Customers view (issue 35): a customer's data found (staff), exported whole and erased on
// request (operators, each recorded), through GET /admin/contacts and its export and erase.

import { api } from "./api.js";
import { $, ago, h } from "./dom.js";

const state = { operator: false, erasing: null };

export const setOperator = (operator) => {
  state.operator = operator;
};

/** Reads the customers the search box names; nothing to read while it is empty. */
export async function loadCustomers() {
  const q = $("#customer-q").value.trim();
  if (!q) {
    $("#customer-list").replaceChildren();
    $("#customers-status").textContent = "";
    return true;
  }
  const { status, data } = await api("GET", `/admin/contacts?${new URLSearchParams({ q })}`);
  if (status !== 200) {
    $("#customers-status").textContent = data.error ?? "The customers could not be read.";
    return false;
  }
  $("#customer-list").replaceChildren(...data.contacts.map(row));
  $("#customers-status").textContent = data.contacts.length ? `${data.contacts.length} found.` : "No customer matches.";
  return true;
}

function row(contact) {
  const who = contact.name ? `${contact.name} (${contact.label})` : contact.label;
  return h(
    "li",
    { class: "item customer", dataset: { contactId: contact.id } },
    h(
      "span",
      { class: "item-top" },
      h("span", { class: "item-who" }, h("strong", {}, contact.name || contact.label), contact.name ? h("span", { class: "item-label" }, contact.label) : null),
    ),
    h(
      "span",
      { class: "item-preview" },
      `${contact.conversations} conversation${contact.conversations === 1 ? "" : "s"}${contact.lastMessageAt ? `, last active ${ago(contact.lastMessageAt)}` : ""}`,
    ),
    state.operator
      ? h(
          "span",
          { class: "actions" },
          h("button", { type: "button", "aria-label": `Export the data of ${who}`, onclick: () => exportData(contact) }, "Export (JSON)"),
          h("button", { type: "button", class: "danger", "aria-label": `Erase the data of ${who}`, onclick: () => askToErase(contact) }, "Erase…"),
        )
      : null,
  );
}

/** The export, as the file the API attaches: read with the session's cookie, saved by a link made for the one click. */
async function exportData(contact) {
  const res = await fetch(`/admin/contacts/${contact.id}/export`, { credentials: "same-origin" });
  if (!res.ok) {
    $("#customers-status").textContent = `Not exported: the server answered ${res.status}`;
    return;
  }
  const url = URL.createObjectURL(await res.blob());
  const link = h("a", { href: url, download: `customer-${contact.id}.json` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
  $("#customers-status").textContent = `Exported ${contact.label}: everything held about them, as one JSON file.`;
}

function askToErase(contact) {
  state.erasing = contact;
  $("#erase-who").textContent = contact.name ? `${contact.name} (${contact.label})` : contact.label;
  $("#erase-label").textContent = contact.label;
  $("#erase-confirm").value = "";
  $("#erase-box").hidden = false;
  $("#erase-confirm").focus();
}

async function erase() {
  const contact = state.erasing;
  if (!contact) return;
  if ($("#erase-confirm").value.trim() !== contact.label) {
    $("#customers-status").textContent = `Type ${contact.label} exactly to erase this customer.`;
    $("#erase-confirm").focus();
    return;
  }
  $("#erase-go").disabled = true;
  const { status, data } = await api("POST", `/admin/contacts/${contact.id}/erase`, { confirm: contact.label }, crypto.randomUUID());
  $("#erase-go").disabled = false;
  if (status !== 200) {
    $("#customers-status").textContent = `Not erased: ${data.error ?? `the server answered ${status}`}`;
    return;
  }
  cancel();
  await loadCustomers();
  const rows = Object.entries(data.erased)
    .filter(([, n]) => n > 0)
    .map(([kind, n]) => `${n} ${kind}`)
    .join(", ");
  $("#customers-status").textContent =
    data.redis === "pending"
      ? `Erased ${contact.label}: ${rows}. Some of their queued jobs could not be removed yet (Redis away, or one running): the workers remove them once they can.`
      : `Erased ${contact.label}: ${rows}; ${data.jobs} queued job(s) removed.`;
  $("#customer-q").focus();
}

function cancel() {
  state.erasing = null;
  $("#erase-box").hidden = true;
}

export function wireCustomers() {
  $("#customer-search").addEventListener("submit", (event) => {
    event.preventDefault();
    cancel();
    loadCustomers();
  });
  $("#erase-go").addEventListener("click", erase);
  $("#erase-cancel").addEventListener("click", cancel);
}
