// The costs view (issue 20): what replies cost per business number and UTC day, read from
// GET /admin/costs: Claude's tokens and dollars, the messages Meta priced and their amount.

import { api } from "./api.js";
import { $, h } from "./dom.js";

const DAY_MS = 86_400_000;
const utcDay = (at) => new Date(at).toISOString().slice(0, 10);

const whole = new Intl.NumberFormat("en-GB");
const money = (amount) => amount.toLocaleString("en-GB", { minimumFractionDigits: 2, maximumFractionDigits: 4 });

/** "service 4, marketing 1", or a dash. */
const byCategory = (counts) =>
  Object.entries(counts)
    .map(([category, count]) => `${category} ${whole.format(count)}`)
    .join(", ") || "–";

/** The figures of a day, or of the total, as the table's cells after its row header(s). */
function cells(figures, rateCard) {
  const { tokens, amounts } = figures;
  const unpricedMeta = amounts.unpriced.metaMessages ? ` (${amounts.unpriced.metaMessages} not priced)` : "";
  const unpricedClaude = amounts.unpriced.claudeCalls ? ` (${amounts.unpriced.claudeCalls} not priced)` : "";
  return [
    h("td", { class: "num" }, whole.format(figures.replies)),
    h("td", { class: "num" }, whole.format(figures.parts)),
    h("td", {}, byCategory(figures.messages.billable)),
    h("td", {}, byCategory(figures.messages.free)),
    h("td", { class: "num" }, `${whole.format(tokens.input)} / ${whole.format(tokens.output)}`),
    h("td", { class: "num" }, `${whole.format(tokens.cacheRead)} / ${whole.format(tokens.cacheWrite)}`),
    h("td", { class: "num" }, `$${money(amounts.claudeUsd)}${unpricedClaude}`),
    h("td", { class: "num" }, rateCard ? `${money(amounts.meta)}${unpricedMeta}` : "no rate card"),
  ];
}

/** Reads the days the form asks for; true when it could. */
export async function loadCosts() {
  const form = $("#costs-range");
  const params = new URLSearchParams();
  for (const name of ["from", "to"]) if (form.elements[name].value) params.set(name, form.elements[name].value);
  const { status, data } = await api("GET", `/admin/costs?${params}`);
  if (status !== 200) {
    $("#costs-status").textContent = data.error ?? "The costs could not be read.";
    return false;
  }
  form.elements.from.value = data.from;
  form.elements.to.value = data.to;
  const rows = data.days.map((day) => h("tr", {}, h("th", { scope: "row" }, day.day), h("td", {}, day.phoneNumberId), ...cells(day, data.rateCard)));
  $("#costs-table tbody").replaceChildren(...rows);
  $("#costs-table tfoot").replaceChildren(h("tr", {}, h("th", { scope: "row", colspan: "2" }, "Total"), ...cells(data.total, data.rateCard)));
  $("#costs-table").hidden = rows.length === 0;
  $("#costs-status").textContent =
    rows.length === 0
      ? `Nothing was spent from ${data.from} to ${data.to}.`
      : `${rows.length} ${rows.length === 1 ? "row" : "rows"}, ${data.from} to ${data.to}.`;
  return true;
}

export function wireCosts() {
  const form = $("#costs-range");
  form.elements.to.value = utcDay(Date.now());
  form.elements.from.value = utcDay(Date.now() - 6 * DAY_MS);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    loadCosts();
  });
}
