import type { Clock } from "../clock.ts";
import type { Config } from "../config/config.ts";
import type { Db } from "../db/client.ts";
import type { Logger } from "../logger.ts";
import { BUSINESS_APP } from "../messages/controls.ts";
import { describeInbound } from "../messages/describe.ts";
import type { EventJobData } from "../queue/catalog.ts";
import { changeUserId, conversationWith, resolveContact } from "../state/contacts.ts";
import { pauseForPerson } from "../state/conversations.ts";
import { recordBusinessReply } from "../state/replies.ts";
import type { InboundMessagePayload } from "../whatsapp/webhook-payload.ts";
import type { Processor } from "./processor.ts";

export interface EventDeps {
  db: Db;
  logger: Logger;
  clock: Clock;
}
export type EventSettings = { conversation: Config["conversation"] };

export function eventsProcessor(deps: EventDeps, settings: EventSettings): Processor<"events"> {
  return { run: (job) => processEvent(deps, settings, job.data) };
}

/**
 * The business side of WhatsApp, beside the customers' messages: never answered, each with a
 * deliberate, logged outcome (law 6).
 *   echo:        a person wrote from the WhatsApp Business app on the same number
 *                (coexistence, WHATSAPP.md §10): stored as the business's side of the
 *                conversation, and the bot stays out of it for HUMAN_REPLY_PAUSE_MINUTES
 *   preferences: the customer stopped (or resumed) marketing messages: stored on the contact
 *   user_id:     the customer's BSUID changed (WHATSAPP.md §9): the contact follows it
 */
export async function processEvent(deps: EventDeps, settings: EventSettings, event: EventJobData): Promise<string> {
  switch (event.type) {
    case "echo":
      return recordEcho(deps, settings, event);
    case "preferences": {
      const contact = await resolveContact(deps.db, event.sender);
      const log = deps.logger.child({ contact: contact.id });
      if (event.category !== "marketing_messages") {
        log.info({ event: "preferences.ignored", category: event.category }, "a preference the bot does not act on");
        return "ignored";
      }
      const stopped = event.value === "stop";
      await deps.db.contact.update({ where: { id: contact.id }, data: { marketingOptedOutAt: stopped ? new Date(event.timestamp * 1000) : null } });
      log.info({ event: stopped ? "preferences.marketing_stopped" : "preferences.marketing_resumed" }, "marketing preference stored");
      return "recorded";
    }
    case "user_id": {
      const contact = await changeUserId(deps.db, event);
      deps.logger.info(
        { event: contact ? "contact.user_id_changed" : "contact.user_id_unknown", contact: contact?.id },
        contact ? "the customer's BSUID changed" : "a BSUID change for a customer we never heard from",
      );
      return contact ? "recorded" : "unknown";
    }
  }
}

async function recordEcho(deps: EventDeps, settings: EventSettings, event: Extract<EventJobData, { type: "echo" }>): Promise<string> {
  const { echo } = event;
  const log = deps.logger.child({ wamid: echo.id });
  const at = new Date(Number(echo.timestamp) * 1000);
  const contact = await resolveContact(deps.db, event.recipient);
  const conversation = await conversationWith(deps.db, { phoneNumberId: event.phoneNumberId, contactId: contact.id });
  const described = describeInbound(echo as unknown as InboundMessagePayload, settings.conversation);
  const text = described.kind === "answer" ? described.text : `[Sent a message of type ${echo.type}]`;
  if (!(await recordBusinessReply(deps.db, conversation.id, { wamid: echo.id, text, at }))) {
    log.info({ event: "echo.duplicate" }, "echo already recorded");
    return "duplicate";
  }
  const minutes = settings.conversation.humanReplyPauseMinutes;
  if (minutes > 0) {
    // A person is talking to the customer: the bot keeps out for a while, then comes back by itself.
    await pauseForPerson(deps.db, conversation.id, new Date(at.getTime() + minutes * 60_000), BUSINESS_APP, deps.clock.now());
  }
  log.info({ event: "echo.recorded", conversation: conversation.id, pausedMinutes: minutes }, "a person answered from the WhatsApp Business app");
  return "recorded";
}
