import { z } from "zod";
import { decodeCursor } from "../conversations/cursor.ts";
import { REASON_KINDS, type ReasonKind } from "../dlq/explain.ts";
import { DeadLetterState, ReplyState, SendState } from "../generated/prisma/enums.ts";
import { CSAT_RATINGS } from "../messages/csat.ts";
import { WHATSAPP_TEXT_LIMIT } from "../whatsapp/split.ts";
import { answer, problem, requestPart } from "./schema.ts";

/**
 * What the dead-letter and conversation routes take and answer, one zod schema each: the
 * requests are validated by them, the answers are described by them (and the document tests
 * hold real answers to them). The shapes are views.ts's and reasons.ts's, as JSON.
 */

const reasonKind = z.enum(Object.keys(REASON_KINDS) as [ReasonKind, ...ReasonKind[]]);
const state = z.enum(DeadLetterState);
const when = z.iso.datetime();
const id = z.uuid();
/** Meta's details or an action's, kept as they came. */
const details = z.unknown().describe("as recorded: Meta's error details, or null");

// Requests.

const badFilter = (error: z.ZodError) => `bad filter: ${error.issues.map((issue) => issue.path.join(".")).join(", ")}`;

export const deadLetterId = requestPart(z.object({ id }), { status: 404, error: "dead letter not found" });
export const conversationId = requestPart(z.object({ id }), { status: 404, error: "conversation not found" });

export const listQuery = requestPart(
  z
    .object({
      state: state.optional().describe("default open"),
      code: z.string().max(40).optional(),
      source: z.string().max(40).optional(),
      phoneNumberId: z.string().regex(/^\d+$/).optional(),
      q: z.string().trim().min(1).max(140).optional().describe("any part of the customer's phone, BSUID, @username or name"),
      reason: reasonKind.optional().describe("an explanation's kind"),
      order: z.enum(["oldest", "newest"]).optional().describe("default oldest"),
      limit: z.coerce.number().int().min(1).max(500).optional().describe("default 100"),
    })
    .strict(),
  { status: 400, error: badFilter },
);

export const summaryQuery = requestPart(z.object({ state: state.optional(), phoneNumberId: z.string().regex(/^\d+$/).optional() }).strict(), {
  status: 400,
  error: badFilter,
});

/** `confirmMaybeSent`: the person knows the last send may already have arrived, and resends anyway. */
const confirmMaybeSent = z.boolean().optional().describe("resend even though the last send may already have arrived");

/** Ten WhatsApp messages, in UTF-16 units like WhatsApp's own limit: a longer text is a paste gone wrong, not a reply. */
export const RESEND_TEXT_LIMIT = 10 * WHATSAPP_TEXT_LIMIT;

/** A person's text for the customer: trimmed, non-empty, ten WhatsApp messages at most. */
const staffText = z.string().trim().min(1).max(RESEND_TEXT_LIMIT);
/** A body with a person's text refused: its length named when that was the fault, else the body's shape. */
const textRefusal = (shape: string) => (error: z.ZodError) =>
  error.issues.some((issue) => issue.code === "too_big" && issue.path[0] === "text")
    ? `text must be at most ${RESEND_TEXT_LIMIT} characters (ten WhatsApp messages)`
    : `body must be ${shape}`;

export const retryBody = requestPart(
  z
    .object({
      text: staffText.optional().describe(`send this instead of the draft; at most ${RESEND_TEXT_LIMIT} characters (ten WhatsApp messages), once trimmed`),
      confirmMaybeSent,
    })
    .strict(),
  { status: 400, error: textRefusal("{ text?: non-empty string, confirmMaybeSent?: boolean }") },
);
export const answerBody = requestPart(
  z
    .object({
      text: staffText.describe(`what the customer reads; at most ${RESEND_TEXT_LIMIT} characters (ten WhatsApp messages), once trimmed`),
    })
    .strict(),
  { status: 400, error: textRefusal("{ text: non-empty string }") },
);
export const regenerateBody = requestPart(z.object({ confirmMaybeSent }).strict(), { status: 400, error: "body must be { confirmMaybeSent?: boolean }" });
export const discardBody = requestPart(z.object({ note: z.string().max(2000).optional() }).strict(), { status: 400, error: "body must be { note?: string }" });
export const pauseBody = requestPart(z.object({ minutes: z.number().int().min(1).max(525_600).optional().describe("else until resumed") }).strict(), {
  status: 400,
  error: "body must be { minutes?: whole number from 1 to 525600 }",
});
export const bulkBody = requestPart(
  z
    .object({
      code: z.string().min(1).max(40),
      spacingMs: z.number().int().min(0).max(60_000).optional().describe("default 500"),
      confirmMaybeSent: z.boolean().optional().describe("also resend items whose last send may already have arrived"),
    })
    .strict(),
  { status: 400, error: "body must be { code: string, spacingMs?: number, confirmMaybeSent?: boolean }" },
);

