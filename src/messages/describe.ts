import { z } from "zod";
import type { InboundMessagePayload } from "../whatsapp/webhook-payload.ts";
import { csatRatingOf, csatSkipReason } from "./csat.ts";

/**
 * Every inbound message type gets a deliberate outcome (law 6): words for Claude to answer,
 * a configured answer that costs no Claude call, or no answer with a logged reason.
 */

export type InboundOutcome = { kind: "answer"; text: string } | { kind: "canned"; text: string; reason: string } | { kind: "skip"; reason: string };

export interface DescribeSettings {
  /** Said to a voice note or video, which the bot cannot read; empty = no reply. */
  mediaReply: string;
  /** Said to a document that is not a PDF; empty = no reply. */
  documentReply: string;
  /** Said to a message type we do not know; empty = no reply. */
  fallbackReply: string;
  /** Said when a customer opens the chat without writing (`request_welcome`); empty (the default) = no reply. */
  welcomeReply: string;
  /** Audio is heard through the transcriber when the reply is written (src/replies/voice-notes.ts). */
  transcribeVoiceNotes: boolean;
}

// Each payload shape, lenient where Meta adds fields (WHATSAPP.md §3).
const interactive = z.object({
  type: z.string(),
  button_reply: z.object({ id: z.string(), title: z.string() }).optional(),
  list_reply: z.object({ id: z.string(), title: z.string(), description: z.string().optional() }).optional(),
  // A WhatsApp Flow's answers: response_json is a JSON string of the form's fields (WHATSAPP.md §11).
  nfm_reply: z.object({ name: z.string().optional(), body: z.string().optional(), response_json: z.string() }).optional(),
});
/** A Click-to-WhatsApp ad the customer came from (WHATSAPP.md §3, `referral`). */
const referral = z.object({
  headline: z.string().optional(),
  body: z.string().optional(),
  source_type: z.string().optional(),
  source_url: z.string().optional(),
  source_id: z.string().optional(),
});
const button = z.object({ text: z.string(), payload: z.string().optional() });
const location = z.object({
  latitude: z.number(),
  longitude: z.number(),
  name: z.string().optional(),
  address: z.string().optional(),
  url: z.string().optional(),
});
const contactCard = z.object({
  name: z.object({ formatted_name: z.string().optional() }).optional(),
  phones: z.array(z.object({ phone: z.string().optional(), type: z.string().optional() })).optional(),
  emails: z.array(z.object({ email: z.string().optional() })).optional(),
  org: z.object({ company: z.string().optional() }).optional(),
});
const order = z.object({
  catalog_id: z.string().optional(),
  text: z.string().optional(),
  product_items: z.array(z.object({ product_retailer_id: z.string(), quantity: z.coerce.number(), item_price: z.coerce.number(), currency: z.string() })),
});
const visual = z.object({ id: z.string(), caption: z.string().optional(), mime_type: z.string().optional(), filename: z.string().optional() });

/** What Claude can look at itself: images (stickers are webp images) and PDFs. */
export interface ReadableMedia {
  id: string;
  kind: "image" | "pdf";
}

export function readableMedia(message: { type: string } & Record<string, unknown>): ReadableMedia | undefined {
  if (message.type !== "image" && message.type !== "sticker" && message.type !== "document") return undefined;
  const media = visual.safeParse(message[message.type]);
  if (!media.success) return undefined;
  if (message.type !== "document") return { id: media.data.id, kind: "image" };
  return media.data.mime_type === "application/pdf" ? { id: media.data.id, kind: "pdf" } : undefined;
}

const audio = z.object({ id: z.string(), mime_type: z.string().optional(), voice: z.boolean().optional() });

/** The audio a message carries, for the transcriber; undefined when it is not audio or names no media. */
export function voiceNoteMedia(message: { type?: unknown } & Record<string, unknown>): { id: string } | undefined {
  if (message.type !== "audio") return undefined;
  const parsed = audio.safeParse(message.audio);
  return parsed.success ? { id: parsed.data.id } : undefined;
}

