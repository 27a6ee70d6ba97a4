/**
 * Why a reply is waiting for a person, in words support staff use, with what to do next
 * (STYLE.md 5). The one place these words live: the staff API returns them with every item, so
 * the page, the CLI and automation all say the same thing. `error-codes.ts` keeps the retry
 * policy and the reason written to the logs and the database; this file says it for people.
 */

/** The groups the queue is counted and filtered by: one per thing a person does about it. */
export const REASON_KINDS = {
  window_closed: "24-hour window closed",
  cannot_receive: "Can't receive WhatsApp",
  needs_phone: "Needs the phone number",
  meta_limits: "Meta's sending limits",
  meta_unavailable: "Meta unavailable",
  setup: "Set-up problem",
  claude: "Claude could not reply",
  stuck: "Stuck in our system",
  handoff: "Handed to a person",
  budget: "Daily budget spent",
  tool_unknown: "Business action unconfirmed",
  other: "Other",
} as const;

export type ReasonKind = keyof typeof REASON_KINDS;

export const isReasonKind = (value: string): value is ReasonKind => Object.hasOwn(REASON_KINDS, value);

export interface Explanation {
  kind: ReasonKind;
  /** A few words, for the list. */
  title: string;
  /** What happened, for the customer and for us. */
  text: string;
  /** What to do next. */
  next: string;
  /** Claude's own words, when it refused. */
  said?: string;
}

export interface ExplainedFailure {
  source: string;
  code: string | null;
  reason: string;
}

type Words = Omit<Explanation, "said">;

const WINDOW_CLOSED: Words = {
  kind: "window_closed",
  title: "The 24-hour window has closed",
  text: "The customer last wrote more than 24 hours ago. WhatsApp only lets a business send its own text within 24 hours of the customer's last message.",
  next: "Send an approved template instead: free text will fail again. The window opens again as soon as the customer writes; this reply can be sent then.",
};

const META_LIMIT_NEXT =
  "Nothing is wrong with the reply: send it again in a few minutes. After an outage, “Resend all with this code” sends them paced, so the limit is not hit again.";

const META_UNAVAILABLE: Words = {
  kind: "meta_unavailable",
  title: "Meta's servers were unavailable",
  text: "WhatsApp's servers did not take the message, even after several tries (an outage or a network problem on their side or ours).",
  next: "Send it again: Meta is usually back within minutes. After an outage, resend every item with this code at once.",
};

const OPERATOR = "Tell an operator: this needs fixing in the set-up, not in the reply. Once it is fixed, send it again.";

const TEMPLATE_NEXT = "Pick another approved template (or fix this one in WhatsApp Manager), then send it again.";

/** A template Meta refused (WHATSAPP.md §12): what is wrong with it, and what a person does. */
const TEMPLATE_REFUSED: Record<string, Words> = {
  "132000": {
    kind: "setup",
    title: "The template's parameters did not match",
    text: "Meta refused the template: the number of values sent does not match its {{1}}, {{2}}… placeholders.",
    next: "Fill in every placeholder of the template (no more, no fewer), then send it again.",
  },
  "132001": {
    kind: "setup",
    title: "The template does not exist in that language",
    text: "Meta refused the template: no approved template has that name in that language (it may have been deleted, renamed or not approved yet).",
    next: TEMPLATE_NEXT,
  },
  "132005": {
    kind: "setup",
    title: "The filled template is too long",
    text: "Meta refused the template: with its values filled in, the message is longer than WhatsApp allows.",
    next: "Use shorter values for the placeholders, then send it again.",
  },
  "132007": {
    kind: "setup",
    title: "The template breaks WhatsApp's policy",
    text: "Meta refused the template: its content (or the values filled in) goes against WhatsApp's policy.",
    next: TEMPLATE_NEXT,
  },
  "132012": {
    kind: "setup",
    title: "A template value has the wrong format",
    text: "Meta refused the template: a value filled in is not of the kind the template expects (text, currency, date, a link…).",
    next: "Correct the values to the kind each placeholder takes, then send it again.",
  },
  "132015": {
    kind: "setup",
    title: "The template is paused",
    text: "Meta paused the template because customers reacted badly to it (low quality); it cannot be sent for now.",
    next: TEMPLATE_NEXT,
  },
  "132016": {
    kind: "setup",
    title: "The template is disabled",
    text: "Meta disabled the template for good after repeated low quality; it can never be sent again.",
    next: TEMPLATE_NEXT,
  },
  "132068": {
    kind: "setup",
    title: "The template's flow is blocked",
    text: "Meta refused the template: the WhatsApp Flow it opens is blocked.",
    next: "Tell an operator to fix the flow in WhatsApp Manager, or pick another template.",
  },
  "132069": {
    kind: "meta_limits",
    title: "The template's flow is throttled",
    text: "Meta held the template back: the WhatsApp Flow it opens is being throttled.",
    next: "Send it again in a while, or pick another template.",
  },
};

