import type { FastifyReply, FastifyRequest } from "fastify";
import type { Unqueued } from "../dlq/staff.ts";
import type { Refused } from "../state/staff-actions.ts";
import { releaseIdempotencyKey } from "./idempotency.ts";

/**
 * The one table from a refused staff action (src/state/staff-actions.ts, src/dlq/staff.ts) to
 * its HTTP answer: the status, the words a person reads, and the `code` the page acts on (asks
 * to confirm a maybe-sent resend, looks again at who holds the item). The transitions answer
 * codes only.
 */

type Refusal = Refused | Unqueued;
type Code = Refusal["refused"];

interface Answer<C extends Code> {
  status: 404 | 409 | 503;
  /** Whether the body carries `code` (the page acts on it); the others are said in words only. */
  coded: boolean;
  error: (refusal: Extract<Refusal, { refused: C }>) => string;
}

const REFUSALS: { [C in Code]: Answer<C> } = {
  item_not_found: { status: 404, coded: false, error: () => "dead letter not found" },
  conversation_not_found: { status: 404, coded: false, error: () => "conversation not found" },
  already_handled: { status: 409, coded: false, error: (r) => `dead letter is already ${r.state}${r.by ? ` by ${r.by}` : ""}` },
  held_by_other: {
    status: 409,
    coded: true,
    error: (r) => `${r.by} is answering this customer right now. Take the item over to act on it yourself; they will be told.`,
  },
  already_delivered: {
    status: 409,
    coded: true,
    error: () => "Meta took this reply after all (its status came late): the customer has it. Discard the item instead.",
  },
  maybe_sent: {
    status: 409,
    coded: true,
    error: () => "The last send of this reply may already have arrived: Meta never answered it and no status came. Resend anyway with confirmMaybeSent: true.",
  },
  no_reply: {
    status: 409,
    coded: true,
    error: () => "This customer is waiting for a person and no reply failed: write to them (answer), then give the conversation back to the bot.",
  },
  has_reply: {
    status: 409,
    coded: true,
    error: () =>
      "A reply failed here: send it again (your text may replace it) or discard it; answering and giving back are for customers waiting for a person.",
  },
  window_closed: {
    status: 409,
    coded: true,
    error: () => "The 24-hour window has closed: WhatsApp refuses free text until the customer writes again. Send an approved template instead.",
  },
  opted_out: { status: 409, coded: true, error: () => "The customer opted out (STOP): nothing more is sent to them until they write again." },
  queue_unavailable: { status: 503, coded: false, error: () => "queue unavailable; the item is still open" },
};

/** The refusal's status and body. */
export function refusalAnswer(refusal: Refusal): { status: 404 | 409 | 503; body: { error: string; code?: Code } } {
  const table = REFUSALS[refusal.refused] as Answer<Code>;
  return { status: table.status, body: { error: table.error(refusal as never), ...(table.coded ? { code: refusal.refused } : {}) } };
}

/**
 * Answers a refused action. Held by another person, it was refused for someone else's work,
 * which passes: its Idempotency-Key keeps nothing, so the same click acts once the item is
 * taken over.
 */
export function refuse(request: FastifyRequest, reply: FastifyReply, refusal: Refusal) {
  if (refusal.refused === "held_by_other") {
    request.log.info({ event: "dlq.held_by_other", url: request.url, holder: refusal.by }, "refused: someone else is answering this item");
    releaseIdempotencyKey(request);
  }
  const { status, body } = refusalAnswer(refusal);
  return reply.code(status).send(body);
}