/** What a voice note gets when it cannot be heard (no transcriber, or it failed): today's honest answer. */
export function voiceNoteFallback(settings: Pick<DescribeSettings, "mediaReply">, why: string): Exclude<InboundOutcome, { kind: "answer" }> {
  return say(settings.mediaReply, `voice note not transcribed: ${why}`) as Exclude<InboundOutcome, { kind: "answer" }>;
}

export function describeInbound(message: InboundMessagePayload, settings: DescribeSettings): InboundOutcome {
  const raw = message as Record<string, unknown>;
  switch (message.type) {
    case "text":
      return message.text?.body.trim() ? { kind: "answer", text: message.text.body } : { kind: "skip", reason: "empty text" };
    case "interactive":
      return describeInteractive(raw, settings);
    case "button": {
      const parsed = button.safeParse(raw.button);
      if (!parsed.success) return fallback(settings, "template button without text");
      const payload = parsed.data.payload && parsed.data.payload !== parsed.data.text ? ` (payload ${parsed.data.payload})` : "";
      return { kind: "answer", text: `[Tapped the button "${parsed.data.text}"${payload}]` };
    }
    case "location": {
      const parsed = location.safeParse(raw.location);
      if (!parsed.success) return fallback(settings, "location without coordinates");
      const { latitude, longitude, name, address, url } = parsed.data;
      const place = [name, address].filter(Boolean).join(", ");
      return { kind: "answer", text: `[Shared a location: ${place ? `${place}, ` : ""}latitude ${latitude}, longitude ${longitude}${url ? `, ${url}` : ""}]` };
    }
    case "contacts":
      return describeContacts(raw, settings);
    case "order": {
      const parsed = order.safeParse(raw.order);
      if (!parsed.success) return fallback(settings, "order without items");
      const items = parsed.data.product_items.map((i) => `${i.quantity} × ${i.product_retailer_id} at ${i.item_price} ${i.currency}`);
      return { kind: "answer", text: `[Sent an order: ${items.join("; ")}]${parsed.data.text ? `\n${parsed.data.text}` : ""}` };
    }
    case "reaction":
      // A reaction is not a question: answering it would be noise.
      return { kind: "skip", reason: "reaction" };
    case "system":
      return { kind: "skip", reason: "system notice (e.g. the customer changed number)" };
    case "request_welcome":
      return say(settings.welcomeReply, "chat opened without a message");
    case "revoke":
      // Never answered; the deleted message itself is erased by the inbound job.
      return { kind: "skip", reason: "the customer deleted a message" };
    case "image":
    case "sticker":
    case "document":
      return describeVisual(message.type, raw, settings);
    case "audio": {
      const parsed = audio.safeParse(raw.audio);
      if (!settings.transcribeVoiceNotes) return say(settings.mediaReply, "audio: no transcriber is configured (TRANSCRIBE_BASE_URL)");
      if (!parsed.success) return say(settings.mediaReply, "audio without a media id");
      // The words are added when the reply is written: the transcript then joins this text (src/replies/voice-notes.ts).
      return { kind: "answer", text: parsed.data.voice === false ? "[Audio message]" : "[Voice note]" };
    }
    case "video":
      return say(settings.mediaReply, `${message.type}: the bot reads text, images and PDFs`);
    case "unsupported":
      // Older webhooks announce an edit this way, without the edited words (WHATSAPP.md §11).
      if ((raw.unsupported as { type?: unknown } | undefined)?.type === "edit")
        return { kind: "skip", reason: "an edit without its new text (older webhook shape)" };
      return fallback(settings, 'message type "unsupported"');
    default:
      return fallback(settings, `message type "${message.type}"`);
  }
}

