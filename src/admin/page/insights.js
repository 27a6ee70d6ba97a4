// The Insights view (issue 33): whether the bot does its job, per UTC day and in total, from
// GET /admin/insights: conversations and the share it resolved alone, how long customers
// waited, handoffs and items, cost per conversation, CSAT; and why, in tables.

import { api } from "./api.js";
import { COLOURS, drawChart } from "./charts.js";
import { $, h } from "./dom.js";

const DAY_MS = 86_400_000;
const utcDay = (at) => new Date(at).toISOString().slice(0, 10);
const whole = new Intl.NumberFormat("en-GB");
const percent = (rate) => (rate === null ? "–" : `${Math.round(rate * 100)}%`);
const seconds = (ms) => (ms === null ? "–" : `${(ms / 1000).toLocaleString("en-GB", { maximumFractionDigits: 1 })} s`);
const usd = (amount) => `$${amount.toLocaleString("en-GB", { minimumFractionDigits: 2, maximumFractionDigits: 4 })}`;
const plain = (amount) => amount.toLocaleString("en-GB", { maximumFractionDigits: 4 });
/** A per-conversation figure: null (no point drawn) on a day without conversations. */
const perConversation = (amount, figures) => (figures.conversations ? amount / figures.conversations : null);

/** Reads the days and number the form asks for; true when it could. */
export async function loadInsights() {
  const form = $("#insights-range");
  const params = new URLSearchParams();
  for (const name of ["from", "to", "phoneNumberId"]) if (form.elements[name].value.trim()) params.set(name, form.elements[name].value.trim());
  const { status, data } = await api("GET", `/admin/insights?${params}`);
  if (status !== 200) {
    $("#insights-status").textContent = data.error ?? "The insights could not be read.";
    return false;
  }
  form.elements.from.value = data.from;
  form.elements.to.value = data.to;
  const number = form.elements.phoneNumberId.value.trim();
  $("#insights-status").textContent =
    `${data.from} to ${data.to}, ${number ? `business number ${number}` : "every business number"}: ` +
    (data.total.conversations === 0 ? "no customer wrote." : `${whole.format(data.total.conversations)} conversations.`);
  renderTotals(data);
  drawCharts(data);
  renderTables(data);
  return true;
}

function renderTotals(data) {
  const t = data.total;
  const csat = t.csat;
  const cards = [
    ["Conversations", whole.format(t.conversations), `${whole.format(t.inbound)} customer messages`],
    ["Resolved by the bot", percent(t.automationRate), `${whole.format(t.resolvedByBot)} of ${whole.format(t.conversations)} conversations`],
    ["First reply", seconds(t.firstReplyMs.p50), `median; 95% within ${seconds(t.firstReplyMs.p95)}`],
    ["Handed to a person", whole.format(t.handedOff), `${whole.format(t.deadLettered)} with another item for staff`],
    ["Delivered", whole.format(t.delivered), `${whole.format(t.read)} read`],
    [
      "Rated good",
      csat.answered ? percent(csat.good / csat.answered) : "–",
      `${whole.format(csat.answered)} of ${whole.format(csat.asked)} asked answered (${csat.good} good, ${csat.okay} okay, ${csat.bad} bad)`,
    ],
    [
      "Cost per conversation",
      t.conversations ? usd(t.claudeUsd / t.conversations) : "–",
      `Claude ${usd(t.claudeUsd)}${data.rateCard ? `; Meta ${plain(t.meta)} (rate card)` : ""}`,
    ],
  ];
  $("#insights-totals").replaceChildren(
    ...cards.map(([name, value, detail]) => h("div", { class: "total" }, h("dt", {}, name), h("dd", {}, h("strong", {}, value), h("span", {}, detail)))),
  );
}

