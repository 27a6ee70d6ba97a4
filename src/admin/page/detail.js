// One item: the conversation as chat bubbles with the failed reply in place, the error in plain
// words, the reply to send, and the actions. Refreshed while open, never over a person's typing.

import { api } from "./api.js";
import { chatItems } from "./chat.js";
import { $, $$, ago, fullDate, h } from "./dom.js";
import { lookAgain, startedAnswering, watchPresence } from "./presence.js";
import { queue } from "./queue.js";
import { renderTemplates, templateRequest } from "./templates.js";

/** The item on screen, and the draft as last read from the server (to tell a person's edits from it). */
export const detail = { current: null, draftBaseline: "", signature: "" };

/** Text a person wrote for an item and has not sent, by item: kept when they move to another item and back. */
const unsent = new Map();

const SOURCE_WORDS = {
  graph: "Meta, when we sent it",
  status: "Meta's delivery report",
  anthropic: "Claude",
  window: "The 24-hour window",
  internal: "Our system",
  handoff: "The customer, or someone who paused the bot",
};

const ACTION_WORDS = {
  resend: "sent it again",
  resend_edited: "sent an edited reply",
  resend_template: "sent an approved template",
  regenerate: "asked Claude for a new reply",
  discard: "discarded it",
  pause_bot: "paused the bot",
  resume_bot: "resumed the bot",
  staff_reply: "wrote to the customer",
  give_back: "gave the conversation back to the bot",
  take_over: "took the item over",
  failed_again: "it failed again",
  holding_reply: "the customer was told a person will answer",
  holding_failed: "the customer's holding message could not be sent",
  reopen: "it was reopened (the resend could not be queued)",
};

/** Shows item `id`, unless `stillWanted()` says the person has moved on meanwhile; false when it could not be read. */
export async function openItem(id, stillWanted = () => true) {
  const { status, data } = await api("GET", `/admin/dlq/${id}`);
  if (status !== 200) return false;
  if (!stillWanted()) return true;
  detail.current = null;
  detail.signature = "";
  $("#note").value = "";
  $("#result").textContent = "";
  $("#draft-note").hidden = true;
  render(data, { fresh: true });
  watchPresence(id);
  return true;
}

/** Reads the item on screen again (new messages, delivery ticks, someone else acting on it). */
export async function refreshDetail() {
  if (!detail.current) return;
  const { status, data } = await api("GET", `/admin/dlq/${detail.current.id}`);
  if (status === 200 && data.id === detail.current?.id) render(data, { fresh: false });
}

function render(data, { fresh }) {
  const signature = JSON.stringify(data) + Math.floor(Date.now() / 60000);
  if (!fresh && signature === detail.signature) return;
  detail.signature = signature;
  detail.current = data;
  const contact = data.conversation.contact;
  $("#detail-title").textContent = contact.name || contact.label;
  document.title = `${contact.name || contact.label} · Support queue`;
  $("#detail-sub").textContent = [
    contact.name ? contact.label : null,
    `came in ${ago(data.createdAt)}`,
    `business number id ${data.conversation.phoneNumberId}`,
  ]
    .filter(Boolean)
    .join(" · ");
  $("#detail-conversation").href = `#/conversations/${data.conversation.id}`;
  renderPager(data.id);
  renderExplanation(data);
  renderNotes(data);
  renderTimeline(data);
  renderDraft(data, fresh);
  renderActions(data);
  renderTemplates(data, fresh);
  $("#actions").replaceChildren(
    ...data.actions.map((action) =>
      h(
        "li",
        {},
        h("time", { datetime: action.at }, fullDate(action.at)),
        ` ${action.actor}: ${ACTION_WORDS[action.action] ?? action.action}`,
        action.detail?.note ? ` (“${action.detail.note}”)` : "",
        action.action === "take_over" && action.detail?.from ? ` from ${action.detail.from}` : "",
        action.detail?.template ? ` (“${action.detail.template}”, ${action.detail.language})` : "",
        action.action === "staff_reply" && !action.detail?.template && action.detail?.text ? `: “${action.detail.text}”` : "",
      ),
    ),
  );
  if (data.actions.length === 0) $("#actions").replaceChildren(h("li", {}, "Nothing yet."));
}