/** Meta's codes (WHATSAPP.md §6, §9), from a send's answer or a "failed" delivery report. */
const META: Record<string, Words> = {
  ...TEMPLATE_REFUSED,
  "131047": WINDOW_CLOSED,
  "131026": {
    kind: "cannot_receive",
    title: "This number cannot receive WhatsApp messages",
    text: "WhatsApp could not deliver to this customer: the number may not be on WhatsApp, their app may be too old, they may not have accepted WhatsApp's terms, or they blocked this business.",
    next: "Don't send it again: it will fail the same way. Reach the customer another way (a call, an email), then discard this item with a note.",
  },
  "131049": {
    kind: "meta_limits",
    title: "Meta held the message back",
    text: "Meta chose not to deliver it, to limit how many business messages this person receives.",
    next: "Don't send it again right away: wait at least a day, or until the customer writes again.",
  },
  "131048": {
    kind: "meta_limits",
    title: "Meta is limiting this number for spam",
    text: "Meta restricted how many messages this business number may send, because customers blocked or reported its messages.",
    next: "Send it again later, a few at a time, and tell an operator so they can check the number's quality rating.",
  },
  "130429": {
    kind: "meta_limits",
    title: "Meta's sending limit was reached",
    text: "The business number sent more messages per second than Meta allows.",
    next: META_LIMIT_NEXT,
  },
  "131056": {
    kind: "meta_limits",
    title: "Too many messages to this customer",
    text: "Too many messages went to this customer in a short time; Meta allows about one every 6 seconds.",
    next: META_LIMIT_NEXT,
  },
  "80007": {
    kind: "meta_limits",
    title: "Meta's account limit was reached",
    text: "The WhatsApp Business Account made more requests than Meta allows.",
    next: META_LIMIT_NEXT,
  },
  "4": {
    kind: "meta_limits",
    title: "Meta's app limit was reached",
    text: "Our app made more requests to Meta than it allows for a while.",
    next: META_LIMIT_NEXT,
  },
  "190": {
    kind: "setup",
    title: "The WhatsApp access token stopped working",
    text: "Meta no longer accepts our access token (it expired or was revoked), so nothing can be sent.",
    next: `${OPERATOR} Every item with this code can then be resent at once.`,
  },
  "0": {
    kind: "setup",
    title: "Meta could not check our access",
    text: "Meta could not authenticate our app, so nothing can be sent.",
    next: `${OPERATOR} Every item with this code can then be resent at once.`,
  },
  "131062": {
    kind: "needs_phone",
    title: "Needs the customer's phone number",
    text: "This customer is known only by their WhatsApp username (they hide their number), and Meta does not deliver this kind of message (for example some templates) to a username.",
    next: "Send your reply as plain text while the window is open, or ask the customer for their phone number; otherwise discard this item with a note.",
  },
  "10": { kind: "setup", title: "Our app lacks a permission", text: "Meta says our app is not allowed to do this.", next: OPERATOR },
  "100": {
    kind: "setup",
    title: "Meta rejected our request",
    text: "Meta said something in our request was wrong: a fault on our side, not the customer's.",
    next: OPERATOR,
  },
  "131008": {
    kind: "setup",
    title: "Meta rejected our request",
    text: "Something required was missing from our request: a fault on our side.",
    next: OPERATOR,
  },
  "131009": { kind: "setup", title: "Meta rejected our request", text: "A value in our request was not accepted: a fault on our side.", next: OPERATOR },
  "133010": {
    kind: "setup",
    title: "The business number is not registered",
    text: "The business number is not registered with WhatsApp's Cloud API.",
    next: OPERATOR,
  },
  "368": {
    kind: "setup",
    title: "The business number is blocked",
    text: "Meta temporarily blocked the business number for policy violations.",
    next: OPERATOR,
  },
  "131031": { kind: "setup", title: "The business account is locked", text: "Meta locked the WhatsApp Business Account.", next: OPERATOR },
  "131051": {
    kind: "other",
    title: "WhatsApp does not support this message",
    text: "The message was of a kind WhatsApp does not support.",
    next: "Write a plain text reply and send that instead, or discard.",
  },
  "131052": {
    kind: "other",
    title: "The customer's file could not be fetched",
    text: "Meta could not download the picture, voice note or file the customer sent.",
    next: "Ask the customer to send it again, or answer without it.",
  },
  "131053": {
    kind: "other",
    title: "Our file was refused",
    text: "Meta could not process the file we tried to send.",
    next: "Send a text reply instead, or tell an operator.",
  },
  media_info: {
    kind: "other",
    title: "The customer's file could not be fetched",
    text: "Meta gave us no way to download the file the customer sent.",
    next: "Ask the customer to send it again, or answer without it.",
  },
  media_too_large: {
    kind: "other",
    title: "The customer's file is too large",
    text: "The file the customer sent is larger than we accept.",
    next: "Answer without it, or ask for a smaller file.",
  },
};
for (const code of ["1", "2", "131000", "131016", "133004", "131057", "unreachable"]) META[code] = META_UNAVAILABLE;
// Sent, but Meta's answer never came: whether the customer has it is unknown (law 5).
for (const code of ["timeout", "network", "answer_lost", "unreadable_answer"]) {
  META[code] = {
    ...META_UNAVAILABLE,
    title: "Meta did not answer the send",
    text: "We sent the reply, but Meta's answer never came back (it took too long, or the connection broke), even after several tries.",
  };
}

