import type { GeneratedReply } from "../ai/claude.ts";
import type { EchoPayload, InboundMessagePayload, Sender, StatusPayload } from "../whatsapp/webhook-payload.ts";

/**
 * The job catalog: each queue's name and the data its jobs carry. The webhook writes these
 * (src/webhook/walk.ts turns a delivery into them), the workers read them (src/jobs/).
 */

export const QUEUE_NAMES = { inbound: "inbound", reply: "reply", status: "status", events: "events", reconcile: "reconcile" } as const;

/** A customer's message, as the webhook queued it. */
export interface InboundJobData {
  phoneNumberId: string;
  /** Absent on jobs queued before BSUIDs were read: their sender is `message.from` and `contactName`. */
  sender?: Sender;
  contactName?: string;
  message: InboundMessagePayload;
  /**
   * When the webhook received it, in microseconds, plus its position in the delivery: the
   * order of a burst within one of Meta's one-second timestamps (absent on older jobs).
   */
  arrival?: number;
}

/** A delivery receipt for one of our messages. */
export interface StatusJobData {
  phoneNumberId: string;
  status: StatusPayload;
}

/**
 * What the business side tells us beside the customers' messages: a message a person sent
 * from the WhatsApp Business app on the same number (coexistence, WHATSAPP.md §10), a
 * customer's marketing preference, a BSUID that changed.
 */
export type BusinessEvent =
  | { type: "echo"; phoneNumberId: string; echo: EchoPayload; recipient: Sender }
  | { type: "preferences"; sender: Sender; category: string; value: string; timestamp: number }
  | { type: "user_id"; previous: string; current: string };
export type EventJobData = BusinessEvent;

/** One conversation's next answer (src/jobs/reply.ts). */
export interface ReplyJobData {
  conversationId: string;
  /**
   * Claude's answer, kept in the job itself when Postgres could not take it: paid for once,
   * stored when the database is back, never asked for again (law 4).
   */
  draft?: KeptDraft;
  /** Parts Meta took (part id → wamid) while Postgres could not record it: recorded first when it can (law 5). */
  accepted?: Record<string, string>;
}

/** Claude's answer for one reply, as the job keeps it. */
export type KeptDraft = GeneratedReply & { replyId: string };

/** What an item of a webhook delivery becomes (src/webhook/walk.ts). */
export type WebhookJob = { queue: "inbound"; data: InboundJobData } | { queue: "status"; data: StatusJobData } | { queue: "events"; data: EventJobData };

/** Who wrote a queued message, for jobs of either shape. */
export function senderOf(data: InboundJobData): Sender {
  return data.sender ?? { waId: data.message.from, name: data.contactName };
}
