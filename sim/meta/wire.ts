/**
 * Meta's wire format (WHATSAPP.md §2): what the simulated Meta posts to POST /webhook and
 * answers on the Graph API. Webhook bodies are compact JSON in pure ASCII: non-ASCII as
 * lowercase \uXXXX (astral characters as surrogate pairs) and every "/" as "\/", so a
 * receiver that re-serialises the JSON before checking the signature fails, as with Meta.
 */

export function metaWire(value: unknown): string {
  return JSON.stringify(value)
    .replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)
    .replaceAll("/", "\\/");
}

/** The webhook envelope: one entry per group of changes (WHATSAPP.md §3). */
export function envelope(...changes: unknown[][]) {
  return {
    object: "whatsapp_business_account",
    entry: changes.map((c, i) => ({ id: `10255406${i}`, changes: c })),
  };
}

/** A business number as webhooks name it in `metadata`. */
export interface BusinessNumber {
  phoneNumberId: string;
  displayPhoneNumber: string;
}

/** A `messages` change carrying customers' messages and/or statuses of our sends. */
export function messagesChange(number: BusinessNumber, value: { contacts?: unknown[]; messages?: unknown[]; statuses?: unknown[] }) {
  return {
    field: "messages",
    value: {
      messaging_product: "whatsapp",
      metadata: { display_phone_number: number.displayPhoneNumber, phone_number_id: number.phoneNumberId },
      ...value,
    },
  };
}

/** Graph's error body (WHATSAPP.md §6): the only proof that Meta did not take a request. */
export function graphError(code: number, message: string, details = ""): { error: Record<string, unknown> } {
  return {
    error: {
      message: `(#${code}) ${message}`,
      type: "OAuthException",
      code,
      error_data: { messaging_product: "whatsapp", details },
      fbtrace_id: "AbCdEfGh123",
    },
  };
}