/** A tapped reply button or list option, or a Flow's answers; a tap on our CSAT buttons is a rating, never Claude's to answer (src/jobs/inbound.ts records it). */
function describeInteractive(raw: Record<string, unknown>, settings: DescribeSettings): InboundOutcome {
  const rating = csatRatingOf(raw);
  if (rating) return { kind: "skip", reason: csatSkipReason(rating) };
  const parsed = interactive.safeParse(raw.interactive);
  if (parsed.success && parsed.data.nfm_reply) return { kind: "answer", text: formAnswers(parsed.data.nfm_reply) };
  const choice = parsed.success ? (parsed.data.button_reply ?? parsed.data.list_reply) : undefined;
  if (!choice) return fallback(settings, `interactive reply of type "${parsed.data?.type ?? "unknown"}"`);
  const description = "description" in choice && choice.description ? ` — ${choice.description}` : "";
  return { kind: "answer", text: `[Chose the option "${choice.title}"${description} (id ${choice.id})]` };
}

/** Shared contact cards, each as one line of what it holds. */
function describeContacts(raw: Record<string, unknown>, settings: DescribeSettings): InboundOutcome {
  const parsed = z.array(contactCard).safeParse(raw.contacts);
  if (!parsed.success || parsed.data.length === 0) return fallback(settings, "contacts message without cards");
  const cards = parsed.data.map((c) =>
    [
      c.name?.formatted_name ?? "(no name)",
      c.org?.company,
      ...(c.phones ?? []).map((p) => `${p.type ? `${p.type} ` : ""}${p.phone ?? ""}`.trim()),
      ...(c.emails ?? []).map((e) => e.email),
    ]
      .filter(Boolean)
      .join(", "),
  );
  return { kind: "answer", text: `[Shared ${cards.length === 1 ? "a contact" : "contacts"}: ${cards.join("; ")}]` };
}

/** An image, a sticker or a document: the ones Claude reads are answered (the file is fetched when the reply is written), others get DOCUMENT_REPLY. */
function describeVisual(type: "image" | "sticker" | "document", raw: Record<string, unknown>, settings: DescribeSettings): InboundOutcome {
  const media = visual.safeParse(raw[type]);
  const readable = readableMedia(raw as { type: string });
  if (!media.success) return fallback(settings, `${type} without a media id`);
  if (!readable) return say(settings.documentReply, `document of type ${media.data.mime_type ?? "unknown"}: the bot reads PDFs and images`);
  // The file itself is fetched when the reply is written (Meta's URLs expire in 5 minutes).
  const what = type === "document" ? `a PDF${media.data.filename ? ` "${media.data.filename}"` : ""}` : type === "image" ? "an image" : "a sticker";
  return { kind: "answer", text: `[Sent ${what}]${media.data.caption ? `\n${media.data.caption}` : ""}` };
}

/** A Flow's answers as Claude reads them; the flow_token is Meta's bookkeeping, not the customer's words. */
function formAnswers(form: { name?: string | undefined; response_json: string }): string {
  let answers: unknown;
  try {
    answers = JSON.parse(form.response_json);
  } catch {
    answers = undefined;
  }
  const fields = answers && typeof answers === "object" ? Object.entries(answers as Record<string, unknown>).filter(([key]) => key !== "flow_token") : [];
  const shown = fields.map(([key, value]) => `${key.replaceAll("_", " ")}: ${typeof value === "string" ? value : JSON.stringify(value)}`);
  const name = form.name && form.name !== "flow" ? ` "${form.name}"` : "";
  return shown.length > 0 ? `[Filled in the form${name}: ${shown.join("; ")}]` : `[Sent the form${name} without answers]`;
}

/** Which ad the customer came from, for Claude: it often says what they are asking about. */
export function adContext(message: Record<string, unknown>): string | undefined {
  const parsed = referral.safeParse(message.referral);
  if (!parsed.success) return undefined;
  const { headline, body, source_type: type, source_url: url } = parsed.data;
  const what = [headline && `"${headline}"`, body].filter(Boolean).join(" — ");
  return `[Came from ${type === "post" ? "a post" : "an ad"}${what ? `: ${what}` : ""}${url ? ` (${url})` : ""}]`;
}

function fallback(settings: DescribeSettings, what: string): InboundOutcome {
  return say(settings.fallbackReply, `${what} is not supported`);
}

/** A configured answer, or none when it is configured empty. */
function say(text: string, reason: string): InboundOutcome {
  return text ? { kind: "canned", text, reason } : { kind: "skip", reason };
}