/** Approved templates (issue 21): the cached list, or Meta's again. */
export const templatesQuery = requestPart(
  z.object({ refresh: z.enum(["1", "true"]).optional().describe("read Meta's list again, not the cached one") }).strict(),
  {
    status: 400,
    error: "the only filter is refresh=1",
  },
);
export const TEMPLATE_PARAMETER_LIMIT = 1024;
export const templateBody = requestPart(
  z
    .object({
      name: z.string().trim().min(1).max(512),
      language: z.string().trim().min(1).max(20),
      parameters: z
        .array(z.string().trim().min(1).max(TEMPLATE_PARAMETER_LIMIT))
        .max(100)
        .default([])
        .describe("the body's {{1}}, {{2}}… in order, each non-empty"),
      confirmMaybeSent,
    })
    .strict(),
  {
    status: 400,
    error: (error) =>
      error.issues.some((issue) => issue.path[0] === "parameters")
        ? `parameters must be non-empty strings of at most ${TEMPLATE_PARAMETER_LIMIT} characters`
        : "body must be { name: string, language: string, parameters?: string[], confirmMaybeSent?: boolean }",
  },
);

// Answers.

const contact = z.object({
  waId: z.string().nullable(),
  userId: z.string().nullable(),
  username: z.string().nullable(),
  name: z.string().nullable(),
  label: z.string().describe("the phone, else the @username, else the BSUID"),
});

const explanation = z.object({
  kind: reasonKind,
  title: z.string(),
  text: z.string(),
  next: z.string().describe("what to do"),
  said: z.string().optional().describe("Claude's words, when it refused"),
});

const listItem = z.object({
  id,
  createdAt: when,
  source: z.string(),
  code: z.string().nullable(),
  reason: z.string(),
  explanation,
  detail: details,
  attempts: z.number().int(),
  state,
  conversation: z.object({ id, phoneNumberId: z.string(), contact }),
  reply: z.object({ id, draft: z.string().nullable(), state: z.enum(ReplyState), maybeSent: z.boolean() }).nullable(),
  messages: z.array(z.object({ wamid: z.string(), type: z.string(), text: z.string().nullable(), sentAt: when })).describe("the messages it answers"),
  lastMessage: z.object({ type: z.string(), text: z.string().nullable(), sentAt: when, deleted: z.boolean() }).nullable(),
});

export const deadLetterList = answer(z.object({ total: z.number().int(), items: z.array(listItem) }), "the dead letters that match, and how many");

export const deadLetterSummary = answer(
  z.object({
    state,
    total: z.number().int(),
    oldestAt: when.nullable(),
    reasons: z.array(z.object({ kind: reasonKind, label: z.string(), count: z.number().int(), oldestAt: when })),
  }),
  "the items counted by reason, largest first",
);

const inbound = z.object({
  direction: z.literal("in"),
  at: when.describe("when it reached us"),
  wamid: z.string(),
  sentAt: when.describe("when the customer sent it"),
  type: z.string(),
  text: z.string().nullable(),
  replyId: id.nullable(),
  skipReason: z.string().nullable(),
  rating: z.enum(CSAT_RATINGS).nullable().describe("a tap on the CSAT buttons: the rating it gave"),
  deleted: z.boolean(),
});
const outbound = z.object({
  direction: z.literal("out"),
  at: when,
  wamid: z.string().nullable(),
  text: z.string(),
  replyId: id,
  template: z.string().nullable(),
  sendState: z.enum(SendState),
  status: z.string().nullable(),
  statusAt: when.nullable(),
});

