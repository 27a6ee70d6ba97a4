/**
 * What of an answer from Meta (or from whatever stood in its place) may be kept in a failure's
 * detail. That detail is logged with the job's failure and stored in the dead letter (law 10),
 * and an answer to a send can name the customer: a send's answer lists them under `contacts`
 * (`input`, `wa_id`), and a proxy's or a misbehaving server's page may echo the request, which
 * carries the phone number and the reply's text. So the values are dropped and the shape is
 * kept: the keys and the kinds of value under them, the length, and for a page its title.
 */

// A type, not an interface: it goes into a failure's detail, a Record<string, unknown>.
export type AnswerShape = {
  /** The body's length in characters. */
  bodyLength: number;
  /** A JSON object's keys, each with the kind of value it holds (never the value). */
  bodyShape?: Record<string, string>;
  /** Keys that do not look like a field name (a phone number used as a key, say): counted, not named. */
  otherKeys?: number;
  /** JSON that is not an object: what it is. */
  bodyType?: string;
  /** A page's title, or the start of a text, with anything like a phone number masked. */
  bodyExcerpt?: string;
};

const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const MAX_KEYS = 30;
const EXCERPT_CHARS = 120;

/** `json` is the body parsed, or undefined when it is not JSON. */
export function describeAnswer(text: string, json: unknown): AnswerShape {
  const shape: AnswerShape = { bodyLength: text.length };
  if (!text) return shape;
  if (json === undefined) {
    const excerpt = pageExcerpt(text);
    return excerpt ? { ...shape, bodyExcerpt: excerpt } : shape;
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) return { ...shape, bodyType: kindOf(json) };
  const keys = Object.keys(json);
  const named = keys.filter((key) => FIELD_NAME.test(key)).slice(0, MAX_KEYS);
  const entries = json as Record<string, unknown>;
  shape.bodyShape = Object.fromEntries(named.map((key) => [key, kindOf(entries[key])]));
  if (keys.length > named.length) shape.otherKeys = keys.length - named.length;
  return shape;
}

function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return `array of ${value.length}`;
  return typeof value;
}

/** An HTML page's title (what an edge proxy's error page says), else its text, short and masked. */
function pageExcerpt(text: string): string {
  const title = /<title[^>]*>([\s\S]*?)<\/title>/i.exec(text)?.[1];
  const words = (title ?? text.replace(/<(script|style)\b[\s\S]*?<\/\1>/gi, " ").replace(/<[^>]*>/g, " ")).replace(/\s+/g, " ").trim();
  return maskPhoneNumbers(words).slice(0, EXCERPT_CHARS);
}

/**
 * Seven digits or more, bare or grouped by spaces, dots, dashes or brackets: a phone number
 * as Meta writes it (`447700900123`) or as a person does (`+44 7700 900123`). Meta's error
 * codes have six digits at most, so `(#131047)` in its messages is left as it is.
 */
const PHONE_NUMBER = /\+?\d(?:[\s().-]{0,2}\d){6,}/g;

/** Free text from Meta (an error's message or details) without anything like a phone number in it. */
export function maskPhoneNumbers(text: string): string;
export function maskPhoneNumbers(text: string | undefined): string | undefined;
export function maskPhoneNumbers(text: string | undefined): string | undefined {
  return text?.replace(PHONE_NUMBER, "[number]");
}