function renderPager(id) {
  const at = queue.ids.indexOf(id);
  $("#position").textContent = at >= 0 ? `${at + 1} of ${queue.ids.length}` : "";
  $("#prev").disabled = at <= 0;
  $("#next").disabled = at === -1 || at >= queue.ids.length - 1;
}

/** The item `delta` places away in the list, if any. */
export const neighbour = (delta) => {
  const at = queue.ids.indexOf(detail.current?.id);
  return at >= 0 ? queue.ids[at + delta] : undefined;
};

function renderExplanation(data) {
  const why = data.explanation;
  // A customer waiting for a person: nothing went wrong, someone should answer.
  $("#why-title").textContent = data.reply ? "What went wrong" : "Why they are waiting";
  $("#explanation").className = `card kind-${why.kind}`;
  $("#why-headline").textContent = why.title;
  $("#why-text").textContent = why.text;
  $("#why-next").textContent = why.next;
  const error = data.error;
  const detailOf = error.detail ?? {};
  const rows = [
    ["Where it failed", SOURCE_WORDS[error.source] ?? error.source],
    ["Code", error.code ?? "none"],
    ["Recorded reason", error.reason],
    ["Attempts", String(data.attempts)],
    ["Meta's details", detailOf.details],
    ["Meta's trace id", detailOf.fbtraceId],
    ["Item id", data.id],
  ].filter(([, value]) => value !== undefined && value !== null && value !== "");
  $("#raw-list").replaceChildren(...rows.flatMap(([name, value]) => [h("dt", {}, name), h("dd", {}, value)]));
  $("#error").textContent = JSON.stringify(error, null, 2);
}

function renderNotes(data) {
  $("#window-warning").hidden = data.conversation.windowOpen;
  $("#maybe-sent-warning").hidden = !data.reply?.maybeSent;
  $("#delivered-note").hidden = !data.reply?.deliveredAfterAll;
  const paused = data.conversation.pausedUntil;
  $("#paused-note").hidden = !paused;
  if (paused) {
    const indefinitely = new Date(paused).getFullYear() > 9000;
    const by =
      data.conversation.pausedBy === "business app"
        ? " (a person answered from the WhatsApp Business app)"
        : data.conversation.pausedBy === "claude"
          ? " (Claude handed the customer to a person)"
          : data.conversation.pausedBy
            ? ` (by ${data.conversation.pausedBy})`
            : "";
    $("#paused-note").textContent = indefinitely
      ? `The bot is paused for this conversation until someone resumes it${by}.`
      : `The bot is paused for this conversation until ${new Date(paused).toLocaleString()}${by}; it resumes by itself then.`;
  }
  const handled = data.handled;
  $("#handled-note").hidden = data.state === "open";
  if (handled) {
    const what = { resent: "sent again", discarded: "discarded", resolved: "answered and given back to the bot" }[data.state] ?? data.state;
    $("#handled-note").textContent =
      `This item was ${what}${handled.by ? ` by ${handled.by}` : ""}${handled.at ? ` at ${fullDate(handled.at)}` : ""}${handled.note ? `, with the note “${handled.note}”` : ""}. Nothing more to do here.`;
  }
}

function renderTimeline(data) {
  const replyId = data.reply?.id;
  const failedReply = data.state === "open" && data.reply?.state === "dead" && !data.reply.deliveredAfterAll;
  const hasParts = data.timeline.some((entry) => entry.direction === "out" && entry.replyId === replyId);
  // A reply that was never written (Claude refused, the work stalled) still has its place: after the messages it answers.
  const missing = replyId && !hasParts ? { replyId, text: data.reply.draft ?? data.explanation.title } : undefined;
  $("#timeline").replaceChildren(...chatItems(data.timeline, data.replies, { failedReplyId: failedReply ? replyId : undefined, missing }));
}

