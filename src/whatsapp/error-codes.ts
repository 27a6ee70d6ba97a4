/**
 * Meta's error codes and what we do about each (WHATSAPP.md §6). Meta says to key on
 * `error.code`, never on titles or HTTP status.
 */

export interface CodeRule {
  retry: boolean;
  reason: string;
  /** The earliest sensible retry, when Meta's rule implies one. */
  minDelayMs?: number;
  /** A limit on the whole business account or app: slow every send down, not just this one. */
  throttle?: boolean;
}

const RULES: Record<number, CodeRule> = {
  0: { retry: false, reason: "Meta could not authenticate the access token" },
  1: { retry: true, reason: "Meta reported an unknown error (may be temporary)" },
  2: { retry: true, reason: "Meta's service is temporarily down or overloaded" },
  4: { retry: true, reason: "Meta's app-level rate limit was hit", minDelayMs: 60_000, throttle: true },
  10: { retry: false, reason: "The app lacks permission for this action" },
  100: { retry: false, reason: "Meta rejected a parameter of the request" },
  190: { retry: false, reason: "The WhatsApp access token has expired or is invalid" },
  368: { retry: false, reason: "The business number is temporarily blocked for policy violations" },
  80007: { retry: true, reason: "The WhatsApp Business Account rate limit was hit", minDelayMs: 60_000, throttle: true },
  130429: { retry: true, reason: "Cloud API throughput limit reached", minDelayMs: 2000, throttle: true },
  131000: { retry: true, reason: "Meta reported that something went wrong" },
  131008: { retry: false, reason: "A required parameter is missing" },
  131009: { retry: false, reason: "A parameter value is invalid" },
  131016: { retry: true, reason: "Meta's service is temporarily unavailable" },
  131026: { retry: false, reason: "Message undeliverable: the number may not be on WhatsApp or has blocked the business" },
  131031: { retry: false, reason: "The business account is locked" },
  131047: { retry: false, reason: "More than 24 hours since the customer last wrote: only a template can be sent" },
  131048: { retry: false, reason: "Spam rate limit hit: the number's quality is restricted" },
  131049: { retry: false, reason: "Meta withheld the message to keep ecosystem engagement healthy" },
  131051: { retry: false, reason: "Unsupported message type" },
  131052: { retry: false, reason: "Meta could not download the customer's media" },
  131053: { retry: false, reason: "Meta could not process the media we sent" },
  131056: { retry: true, reason: "Too many messages to this customer in a short time", minDelayMs: 6000 },
  131057: { retry: true, reason: "The business account is in maintenance mode" },
  // WHATSAPP.md §9: e.g. one-tap, zero-tap and copy-code authentication templates.
  131062: { retry: false, reason: "Meta does not deliver this kind of message to a username (BSUID) recipient: it needs the customer's phone number" },
  // Templates (WHATSAPP.md §6, §12): a send Meta refused for the template itself never succeeds as it is.
  132000: { retry: false, reason: "The template's parameters do not match its placeholders (count mismatch)" },
  132001: { retry: false, reason: "The template does not exist in that language, or is not approved" },
  132005: { retry: false, reason: "The template's filled text is too long" },
  132007: { retry: false, reason: "The template's content breaks WhatsApp's policy" },
  132012: { retry: false, reason: "A template parameter has the wrong format" },
  132015: { retry: false, reason: "The template is paused for low quality" },
  132016: { retry: false, reason: "The template is disabled for low quality" },
  132068: { retry: false, reason: "The template's flow is blocked" },
  132069: { retry: false, reason: "The template's flow is throttled" },
  133004: { retry: true, reason: "Meta's server is temporarily unavailable" },
  133010: { retry: false, reason: "The business number is not registered on the Cloud API" },
};

/** Every code the table above names. */
export const KNOWN_GRAPH_CODES: readonly number[] = Object.keys(RULES).map(Number);

export function ruleForGraphCode(code: number, httpStatus: number | undefined): CodeRule {
  const known = RULES[code];
  if (known) return known;
  if (code >= 200 && code <= 299) return { retry: false, reason: "The app lacks a required permission" };
  if (code >= 132000 && code <= 132099) return { retry: false, reason: "The message template is missing, paused or mismatched" };
  // Unknown code: let the transport decide — a 5xx or 429 may pass, any other 4xx will not.
  const retry = httpStatus === undefined || httpStatus === 429 || httpStatus >= 500;
  return { retry, reason: `Meta returned error code ${code}` };
}
