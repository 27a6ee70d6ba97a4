// Two people, one item (issue 21): while an item is open the page says so every 10 s, and that
// its person is answering once they start a reply; the server answers who else has it open.
// Someone else answering is shown with "Take it over": until then the server refuses this
// person's actions on the item, naming them.

import { api } from "./api.js";
import { $ } from "./dom.js";

const BEAT_MS = 10_000;

/** The item this page is on, and whether its person has started answering it. */
const here = { itemId: null, answering: false, timer: undefined };

/** From now on this page says it has item `id` open (and stops saying so of the one before). */
export function watchPresence(id) {
  if (here.itemId === id) return;
  leavePresence();
  here.itemId = id;
  here.answering = false;
  here.timer = setInterval(beat, BEAT_MS);
  beat();
}

/** The page left the item: the others see it gone at once, not when it goes quiet. */
export function leavePresence() {
  if (!here.itemId) return;
  clearInterval(here.timer);
  api("DELETE", `/admin/dlq/${here.itemId}/presence`);
  here.itemId = null;
  render([]);
}

/** The person started a reply here (typed, picked a template, sent, took it over): the others are told now. */
export function startedAnswering() {
  if (here.answering || !here.itemId) return;
  here.answering = true;
  beat();
}

/** Reads who else is here again, now (after a refusal that named someone). */
export const lookAgain = () => beat();

async function beat() {
  const id = here.itemId;
  if (!id) return;
  const { status, data } = await api("POST", `/admin/dlq/${id}/presence`, here.answering ? { answering: true } : {});
  if (status === 200 && id === here.itemId) render(data.viewers);
}

function render(viewers) {
  const note = $("#presence-note");
  const answering = viewers.find((viewer) => viewer.answering);
  const others = viewers.filter((viewer) => viewer !== answering).map((viewer) => viewer.actor);
  $('[data-action="take-over"]').hidden = !answering;
  note.hidden = viewers.length === 0;
  note.className = answering ? "warning" : "note";
  note.firstChild.textContent = answering
    ? `${answering.actor} is answering this customer. What you send here is refused unless you take it over.${others.length ? ` Also open by ${others.join(", ")}.` : ""}`
    : `Also open by ${others.join(", ")}.`;
}