function renderDraft(data, fresh) {
  const draft = $("#draft");
  const stored = data.reply?.draft ?? "";
  const edited = draft.value !== detail.draftBaseline;
  // Never over what a person is typing: only a box they are not in and have not changed follows the server.
  if (fresh) {
    const kept = unsent.get(data.id);
    draft.value = kept ?? stored;
    detail.draftBaseline = stored;
    $("#draft-note").hidden = kept === undefined;
    $("#draft-note").textContent = "This is the text you wrote earlier and have not sent.";
  } else if (document.activeElement !== draft && !edited) {
    draft.value = stored;
    detail.draftBaseline = stored;
    $("#draft-note").hidden = true;
  } else if (stored !== detail.draftBaseline) {
    detail.draftBaseline = stored;
    $("#draft-note").hidden = false;
    $("#draft-note").textContent = "The stored draft changed meanwhile; your text is kept. “Send the draft as is” sends the stored one.";
  }
  // A customer waiting for a person has no failed reply: the box is the person's own message to them.
  $("#draft-label").textContent = data.reply ? "Draft (edit before sending if needed)" : "Your message to the customer";
  draft.placeholder = data.reply
    ? stored
      ? ""
      : "No draft: write the reply here, or regenerate it with Claude."
    : data.conversation.windowOpen
      ? "Write to the customer: they read it on WhatsApp, from the business."
      : "The 24-hour window has closed: send an approved template instead.";
}

function renderActions(data) {
  const open = data.state === "open";
  const hasReply = data.reply !== null;
  // No failed reply: a customer waiting for a person, answered here and then given back.
  const waiting = !hasReply;
  const show = (action, visible) => {
    $(`[data-action="${action}"]`).hidden = !visible;
  };
  show("send-edited", hasReply);
  show("send-draft", hasReply && Boolean(data.reply.draft));
  show("regenerate", hasReply);
  show("answer", waiting);
  show("give-back", waiting && open);
  show("resume", hasReply && Boolean(data.conversation.pausedUntil));
  show("pause", hasReply);
  $("#draft").disabled = !open || (waiting && !data.conversation.windowOpen);
  for (const action of ["send-edited", "send-draft", "regenerate", "discard", "give-back"]) $(`[data-action="${action}"]`).disabled = !open;
  $('[data-action="answer"]').disabled = !open || !data.conversation.windowOpen;
  $("#note").disabled = !open;
}

const DONE = {
  "send-edited": "Sent: your reply is on its way to",
  "send-draft": "Sent: the draft is on its way to",
  regenerate: "Claude is writing a new reply for",
  "send-template": "Sent: the template is on its way to",
  discard: "Discarded the item of",
  "give-back": "The bot answers again:",
};

/**
 * Does `action` on the item on screen, asking first where it matters. Returns a sentence for
 * the list when the item is done with (sent or discarded), else undefined.
 */
export async function act(action) {
  const current = detail.current;
  if (!current) return undefined;
  const sendTemplate = action === "send-template" ? templateRequest(current.id) : undefined;
  const confirmed = askFirst(action, current, sendTemplate);
  if (!confirmed) return undefined;
  const buttons = $$("#detail [data-action]");
  for (const button of buttons) button.disabled = true;
  $("#result").textContent = "Working…";
  const { status, data } = await requestFor(action, current, confirmed.maybeSent, sendTemplate)();
  for (const button of buttons) button.disabled = false;
  renderActions(current);
  if (status >= 300 || status === 0) {
    $("#result").textContent = `Not done: ${data.error ?? `the server answered ${status}`}`;
    if (data.code === "held_by_other") lookAgain();
    await refreshDetail();
    return undefined;
  }
  return done(action, current, data);
}

/**
 * What must be settled before `action` goes: a template picked and filled, words written, and
 * the person's yes where it matters (free text past the window, a paid regenerate, a reply that
 * may already have arrived). Undefined: not now; else whether a maybe-sent resend was confirmed.
 */
