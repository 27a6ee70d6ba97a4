// Small helpers for building the page from the API's data: elements with text, never HTML,
// so nothing a customer wrote can become markup.

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

/** An element with attributes (`class`, `dataset`, `text`, `on<event>`, others as attributes) and children. */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** How long ago, in the fewest words: "just now", "5 min", "3 h", "2 days". */
export function ago(iso, now = Date.now()) {
  const minutes = Math.max(0, Math.floor((now - new Date(iso).getTime()) / 60000));
  if (minutes < 1) return "just now";
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ago`;
  return `${Math.floor(hours / 24)} days ago`;
}

const sameDay = (a, b) => a.toDateString() === b.toDateString();

/** A message's time: the hour today, else the day and hour. */
export function clock(iso) {
  const at = new Date(iso);
  const time = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return sameDay(at, new Date()) ? time : `${at.toLocaleDateString([], { day: "numeric", month: "short" })}, ${time}`;
}

export const fullDate = (iso) => new Date(iso).toLocaleString();

/** A day's heading in the conversation: "Today", "Yesterday" or the date. */
export function dayName(iso) {
  const at = new Date(iso);
  const today = new Date();
  const yesterday = new Date(today.getTime() - 86_400_000);
  if (sameDay(at, today)) return "Today";
  if (sameDay(at, yesterday)) return "Yesterday";
  return at.toLocaleDateString([], { weekday: "long", day: "numeric", month: "long" });
}

/** Moves the keyboard to the next (+1) or previous (-1) of the links `selector` finds (a list's rows). */
export function moveInList(selector, delta) {
  const links = $$(selector);
  if (links.length === 0) return;
  const at = links.indexOf(document.activeElement);
  const next = at === -1 ? (delta > 0 ? 0 : links.length - 1) : Math.min(links.length - 1, Math.max(0, at + delta));
  links[next].focus();
  links[next].scrollIntoView({ block: "nearest" });
}

/** A list card's first line: who (name, then phone or @username) and how long ago. */
export function cardTop(contact, at) {
  return h(
    "span",
    { class: "item-top" },
    h("span", { class: "item-who" }, h("strong", {}, contact.name || contact.label), contact.name ? h("span", { class: "item-label" }, contact.label) : null),
    h("time", { class: "item-age", datetime: at, title: fullDate(at) }, ago(at)),
  );
}

/** True while a person is typing in a field: shortcuts must not fire then. */
export function isTyping(target) {
  return target instanceof HTMLElement && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

const TYPE_WORDS = {
  image: "Photo",
  audio: "Voice message",
  video: "Video",
  document: "File",
  sticker: "Sticker",
  location: "Location",
  contacts: "Contact card",
  reaction: "Reaction",
  interactive: "Button or list reply",
  button: "Button reply",
  order: "Order",
  unsupported: "A message WhatsApp does not support",
};

/** What a customer's message says, or what kind of message it was. */
export const messageWords = (message) =>
  message.deleted
    ? "This message was deleted"
    : message.rating
      ? `(Rated it: ${message.rating})`
      : message.text || (TYPE_WORDS[message.type] ? `(${TYPE_WORDS[message.type]})` : `(${message.type})`);
