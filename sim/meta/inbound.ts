import { createHash } from "node:crypto";
import type { Customer, CustomerMessage } from "../customers.ts";
import { type BusinessNumber, envelope, messagesChange, metaWire } from "./wire.ts";

/**
 * A customer's message as Meta delivers it (WHATSAPP.md §3, §9): the contact with its BSUID
 * (and the phone number when the customer shares it), the message with `from_user_id` (and
 * `from`), in Meta's wire format. Files are kept by Meta and named by a media id, which the
 * backend downloads in two steps (§8).
 */

export type MessagePayload = Record<string, unknown> & { type: "text" | "image" | "document" | "audio" | "location" | "interactive" };

export interface MessageShown {
  /** What the customer's phone shows of it. */
  text: string;
  media?: { id: string; mimeType: string; filename?: string };
}

/** The message's own part of the webhook, and what the customer's phone shows of it. */
export function messagePayload(
  message: CustomerMessage,
  storeMedia: (bytes: Buffer, mimeType: string) => string,
): { payload: MessagePayload; shown: MessageShown } {
  if ("text" in message) return { payload: { type: "text", text: { body: message.text } }, shown: { text: message.text } };
  if ("image" in message || "document" in message) {
    const file = "image" in message ? message.image : message.document;
    const type = "image" in message ? "image" : "document";
    const id = storeMedia(file.bytes, file.mimeType);
    const filename = "document" in message ? message.document.filename : undefined;
    const caption = file.caption?.trim() || undefined;
    return {
      payload: {
        type,
        [type]: {
          ...(caption ? { caption } : {}),
          ...(filename ? { filename } : {}),
          mime_type: file.mimeType,
          // Base64 in current webhooks (WHATSAPP.md §3).
          sha256: createHash("sha256").update(file.bytes).digest("base64"),
          id,
        },
      },
      shown: {
        text: caption ?? (type === "image" ? "Photo" : (filename ?? "Document")),
        media: { id, mimeType: file.mimeType, ...(filename ? { filename } : {}) },
      },
    };
  }
  if ("voice" in message) {
    const id = storeMedia(message.voice.bytes, message.voice.mimeType);
    const sha256 = createHash("sha256").update(message.voice.bytes).digest("base64");
    return {
      payload: { type: "audio", audio: { mime_type: message.voice.mimeType, sha256, id, voice: true } },
      shown: { text: "Voice note", media: { id, mimeType: message.voice.mimeType } },
    };
  }
  if ("location" in message) {
    const l = message.location;
    const place = [l.name, l.address].filter(Boolean).join(", ");
    return { payload: { type: "location", location: l }, shown: { text: `Location: ${place ? `${place} ` : ""}(${l.latitude}, ${l.longitude})` } };
  }
  return {
    payload: { type: "interactive", interactive: { type: "button_reply", button_reply: message.button } },
    shown: { text: message.button.title },
  };
}

/** The POST body Meta delivers for one message of `customer` to `number`. */
export function inboundWebhook(
  number: BusinessNumber,
  customer: Customer,
  message: { id: string; context?: { from: string; id: string } } & MessagePayload,
): string {
  const contact = {
    profile: { name: customer.name, ...(customer.username ? { username: customer.username } : {}) },
    ...(customer.phone ? { wa_id: customer.phone } : {}),
    user_id: customer.userId,
  };
  const { id, context, ...payload } = message;
  return metaWire(
    envelope([
      messagesChange(number, {
        contacts: [contact],
        messages: [
          {
            ...(customer.phone ? { from: customer.phone } : {}),
            from_user_id: customer.userId,
            id,
            timestamp: String(Math.floor(Date.now() / 1000)),
            ...(context ? { context } : {}),
            ...payload,
          },
        ],
      }),
    ]),
  );
}
