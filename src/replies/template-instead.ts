import type { Config } from "../config/config.ts";
import type { NumberSettings } from "../config/numbers.ts";
import type { Db } from "../db/client.ts";
import { PermanentError } from "../errors.ts";
import type { Logger } from "../logger.ts";
import type { ConversationView } from "../state/conversations.ts";
import type { Lease } from "../state/fence.ts";
import { awaitsChosenTemplate } from "../state/parts.ts";
import { replaceUnsentWithTemplate } from "../state/replies.ts";

/**
 * Past the window only an approved template reaches the customer (WHATSAPP.md §7): when the
 * business number has one configured, it replaces whatever was still unsent, recorded as a
 * template; otherwise the reply is a dead letter saying so. A template a person chose for this
 * reply (issue 21) is already what past the window allows: it is sent as it is.
 */
export async function templateInstead(
  db: Db,
  numbers: Config["numbers"],
  lease: Lease,
  conversation: ConversationView,
  reply: { id: string; kind: string },
  log: Logger,
  now: Date,
): Promise<void> {
  // A holding message ("a person will get back to you") is only worth saying inside the window:
  // dropped (it joins its item's history), never turned into a paid template.
  if (reply.kind === "holding")
    throw new PermanentError({
      source: "window",
      code: "window_closed",
      reason: "The 24-hour customer-service window closed before the holding reply went out: it is dropped, not sent as a paid template",
      detail: { lastInboundAt: conversation.lastInboundAt?.toISOString() },
    });
  const replyId = reply.id;
  if (await awaitsChosenTemplate(db, replyId)) return;
  const template: NumberSettings["windowClosedTemplate"] = numbers.get(conversation.phoneNumberId)?.windowClosedTemplate;
  if (!template) {
    throw new PermanentError({
      source: "window",
      code: "window_closed",
      reason: "The 24-hour customer-service window closed before this reply went out: only an approved template can reach the customer now",
      detail: { lastInboundAt: conversation.lastInboundAt?.toISOString() },
    });
  }
  await replaceUnsentWithTemplate(db, lease, replyId, template, now);
  log.info({ event: "reply.template_instead", template: template.name }, "window closed: sending the number's template instead");
}