const MAYBE_SENT_NEXT =
  "This reply may already have arrived: Meta never answered its last send and no delivery report came. Check with the customer, or wait for the report, before sending it again: a resend may give them a second copy.";

/** What Claude said, out of the reason `classifyAnthropicError` wrote ("Claude answered 400 (type): words"). */
const claudeSaid = (reason: string) => /^Claude answered \d+(?: \([^)]*\))?: ([\s\S]+)$/.exec(reason)?.[1]?.trim();

function explainClaude(failure: ExplainedFailure): Explanation {
  const status = Number(failure.code);
  if (failure.code === "empty") {
    const refused = /stop reason refusal/.test(failure.reason);
    return {
      kind: "claude",
      title: refused ? "Claude declined to answer" : "Claude wrote nothing",
      text: refused ? "Claude declined to write a reply to this conversation." : "Claude's answer had no text in it.",
      next: "Write the reply yourself and send it.",
    };
  }
  if (Number.isInteger(status) && status >= 400 && status < 500 && ![408, 409, 429].includes(status)) {
    const said = claudeSaid(failure.reason);
    const access = status === 401 || status === 403;
    return {
      kind: access ? "setup" : "claude",
      title: access ? "Claude did not accept our API key" : "Claude refused to write a reply",
      text: said ? `Claude refused the request and said: “${said}”` : "Claude refused the request without saying why.",
      next: access ? OPERATOR : "Write the reply yourself and send it. Regenerating will most likely be refused again.",
      ...(said ? { said } : {}),
    };
  }
  return {
    kind: "claude",
    title: "Claude was unavailable",
    text: "Claude did not answer, even after several tries (busy, too slow, or unreachable).",
    next: "Regenerate (this asks Claude again, at a cost), or write the reply yourself.",
  };
}

const INTERNAL: Record<string, Words> = {
  stuck: {
    kind: "stuck",
    title: "The reply got stuck",
    text: "Writing or sending this reply stalled twice on our side (not the customer's fault); the system stopped trying by itself.",
    next: "Read the conversation, then send the draft, write a reply, or regenerate. Discard if it was already answered.",
  },
  inbound_failed: {
    kind: "stuck",
    title: "A message could not be processed",
    text: "The customer's message could not be processed, even when tried again; it is kept here so that someone answers it.",
    next: "Write the reply yourself (or regenerate), or discard if it needs no answer.",
  },
  no_address: {
    kind: "stuck",
    title: "No way to reach this customer",
    text: "We have neither a phone number nor a WhatsApp user id for this customer.",
    next: "Discard this item with a note: nobody can be reached.",
  },
};

/** What a person does for a customer waiting for one, whoever handed them over. */
const HANDOFF_NEXT =
  "Write to them here (free text within the 24-hour window, an approved template after it), then give the conversation back to the bot: it answers their next message knowing what you said.";

