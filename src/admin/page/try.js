// The "Try it" view (issue 34.2), for operators: write as a customer, read what the bot would
// answer through POST /admin/playground (nothing sent, nothing stored), with why and what it
// cost, and keep the conversation as an eval file's test case.

import { api } from "./api.js";
import { $, h } from "./dom.js";

/** The customer's messages so far; each send asks for the whole conversation again. */
const tried = { turns: [], answers: null };

const HOW_WORDS = { stubbed: "answered by your tool answers", executed: "run for real (a read)", not_run: "not run (an action): Claude was told so" };
const usd = (amount) => (amount === null ? "unpriced" : `$${amount.toLocaleString("en-GB", { maximumFractionDigits: 4 })}`);

/** Reads the numbers that can be tried (once a visit); false when the person may not try. */
export async function loadTry() {
  const { status, data } = await api("GET", "/admin/playground");
  if (status !== 200) {
    $("#try-status").textContent = data.error ?? "The playground could not be read.";
    return false;
  }
  const select = $("#try-number");
  const chosen = select.value;
  select.replaceChildren(
    ...data.numbers.map((n) =>
      h(
        "option",
        { value: n.phoneNumberId },
        `${n.phoneNumberId}${n.tools.length ? ` (tools: ${n.tools.join(", ")})` : ""}${n.knowledge ? ", with knowledge" : ""}`,
      ),
    ),
  );
  if (chosen) select.value = chosen;
  if (data.numbers.length === 0) $("#try-status").textContent = "No business number is configured (PHONE_NUMBERS_FILE).";
  return true;
}

/** Why the bot said one answer: the knowledge it cited and the tools it asked for. */
function why(answerIndex, data) {
  const citations = data.citations.filter((c) => c.turn === answerIndex);
  const calls = data.toolCalls.filter((c) => c.turn === answerIndex);
  if (citations.length === 0 && calls.length === 0) return null;
  return h(
    "li",
    { class: "work" },
    h(
      "details",
      {},
      h(
        "summary",
        {},
        `Why the bot said this: ${[citations.length ? `${citations.length} cited` : null, calls.length ? `${calls.length} tool call${calls.length === 1 ? "" : "s"}` : null].filter(Boolean).join(", ")}`,
      ),
      citations.length
        ? h(
            "ol",
            { class: "citations", "aria-label": "Sources cited" },
            citations.map((c) => h("li", { class: "citation" }, h("span", { class: "source" }, c.source), h("blockquote", {}, c.citedText))),
          )
        : null,
      calls.length
        ? h(
            "ol",
            { class: "tool-calls", "aria-label": "Business actions" },
            calls.map((c) =>
              h(
                "li",
                { class: `tool-call${c.isError ? " tool-error" : ""}` },
                h("span", { class: "source" }, c.name),
                ` · ${HOW_WORDS[c.how] ?? c.how}`,
                h("code", { class: "tool-input" }, JSON.stringify(c.input)),
                h("pre", { class: "tool-answer" }, c.answer),
              ),
            ),
          )
        : null,
    ),
  );
}

function render() {
  const items = [];
  const data = tried.answers;
  tried.turns.forEach((turn, i) => {
    items.push(h("li", { class: "bubble in" }, h("span", { class: "sr-only" }, "Customer: "), h("span", { class: "text" }, turn)));
    const text = data?.answers[i];
    if (text === undefined) return;
    items.push(
      h("li", { class: "bubble out" }, h("span", { class: "sr-only" }, "Bot: "), h("span", { class: "text" }, text || "(nothing: HANDOFF_REPLY is empty)")),
    );
    const work = why(i, data);
    if (work) items.push(work);
  });
  if (data?.handoff) items.push(h("li", { class: "day" }, `Handed to a person: ${data.handoff}`));
  $("#try-chat").replaceChildren(...items);
  $("#try-save").disabled = !data;
}

async function send(event) {
  event.preventDefault();
  const message = $("#try-message").value.trim();
  if (!message) return;
  let tools;
  const stubs = $("#try-stubs").value.trim();
  if (stubs) {
    try {
      tools = JSON.parse(stubs);
    } catch {
      $("#try-status").textContent = "The tool answers are not JSON: fix them or empty the box.";
      $("#try-stubs").focus();
      return;
    }
  }
  const turns = [...tried.turns, message];
  $("#try-send").disabled = true;
  $("#try-status").textContent = "Asking Claude…";
  const { status, data } = await api(
    "POST",
    "/admin/playground",
    { phoneNumberId: $("#try-number").value, turns, ...(tools ? { tools } : {}) },
    crypto.randomUUID(),
  );
  $("#try-send").disabled = false;
  if (status !== 200) {
    $("#try-status").textContent = `Not answered: ${data.error ?? `the server answered ${status}`}`;
    return;
  }
  tried.turns = turns;
  tried.answers = data;
  $("#try-message").value = "";
  render();
  $("#try-status").textContent =
    `Answered: ${data.usage.calls} Claude call${data.usage.calls === 1 ? "" : "s"}, ${data.usage.input} tokens in and ${data.usage.output} out, ${usd(data.costUsd)}.`;
  $("#try-message").focus();
}

/** A string as YAML reads it: JSON's double-quoted form is valid YAML. */
const yamlString = (text) => JSON.stringify(text);

/** The conversation as a case of an eval file (docs/eval.md), with the last answer's citations and tools as expectations to start from. */
function asCase() {
  const data = tried.answers;
  const last = data.answers.length - 1;
  const cites = [...new Set(data.citations.filter((c) => c.turn === last).map((c) => c.source))];
  const tools = data.toolCalls.filter((c) => c.how !== "not_run");
  const lines = [
    `  - name: ${yamlString(tried.turns[0].slice(0, 60))}`,
    `    turns: [${tried.turns.map(yamlString).join(", ")}]`,
    "    expect:",
    `      handoff: ${data.handoff ? "true" : "false"}`,
  ];
  if (cites.length) lines.push(`      cites: [${cites.map(yamlString).join(", ")}]`);
  if (tools.length) lines.push(`      tools: [${tools.map((c) => `{ name: ${c.name}, input: ${JSON.stringify(c.input)} }`).join(", ")}]`);
  else lines.push("      noTools: true");
  lines.push(`      # what the answer must say, e.g. contains: ["…"], or rubric: "…" (the bot said: ${yamlString((data.answers[last] ?? "").slice(0, 120))})`);
  return `${lines.join("\n")}\n`;
}

function save() {
  if (!tried.answers) return;
  $("#try-case").textContent = asCase();
  $("#try-case-box").hidden = false;
  $("#try-download").focus();
}

/** The case shown, as a file: a link made for the one click (the page holds no address to keep). */
function download() {
  const url = URL.createObjectURL(new Blob([$("#try-case").textContent], { type: "text/yaml" }));
  const link = h("a", { href: url, download: "case.yaml" });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function reset() {
  tried.turns = [];
  tried.answers = null;
  render();
  $("#try-case-box").hidden = true;
  $("#try-status").textContent = "";
  $("#try-message").focus();
}

export function wireTry() {
  $("#try-form").addEventListener("submit", send);
  $("#try-reset").addEventListener("click", reset);
  $("#try-save").addEventListener("click", save);
  $("#try-download").addEventListener("click", download);
  $("#try-number").addEventListener("change", reset);
}