export const citation = z
  .object({
    source: z.string().describe("the knowledge file (or passage source) cited"),
    title: z.string().nullable(),
    citedText: z.string(),
    location: z.string().nullable().describe('where in it: "characters 120–240", "page 3", "passage 2"'),
  })
  .describe("a passage of the business's knowledge Claude cited for the reply's words");

const toolCall = z
  .object({
    id: z.string().describe("Claude's tool_use id; the business's Idempotency-Key derives from it"),
    name: z.string(),
    input: z.unknown(),
    state: z
      .enum(["requested", "done", "failed", "unknown"])
      .describe("requested: recorded, and it may have gone out; done or failed: its answer is stored; unknown: never answered for sure, a person checks"),
    attempts: z.number().int().describe("how many times it was sent (more than once only after a worker died on it, with the same key)"),
    request: z.object({ method: z.string(), url: z.string() }).nullable().describe("what was sent: never a header"),
    answer: z.string().nullable(),
    isError: z.boolean().nullable(),
    status: z.number().int().nullable(),
    requestedAt: when,
    finishedAt: when.nullable(),
  })
  .describe("a business action Claude asked for while writing the reply");

const replyWork = z.object({
  id,
  state: z.enum(ReplyState),
  kind: z.string(),
  text: z.string().nullable(),
  citations: z.array(citation),
  toolCalls: z.array(toolCall),
});

/** A conversation as both its pages show it: who, which number, and whether the bot may speak. */
const conversationControls = {
  id,
  phoneNumberId: z.string(),
  contact,
  lastInboundAt: when.nullable(),
  windowOpen: z.boolean().describe("the 24-hour window is still open"),
  pausedUntil: when.nullable(),
  pausedBy: z.string().nullable(),
};

export const deadLetterDetail = answer(
  z.object({
    id,
    state,
    createdAt: when,
    attempts: z.number().int(),
    error: z.object({ source: z.string(), code: z.string().nullable(), reason: z.string(), detail: details }),
    explanation,
    conversation: z.object(conversationControls),
    reply: z
      .object({
        id,
        draft: z.string().nullable(),
        state: z.enum(ReplyState),
        kind: z.string(),
        maybeSent: z.boolean(),
        deliveredAfterAll: z.boolean(),
        citations: z.array(citation),
        toolCalls: z.array(toolCall),
      })
      .nullable(),
    replies: z.array(replyWork).describe("each reply in the timeline, with the knowledge it cited and the business actions it took, oldest first"),
    timeline: z.array(z.discriminatedUnion("direction", [inbound, outbound])).describe("both sides, oldest first"),
    actions: z.array(z.object({ actor: z.string(), action: z.string(), detail: details, at: when })),
    handled: z.object({ by: z.string().nullable(), at: when.nullable(), note: z.string().nullable() }).nullable(),
  }),
  "the item, the conversation around it, and the audit trail",
);

export const resent = answer(z.object({ ok: z.literal(true), state: z.literal("resent") }), "queued: the reply goes out again");
export const discarded = answer(z.object({ ok: z.literal(true), state: z.literal("discarded") }), "closed");
export const answered = answer(
  z.object({ ok: z.literal(true), state: z.literal("open") }),
  "queued: the person's message goes out once; the conversation stays with them until they give it back",
);
export const templateSent = answer(
  z.object({ ok: z.literal(true), state: z.enum(["resent", "open"]) }),
  "queued: the template goes out once; `resent` resolved a failed reply, `open`: a waiting customer's conversation stays with the person",
);
export const givenBack = answer(z.object({ ok: z.literal(true), state: z.literal("resolved") }), "the bot answers the customer's next message");
export const bulkResent = answer(
  z.object({ ok: z.literal(true), resent: z.number().int(), skipped: z.number().int(), spacingMs: z.number().int() }),
  "how many were queued, and how many were skipped",
);
export const paused = answer(
  z.object({ ok: z.literal(true), pausedUntil: when.nullable(), indefinitely: z.boolean() }),
  "the bot answers nothing in this conversation until then",
);
export const resumed = answer(z.object({ ok: z.literal(true) }), "the bot answers again");