/** The plain-words explanation of a dead letter; `maybeSent` when its last send may have arrived. */
export function explain(failure: ExplainedFailure, context: { maybeSent?: boolean } = {}): Explanation {
  const words = explainFailure(failure);
  return context.maybeSent ? { ...words, next: MAYBE_SENT_NEXT } : words;
}

function explainFailure(failure: ExplainedFailure): Explanation {
  const { source, code } = failure;
  switch (source) {
    case "handoff":
      return explainHandoff(failure);
    case "tool":
      return {
        kind: "tool_unknown",
        title: "A business action may or may not have happened",
        text: "Claude asked one of the business's tools to act, and the tool never answered for sure, even when asked again with the same Idempotency-Key: it may have done it. It is not asked again. Claude told the customer a person will check, not that it failed.",
        next: "Check in the business's own system whether it was done (the reason names the tool; the reply's business actions show what was sent), tell the customer what you found, then discard this item with a note.",
      };
    case "budget":
      return {
        kind: "budget",
        title: "The number's daily budget is spent",
        text: "This number has spent its daily budget for Claude (dailyBudget, in USD), so Claude was not asked; the customer was told a person will answer (once that day).",
        next: "Write the reply yourself and send it. Regenerating asks Claude, so it too waits for the next UTC day, when new answers resume by themselves.",
      };
    case "window":
      if (code === "template_missing") {
        return {
          ...WINDOW_CLOSED,
          text: "The 24-hour window had closed, and the template set up to send instead is no longer configured for this number.",
          next: "Tell an operator to set the template up again, or wait for the customer to write, then send this reply.",
        };
      }
      return WINDOW_CLOSED;
    case "anthropic":
      return explainClaude(failure);
    case "internal":
      return (
        (code && INTERNAL[code]) || {
          kind: "stuck",
          title: "Something went wrong on our side",
          text: `Our system failed while handling this reply: ${failure.reason}`,
          next: "Send it again; if it fails again, tell an operator.",
        }
      );
    case "graph":
    case "status":
      return explainMeta(failure);
    default:
      return { kind: "other", title: "The reply failed", text: failure.reason, next: "Send it again once; if it fails again, tell an operator." };
  }
}

/** A customer handed to a person: by their own word, by Claude, or writing to a bot already paused. */
function explainHandoff(failure: ExplainedFailure): Explanation {
  const { code } = failure;
  if (code === "paused") {
    return {
      kind: "handoff",
      title: "The customer wrote to a paused bot",
      text: "The bot is paused for this conversation (someone took it over earlier), so it stores the customer's messages but does not answer them, and nobody has yet.",
      next: HANDOFF_NEXT,
    };
  }
  if (code === "claude") {
    const said = failure.reason.replace(/^Claude handed the customer to a person: /, "");
    return {
      kind: "handoff",
      title: "Claude handed the customer to a person",
      text: `Claude could not help from the business's knowledge and tools, and said why: “${said}”. The customer was told a person will answer; the bot is paused for this conversation.`,
      next: HANDOFF_NEXT,
    };
  }
  return {
    kind: "handoff",
    title: "The customer asked for a person",
    text: "The customer asked to talk to a person, so the bot is paused for this conversation: it stores their messages but does not answer.",
    next: HANDOFF_NEXT,
  };
}

/** Meta's refusal, at the send (graph) or in a failed status: its code's own words, else the kind its number says. */
function explainMeta(failure: ExplainedFailure): Explanation {
  const { source, code } = failure;
  const known = code ? META[code] : undefined;
  if (known) return known;
  if (code && /^http_5\d\d$/.test(code)) return META_UNAVAILABLE;
  const number = Number(code);
  if (number >= 200 && number <= 299) return META["10"]!;
  if (number >= 132000 && number <= 132099) {
    return {
      kind: "setup",
      title: "The message template has a problem",
      text: "The template is missing, paused, or does not match what we sent.",
      next: OPERATOR,
    };
  }
  if (!code && source === "status") {
    return {
      kind: "other",
      title: "WhatsApp reported the message failed",
      text: "WhatsApp said the message failed, without saying why.",
      next: "Send it again once; if it fails again, reach the customer another way.",
    };
  }
  return {
    kind: "other",
    title: "Meta refused the message",
    text: `Meta said: ${failure.reason}`,
    next: "Send it again once; if it fails again, tell an operator.",
  };
}
