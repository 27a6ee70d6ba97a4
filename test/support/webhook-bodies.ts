import { envelope, metaWire } from "../../sim/meta/wire.ts";

/**
 * Meta-shaped webhook bodies for tests, serialised the way Meta puts them on the wire:
 * compact JSON, non-ASCII as lowercase \uXXXX (astral characters as surrogate pairs) and
 * every "/" as "\/" (WHATSAPP.md §2). The serialisation is the simulated Meta's own.
 */

export { envelope, metaWire };

export const PHONE_NUMBER_ID = "106540352242922";
export const DISPLAY_NUMBER = "15550783881";

let counter = 0;
export const uniqueWamid = () => `wamid.TEST${Date.now().toString(36)}${(++counter).toString(36)}${Math.random().toString(36).slice(2, 8)}`;

export interface TextMessage {
  from?: string;
  id?: string;
  text: string;
  timestamp?: number;
  /** The sender's profile name as Meta sends it in `contacts` (default "José Müller"). */
  name?: string;
}

export function textMessage(m: TextMessage) {
  return {
    from: m.from ?? "16505551234",
    id: m.id ?? uniqueWamid(),
    timestamp: String(m.timestamp ?? Math.floor(Date.now() / 1000)),
    type: "text",
    text: { body: m.text },
  };
}

export function messagesChange(messages: ReturnType<typeof textMessage>[], phoneNumberId = PHONE_NUMBER_ID, names: Record<string, string> = {}) {
  const senders = [...new Set(messages.map((m) => m.from))];
  return {
    field: "messages",
    value: {
      messaging_product: "whatsapp",
      metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: phoneNumberId },
      contacts: senders.map((wa_id) => ({ profile: { name: names[wa_id] ?? "José Müller" }, wa_id })),
      messages,
    },
  };
}

export function statusChange(statuses: Record<string, unknown>[], phoneNumberId = PHONE_NUMBER_ID) {
  return {
    field: "messages",
    value: {
      messaging_product: "whatsapp",
      metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: phoneNumberId },
      statuses,
    },
  };
}

/** A person writing from the WhatsApp Business app on the same number (coexistence): Meta's echo of it. */
export function echoChange(echo: { to: string; text: string; id?: string }, phoneNumberId = PHONE_NUMBER_ID) {
  return {
    field: "smb_message_echoes",
    value: {
      messaging_product: "whatsapp",
      metadata: { display_phone_number: DISPLAY_NUMBER, phone_number_id: phoneNumberId },
      message_echoes: [
        {
          from: DISPLAY_NUMBER,
          to: echo.to,
          id: echo.id ?? uniqueWamid(),
          timestamp: String(Math.floor(Date.now() / 1000)),
          type: "text",
          text: { body: echo.text },
        },
      ],
    },
  };
}

/** One webhook POST body carrying the given text messages, as Meta sends it. */
export function textWebhook(...messages: TextMessage[]): { body: string; wamids: string[] } {
  const built = messages.map(textMessage);
  const names = Object.fromEntries(messages.flatMap((m, i) => (m.name ? [[built[i]!.from, m.name]] : [])));
  return { body: metaWire(envelope([messagesChange(built, PHONE_NUMBER_ID, names)])), wamids: built.map((m) => m.id) };
}

export function statusWebhook(status: {
  id: string;
  status: string;
  timestamp?: number;
  /** The customer the message went to (default the tests' usual customer). */
  recipient_id?: string;
  biz_opaque_callback_data?: string;
  errors?: unknown[];
  /** What Meta says the message costs (WHATSAPP.md §12). */
  pricing?: { pricing_model?: string; type?: string; category: string; billable?: boolean };
}): string {
  return metaWire(
    envelope([
      statusChange([
        {
          recipient_id: "16505551234",
          timestamp: String(status.timestamp ?? Math.floor(Date.now() / 1000)),
          ...status,
        },
      ]),
    ]),
  );
}
