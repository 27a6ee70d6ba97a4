/**
 * Words from the customer that steer the bot rather than ask it something: opting out of
 * automatic replies, opting back in, and asking for a person (human handoff).
 */
export type Control = "opt_out" | "opt_in" | "handoff";

export interface ControlKeywords {
  optOutKeywords: readonly string[];
  optInKeywords: readonly string[];
  handoffKeywords: readonly string[];
}

/** A control is a whole message equal to a keyword (ignoring case, spaces and end punctuation). */
export function controlOf(text: string | undefined, keywords: ControlKeywords): Control | undefined {
  if (!text) return undefined;
  const word = text
    .trim()
    .replace(/[.!?¡¿]+$/u, "")
    .trim()
    .toLocaleLowerCase();
  if (keywords.optOutKeywords.includes(word)) return "opt_out";
  if (keywords.optInKeywords.includes(word)) return "opt_in";
  if (keywords.handoffKeywords.includes(word)) return "handoff";
  return undefined;
}

/** Who paused a conversation when a person answered from the WhatsApp Business app (WHATSAPP.md §10). */
export const BUSINESS_APP = "business app";

/** A pause until a person resumes it: far enough to never end by itself. */
export const PAUSED_INDEFINITELY = new Date("9999-12-31T00:00:00Z");