function askFirst(action, current, sendTemplate) {
  const resending = action === "send-edited" || action === "send-draft" || action === "regenerate" || action === "send-template";
  if (action === "send-template" && !sendTemplate) {
    $("#result").textContent = "Pick a template and fill in every value first.";
    return undefined;
  }
  // A template is what WhatsApp allows past the window: only free text asks first.
  if (
    resending &&
    action !== "send-template" &&
    !current.conversation.windowOpen &&
    !confirm("The 24-hour window has closed: WhatsApp will most likely refuse free text until the customer writes again. Send anyway?")
  )
    return undefined;
  if (action === "regenerate" && !confirm("Regenerating calls Claude again (it costs money). Continue?")) return undefined;
  if ((action === "send-edited" || action === "answer") && !$("#draft").value.trim()) {
    $("#result").textContent = "Write the reply first: the box is empty.";
    $("#draft").focus();
    return undefined;
  }
  // Law 5: a reply that may already have arrived is sent again only when the person says so.
  const maybeSent =
    resending && current.reply?.maybeSent ? confirm("This reply may already have arrived (Meta never answered its last send). Send it again anyway?") : false;
  if (resending && current.reply?.maybeSent && !maybeSent) return undefined;
  return { maybeSent };
}

/** The request `action` makes, with one Idempotency-Key per intended action: a double click replays, never repeats. */
function requestFor(action, current, maybeSent, sendTemplate) {
  const key = crypto.randomUUID();
  const id = current.id;
  const confirmed = maybeSent ? { confirmMaybeSent: true } : {};
  const note = $("#note").value.trim();
  const requests = {
    "send-edited": () => api("POST", `/admin/dlq/${id}/retry`, { text: $("#draft").value, ...confirmed }, key),
    "send-draft": () => api("POST", `/admin/dlq/${id}/retry`, confirmed, key),
    regenerate: () => api("POST", `/admin/dlq/${id}/regenerate`, confirmed, key),
    "send-template": () => sendTemplate(confirmed),
    discard: () => api("POST", `/admin/dlq/${id}/discard`, note ? { note } : {}, key),
    answer: () => api("POST", `/admin/dlq/${id}/answer`, { text: $("#draft").value }, answerKey(id)),
    "give-back": () => api("POST", `/admin/dlq/${id}/give-back`, {}, key),
    "take-over": () => api("POST", `/admin/dlq/${id}/take-over`, undefined, key),
    pause: () => api("POST", `/admin/conversations/${current.conversation.id}/pause`, {}, key),
    resume: () => api("POST", `/admin/conversations/${current.conversation.id}/resume`, {}, key),
  };
  return requests[action];
}

/** What the page says once `action` went through; a sentence for the list when the item is done with. */
async function done(action, current, data) {
  if (action === "take-over") {
    startedAnswering();
    lookAgain();
    $("#result").textContent = data.from ? `You are answering this customer now, instead of ${data.from}.` : "You are answering this customer now.";
    await refreshDetail();
    return undefined;
  }
  if (action === "pause" || action === "resume") {
    $("#result").textContent = action === "pause" ? "The bot is paused for this conversation." : "The bot answers this conversation again.";
    await refreshDetail();
    return undefined;
  }
  unsent.delete(current.id);
  // The person keeps the conversation after writing to a waiting customer: the item stays on screen.
  if (data.state === "open") {
    answerKeys.delete(current.id);
    $("#draft").value = "";
    detail.draftBaseline = "";
    $("#draft-note").hidden = true;
    $("#result").textContent = "Sent: the customer will read it on WhatsApp. Give the conversation back to the bot when you are done.";
    await refreshDetail();
    return undefined;
  }
  const contact = current.conversation.contact;
  return `${DONE[action]} ${contact.name || contact.label}.`;
}

/**
 * One Idempotency-Key per message written to a waiting customer: pressing Send again (a double
 * click, a retry after a lost answer) replays the same request, so the customer reads it once.
 * Changing the text makes it another message, with a key of its own.
 */
const answerKeys = new Map();
const answerKey = (id) => {
  if (!answerKeys.has(id)) answerKeys.set(id, crypto.randomUUID());
  return answerKeys.get(id);
};

/** Remembers what a person types, so that leaving the item does not lose it. */
export function wireDraft() {
  $("#draft").addEventListener("input", () => {
    const id = detail.current?.id;
    if (!id) return;
    answerKeys.delete(id);
    const value = $("#draft").value;
    if (value === detail.draftBaseline) unsent.delete(id);
    else {
      unsent.set(id, value);
      startedAnswering();
    }
  });
}
