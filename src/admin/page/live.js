// The live queue (issue 21.3): one EventSource on GET /admin/events tells the page when anything
// it shows changed; the page then reads the list or the item again through the usual API.

import { $ } from "./dom.js";

/** Only while the stream cannot be had (refused, or a server without it): a slow look, and another try at the stream. */
const FALLBACK_MS = 60_000;

let source = null;
let fallbackTimer = 0;
let onChange = () => undefined;

function say(text, state) {
  const status = $("#live-status");
  status.textContent = text;
  status.dataset.state = state;
}

function connect() {
  // Same origin: the session cookie goes along, as with every API call.
  source = new EventSource("/admin/events");
  source.addEventListener("open", () => {
    clearTimeout(fallbackTimer);
    say("Live", "live");
  });
  // The server sends "change" at once on a reconnect that missed something (Last-Event-ID).
  source.addEventListener("change", () => onChange());
  // The server ended the stream on purpose: newer tabs of this session hold its streams ("replaced"),
  // or the session ended. Reconnecting at once would only take another tab's stream, or be refused.
  source.addEventListener("end", () => {
    source?.close();
    fallBack();
    onChange(); // read now: a session that ended shows the sign-in at once
  });
  source.addEventListener("error", () => {
    if (source?.readyState !== EventSource.CLOSED) return say("Reconnecting…", "reconnecting"); // EventSource retries by itself
    // Refused (signed out, too many streams, a failing database): EventSource gives up; so do we, for a minute.
    fallBack();
  });
}

function fallBack() {
  source = null;
  say("Updates every minute", "fallback");
  clearTimeout(fallbackTimer);
  fallbackTimer = setTimeout(() => {
    onChange();
    if (!source) connect();
  }, FALLBACK_MS);
}

/** Starts listening (once); `refresh` runs on each change. */
export function startLive(refresh) {
  onChange = refresh;
  if (!source) connect();
}

export function stopLive() {
  clearTimeout(fallbackTimer);
  source?.close();
  source = null;
  say("", "off");
}