function drawCharts(data) {
  const days = data.days.map((d) => d.day);
  const column = (pick) => data.days.map(pick);
  const chart = (name) => $(`#insights [data-chart="${name}"]`);
  const t = data.total;
  drawChart(
    chart("conversations"),
    days,
    [
      { label: "Conversations", values: column((d) => d.conversations), colour: COLOURS.blue, bars: "centre" },
      {
        label: "Resolved by the bot (%)",
        values: column((d) => (d.automationRate === null ? null : d.automationRate * 100)),
        colour: COLOURS.green,
        scale: "right",
      },
    ],
    { left: "count", right: "percent" },
    `${t.conversations} conversations, ${percent(t.automationRate)} resolved by the bot`,
  );
  drawChart(
    chart("firstReply"),
    days,
    [
      { label: "Median (p50)", values: column((d) => (d.firstReplyMs.p50 === null ? null : d.firstReplyMs.p50 / 1000)), colour: COLOURS.blue },
      { label: "95th percentile", values: column((d) => (d.firstReplyMs.p95 === null ? null : d.firstReplyMs.p95 / 1000)), colour: COLOURS.amber },
    ],
    { left: "seconds" },
    `median ${seconds(t.firstReplyMs.p50)}, 95th percentile ${seconds(t.firstReplyMs.p95)}`,
  );
  drawChart(
    chart("handoffs"),
    days,
    [
      { label: "Handed to a person", values: column((d) => d.handedOff), colour: COLOURS.blue, bars: "left" },
      { label: "Other items for staff", values: column((d) => d.deadLettered), colour: COLOURS.red, bars: "right" },
    ],
    { left: "count" },
    `${t.handedOff} handed to a person, ${t.deadLettered} with another item; the reasons are in the tables below`,
  );
  const costSeries = [{ label: "Claude (USD)", values: column((d) => perConversation(d.claudeUsd, d)), colour: COLOURS.blue }];
  if (data.rateCard) costSeries.push({ label: "Meta (rate card)", values: column((d) => perConversation(d.meta, d)), colour: COLOURS.amber, scale: "right" });
  drawChart(
    chart("cost"),
    days,
    costSeries,
    data.rateCard ? { left: "usd", right: "plain" } : { left: "usd" },
    t.conversations ? `Claude ${usd(t.claudeUsd / t.conversations)} per conversation` : "no conversations",
  );
  // Stacked by hand: each bar is drawn over the taller one before it, so its top shows its own share.
  drawChart(
    chart("csat"),
    days,
    [
      { label: "Bad", values: column((d) => d.csat.good + d.csat.okay + d.csat.bad), colour: COLOURS.red, bars: "centre" },
      { label: "Okay", values: column((d) => d.csat.good + d.csat.okay), colour: COLOURS.amber, bars: "centre" },
      { label: "Good", values: column((d) => d.csat.good), colour: COLOURS.green, bars: "centre" },
    ],
    { left: "count" },
    `${t.csat.good} good, ${t.csat.okay} okay, ${t.csat.bad} bad of ${t.csat.answered} answers`,
  );
}

const cell = (value, numeric) => h("td", { class: numeric ? "num" : undefined }, value);
const emptyRow = (columns, words) => h("tr", {}, h("td", { colspan: String(columns) }, words));

function renderTables(data) {
  const fill = (selector, rows, columns, words) => $(`${selector} tbody`).replaceChildren(...(rows.length ? rows : [emptyRow(columns, words)]));
  fill(
    "#handoff-reasons",
    data.handoffReasons.map((r) => h("tr", {}, h("th", { scope: "row" }, r.reason), cell(whole.format(r.count), true))),
    2,
    "No customer was handed to a person.",
  );
  fill(
    "#item-reasons",
    data.deadLetterReasons.map((r) => h("tr", {}, h("th", { scope: "row" }, r.label), cell(whole.format(r.count), true))),
    2,
    "No other item was opened.",
  );
  fill(
    "#knowledge-table",
    data.knowledge.map((k) =>
      h("tr", { class: k.citations ? undefined : "unused" }, h("th", { scope: "row" }, k.source), cell(k.phoneNumberId), cell(whole.format(k.citations), true)),
    ),
    3,
    "No knowledge files (knowledgeDir in PHONE_NUMBERS_FILE).",
  );
  fill(
    "#tools-table",
    data.tools.map((t) =>
      h(
        "tr",
        {},
        h("th", { scope: "row" }, t.name),
        cell(whole.format(t.calls), true),
        cell(whole.format(t.failed), true),
        cell(whole.format(t.unknown), true),
      ),
    ),
    4,
    "No business tool was called.",
  );
  const days = data.days.map((d) =>
    h(
      "tr",
      {},
      h("th", { scope: "row" }, d.day),
      cell(whole.format(d.conversations), true),
      cell(`${whole.format(d.resolvedByBot)} (${percent(d.automationRate)})`, true),
      cell(whole.format(d.inbound), true),
      cell(whole.format(d.answeredByBot), true),
      cell(`${seconds(d.firstReplyMs.p50)} / ${seconds(d.firstReplyMs.p95)}`, true),
      cell(whole.format(d.handedOff), true),
      cell(whole.format(d.deadLettered), true),
      cell(`${whole.format(d.delivered)} / ${whole.format(d.read)}`, true),
      cell(`${d.csat.good} / ${d.csat.okay} / ${d.csat.bad} (${d.csat.asked})`, true),
      cell(usd(d.claudeUsd), true),
      cell(data.rateCard ? plain(d.meta) : "–", true),
    ),
  );
  $("#insights-table tbody").replaceChildren(...days);
}

export function wireInsights() {
  const form = $("#insights-range");
  form.elements.to.value = utcDay(Date.now());
  form.elements.from.value = utcDay(Date.now() - 6 * DAY_MS);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    loadInsights();
  });
}