/** Every action on an item is refused while another person answers it (src/state/staff-actions.ts). */
const HELD = "another person answering the item right now (`held_by_other`: the body names them; take it over first)";
/** Resuming the bot is refused while another person answers one of the conversation's items. */
export const heldRefused = answer(z.object({ error: z.string(), code: z.literal("held_by_other") }), HELD);
/** A refused discard. */
export const discardRefused = answer(
  z.object({ error: z.string(), code: z.literal("held_by_other").optional() }),
  `not discarded: already resent, discarded or resolved (the body says by whom), or ${HELD}`,
);

/** A refused resend: `code` says when the page can act (e.g. ask to confirm a maybe-sent resend). */
export const resendRefused = answer(
  z.object({ error: z.string(), code: z.enum(["already_delivered", "maybe_sent", "no_reply", "held_by_other"]).optional() }),
  `not resent: already handled, Meta took the reply after all (\`already_delivered\`), its last send may have arrived (\`maybe_sent\`, until \`confirmMaybeSent\`), a customer waiting for a person with no reply to resend (\`no_reply\`), ${HELD}, or a resend of it already running`,
);
/** A refused answer to a waiting customer, or a refused give-back. */
export const answerRefused = answer(
  z.object({ error: z.string(), code: z.enum(["has_reply", "window_closed", "opted_out", "held_by_other"]).optional() }),
  `not done: already resolved or discarded (the body says by whom), a failed reply to resend instead (\`has_reply\`), free text past the 24-hour window (\`window_closed\`: send a template), a customer who opted out (\`opted_out\`), or ${HELD}`,
);
/** A template send's refusals: a resend's, or an answer's. */
export const templateRefused = answer(
  z.object({ error: z.string(), code: z.enum(["already_delivered", "maybe_sent", "opted_out", "held_by_other"]).optional() }),
  `not sent: already handled, Meta took the failed reply after all (\`already_delivered\`), its last send may have arrived (\`maybe_sent\`, until \`confirmMaybeSent\`), a customer who opted out (\`opted_out\`), or ${HELD}`,
);
const template = z.object({
  name: z.string(),
  language: z.string(),
  category: z.string().describe("MARKETING, UTILITY or AUTHENTICATION"),
  body: z.string().describe("the body's words with their {{1}}-style placeholders"),
  parameterCount: z.number().int().describe("how many parameters the body takes"),
  price: z.number().nullable().describe("what Meta charges for one, by META_RATES_FILE's `*` market of its category; null when the card has no price"),
});
export const templateList = answer(
  z.object({ configured: z.boolean().describe("false without WHATSAPP_BUSINESS_ACCOUNT_ID"), fetchedAt: when.nullable(), templates: z.array(template) }),
  "the business account's approved templates",
);
export const templatesUnavailable = problem("Meta's list of templates could not be read (the body says why)");
export const queueUnavailable = problem("the queue is unreachable; the item is still open");
export const deadLetterNotFound = problem("no such dead letter");
export const conversationNotFound = problem("no such conversation");

// Conversations (issue 33): every conversation, and one whole.

/** A refusal naming each parameter at fault, and why. */
/** "bad parameter: limit (…); unknown foo": every problem of a query or body, by its name. */
export const badPart = (part: "parameter" | "body") => (error: z.ZodError) =>
  `bad ${part}: ${error.issues
    .map((issue) => (issue.code === "unrecognized_keys" ? `unknown ${issue.keys.join(", ")}` : `${issue.path.join(".")} (${issue.message})`))
    .join("; ")}`;
const badParameter = badPart("parameter");
const cursor = (description: string) =>
  z
    .string()
    .max(200)
    .transform((text, ctx) => {
      const decoded = decodeCursor(text);
      if (decoded) return decoded;
      ctx.addIssue({ code: "custom", message: "not a cursor this API gave" });
      return z.NEVER;
    })
    .describe(description);
const utcDayParameter = z.iso.date({ error: "a day as YYYY-MM-DD" });

