import type { CsatSettings } from "../config/config.ts";

/**
 * Asking the customer how it went (issue 33.3): the reply buttons we send, and reading the
 * customer's tap on one of them (WHATSAPP.md §3, `interactive.button_reply`).
 */

export const CSAT_RATINGS = ["good", "okay", "bad"] as const;
export type CsatRating = (typeof CSAT_RATINGS)[number];

/** Why a tap on one of our buttons is stored and not answered (law 6): it is a rating, recorded on its ask. */
export const CSAT_SKIP_REASON = "a CSAT rating";

/** The skip reason a rating is stored with, naming the rating. */
export const csatSkipReason = (rating: CsatRating) => `${CSAT_SKIP_REASON} (${rating})`;

/** The rating a stored message was: its skip reason read back (csatSkipReason); null for any other message. */
export function csatRatingStored(skipReason: string | null): CsatRating | null {
  return CSAT_RATINGS.find((rating) => skipReason === csatSkipReason(rating)) ?? null;
}

/** Our buttons' ids: what a tap sends back. */
export const csatButtonId = (rating: CsatRating) => `csat:${rating}`;

/** Graph's `interactive` object of the ask: the question and three reply buttons. */
export function csatInteractive(csat: Pick<CsatSettings, "question" | "buttons">): Record<string, unknown> {
  return {
    type: "button",
    body: { text: csat.question },
    action: { buttons: CSAT_RATINGS.map((rating) => ({ type: "reply", reply: { id: csatButtonId(rating), title: csat.buttons[rating] } })) },
  };
}

/** The rating a message carries: a tap on one of our CSAT buttons; undefined for anything else (another button, text). */
export function csatRatingOf(message: { type?: unknown } & Record<string, unknown>): CsatRating | undefined {
  if (message.type !== "interactive") return undefined;
  const interactive = message.interactive as { type?: unknown; button_reply?: { id?: unknown } } | undefined;
  if (interactive?.type !== "button_reply" || typeof interactive.button_reply?.id !== "string") return undefined;
  const id = interactive.button_reply.id;
  return CSAT_RATINGS.find((rating) => csatButtonId(rating) === id);
}