export const conversationListQuery = requestPart(
  z
    .strictObject({
      q: z
        .string()
        .trim()
        .min(1)
        .max(140)
        .optional()
        .describe("any part of the customer's name, phone, @username or BSUID, or words either side wrote (full-text search, KNOWLEDGE_LANGUAGE)"),
      phoneNumberId: z.string().regex(/^\d+$/, { error: "digits" }).optional(),
      from: utcDayParameter.optional().describe("the last activity on or after this UTC day, YYYY-MM-DD"),
      to: utcDayParameter.optional().describe("the last activity on or before this UTC day, YYYY-MM-DD"),
      handedOff: z.literal("true", { error: "only true" }).optional().describe("only those a person holds now (the bot paused)"),
      deadLettered: z
        .literal("true", { error: "only true" })
        .optional()
        .describe("only those with an open item (a dead letter or a customer waiting for a person)"),
      rating: z.enum(CSAT_RATINGS).optional().describe("only those the customer rated so"),
      limit: z.coerce.number().int().min(1).max(200).optional().describe("default 50, at most 200"),
      cursor: cursor("the last page's `nextCursor`").optional(),
    })
    .refine((query) => !query.from || !query.to || query.from <= query.to, { error: "from is after to", path: ["from"] }),
  { status: 400, error: badParameter },
);

export const conversationQuery = requestPart(
  z.strictObject({
    before: cursor("the last page's `olderCursor`: the entries older than it").optional(),
    limit: z.coerce.number().int().min(1).max(500).optional().describe("timeline entries, newest first; default 100, at most 500"),
  }),
  { status: 400, error: badParameter },
);

/** A malformed id is a 400 here (the list's ids are UUIDs); an unknown one, 404. */
export const conversationToRead = requestPart(z.object({ id }), { status: 400, error: "bad parameter: id (not a conversation id)" });

const conversationItem = z.object({
  id,
  phoneNumberId: z.string(),
  contact,
  lastMessageAt: when.describe("when it last moved: a customer's message reached us, or Meta took one of ours"),
  lastMessage: z.object({ direction: z.enum(["in", "out"]), text: z.string().nullable() }).nullable(),
  messageCount: z.number().int().describe("both sides: the customer's messages and our parts"),
  handedOff: z.boolean().describe("a person holds it now: the bot is paused"),
  openItems: z.number().int().describe("open dead letters and customers waiting for a person"),
  rating: z.enum(CSAT_RATINGS).nullable().describe("the customer's latest CSAT answer"),
});

export const conversationList = answer(
  z.object({ items: z.array(conversationItem), nextCursor: z.string().nullable().describe("pass as `cursor` for the next page; null on the last") }),
  "the conversations that match, newest activity first",
);

export const conversationDetail = answer(
  z.object({
    ...conversationControls,
    timeline: z.array(z.discriminatedUnion("direction", [inbound, outbound])).describe("both sides, oldest first: the newest `limit` entries before `before`"),
    replies: z.array(replyWork).describe("each reply in the timeline, with the knowledge it cited and the business actions it took, oldest first"),
    olderCursor: z.string().nullable().describe("pass as `before` for the older entries; null when this page reaches the start"),
    items: z
      .array(
        z.object({
          id,
          state,
          source: z.string(),
          code: z.string().nullable(),
          reason: z.string(),
          kind: reasonKind.describe("as GET /admin/dlq/summary groups them"),
          title: z.string().describe("why, in a few words, as the queue says it"),
          createdAt: when,
        }),
      )
      .describe("every dead letter and handoff of the conversation, oldest first"),
    ratings: z
      .array(z.object({ rating: z.enum(CSAT_RATINGS), askedAt: when.nullable(), ratedAt: when.nullable() }))
      .describe("the customer's CSAT answers, oldest first: each ask's latest tap"),
    cost: z.object({
      claudeUsd: z.number().describe("its replies' Claude calls, by the cost ledger"),
      tokens: z.object({ input: z.number().int(), output: z.number().int(), cacheRead: z.number().int(), cacheWrite: z.number().int() }),
      meta: z.number().describe("what Meta billed for its messages, in META_RATES_FILE's currency"),
    }),
  }),
  "the conversation whole (or a page of its timeline), why the bot said each thing, its items and what it cost",
);
