import { z } from "zod";
import type { Clock } from "../clock.ts";
import { isBillable, type MetaRates, marketOf, metaAmount } from "../costs/meta-rates.ts";
import type { Db } from "../db/client.ts";
import type { DeadLetterDesk } from "../dlq/dead-letters.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { StatusJobData } from "../queue/catalog.ts";
import { type Queues, scheduleReply } from "../queue/queues.ts";
import { type PartPricing, recordCopyPricing, recordDeliveryStatus, recordPartPricing, type StatusOutcome, UUID } from "../state/parts.ts";
import { maskPhoneNumbers } from "../whatsapp/answer-shape.ts";
import { ruleForGraphCode } from "../whatsapp/error-codes.ts";
import type { GraphErrorsCount } from "../whatsapp/graph-client.ts";
import type { CsatAsks } from "./csat.ts";
import type { Processor } from "./processor.ts";

/**
 * Meta's delivery receipts. Statuses arrive out of order and more than once, so the stored
 * status only moves forward: sent < delivered < read; failed is terminal. A status that carries
 * our part id back for a send we never saw answered confirms it (law 5). A failed status means
 * the earlier 200 did not mean delivered: the reply becomes a dead letter. A receipt of a copy
 * that was sent again (law 5's window) says nothing of the reply and changes nothing.
 */

export interface StatusDeps extends FailedDeliveryDeps {
  csat: CsatAsks;
  clock: Clock;
  logger: Logger;
  metrics: { graphErrors: GraphErrorsCount } & Pick<Metrics, "metaMessages" | "metaCost">;
}

/** What dead-lettering a failed delivery takes: the reply's row, the desk, the queue that carries the conversation on. */
export interface FailedDeliveryDeps {
  db: Db;
  queues: Queues;
  deadLetters: DeadLetterDesk;
}

/** What the settings say of a receipt: what a billed message costs. */
export interface StatusSettings {
  /** Meta's rate card (META_RATES_FILE); without it billed messages are counted, not priced. */
  metaRates: MetaRates | undefined;
}

export function statusProcessor(deps: StatusDeps, settings: StatusSettings): Processor<"status"> {
  return { run: (job) => processStatus(deps, settings, job.data) };
}

export async function processStatus(deps: StatusDeps, settings: StatusSettings, data: StatusJobData): Promise<string> {
  const { status } = data;
  const log = deps.logger.child({ wamid: status.id, status: status.status });
  const recorded = await recordStatus(deps, status);
  if (recorded.outcome === "recorded" || recorded.outcome === "stale" || recorded.outcome === "superseded")
    await recordPricing(deps, settings.metaRates, status, { partId: recorded.partId, copy: recorded.outcome === "superseded" }, log);
  // A send whose answer never came, confirmed here: a bot's answer is sent now, and the customer is asked how it went as after any other.
  if ((recorded.outcome === "recorded" || recorded.outcome === "stale") && recorded.replySent) await afterReplySent(deps, recorded.replyId, log);
  switch (recorded.outcome) {
    case "unknown":
      log.info({ event: "status.unknown_message" }, "status for a message we did not send (or no longer track); ignored");
      return "unknown";
    case "superseded":
      log.info({ event: "status.superseded_copy", part: recorded.partId }, "status of a copy sent again; the part is known by the other copy");
      return "superseded";
    case "stale":
      log.debug({ event: "status.stale" }, "status is not newer than what we have");
      return "stale";
    case "recorded":
      log.info({ event: "status.recorded" }, "delivery status recorded");
      return "recorded";
    case "failed": {
      // Counted once, as the status moves to failed: a redelivered webhook is stale by now.
      deps.metrics.graphErrors.inc({ code: status.errors?.[0] ? String(status.errors[0].code) : "none", via: "status" });
      const letter = await deadLetterFailedDelivery(deps, status, recorded.replyId);
      if (letter === "csat_dropped") {
        log.warn({ event: "csat.not_delivered", code: status.errors?.[0]?.code }, "CSAT message not delivered; dropped");
        return "dead_lettered";
      }
      log.error(
        { event: "reply.dead_lettered", deadLetter: letter?.id, joined: letter ? !letter.created : undefined, code: status.errors?.[0]?.code },
        "delivery failed; reply dead-lettered",
      );
      return "dead_lettered";
    }
  }
}

function recordStatus(deps: StatusDeps, status: StatusJobData["status"]): Promise<StatusOutcome> {
  const ours = status.biz_opaque_callback_data;
  return recordDeliveryStatus(
    deps.db,
    { wamid: status.id, callbackPartId: ours && UUID.test(ours) ? ours : undefined, status: status.status, at: new Date(Number(status.timestamp) * 1000) },
    deps.clock.now(),
  );
}

/** Meta's `pricing` object (WHATSAPP.md §3, §12), read leniently: a shape we do not know never costs us the status. */
const pricingSchema = z.object({
  billable: z.boolean().optional(),
  pricing_model: z.string().optional(),
  category: z.string().min(1),
  type: z.string().optional(),
});

/**
 * The message's price, from the first status that carries one (sent, delivered or read, in any
 * order): counted once per message however many statuses say it. The other copy of a part sent
 * again (`copy`) is a message Meta bills too, counted once by its own wamid.
 */
async function recordPricing(
  deps: StatusDeps,
  rates: MetaRates | undefined,
  status: StatusJobData["status"],
  of: { partId: string; copy: boolean },
  log: Logger,
): Promise<void> {
  if (status.status === "failed" || status.pricing === undefined) return;
  const parsed = pricingSchema.safeParse(status.pricing);
  if (!parsed.success) {
    log.warn({ event: "status.pricing_unreadable" }, "status carries a pricing object we cannot read; the message is not counted");
    return;
  }
  const pricing = parsed.data;
  const billable = isBillable(pricing);
  const market = marketOf(rates, pricing.category, status.recipient_id);
  const amount = metaAmount(rates, { billable, category: pricing.category }, market);
  const recorded: PartPricing = {
    category: pricing.category,
    type: pricing.type ?? null,
    pricingModel: pricing.pricing_model ?? null,
    billable,
    market,
    amount,
  };
  const priced = of.copy
    ? await recordCopyPricing(deps.db, { partId: of.partId, wamid: status.id }, recorded, deps.clock.now())
    : await recordPartPricing(deps.db, of.partId, recorded, deps.clock.now());
  if (!priced.recorded) return;
  const labels = { phone_number_id: priced.phoneNumberId, category: pricing.category };
  deps.metrics.metaMessages.inc({ ...labels, billable: String(billable) });
  if (amount) deps.metrics.metaCost.inc(labels, amount);
  log.info({ event: "status.priced", category: pricing.category, billable, market, amount, copy: of.copy }, "message's price recorded");
}

/**
 * Meta reported a reply's message failed: the reply becomes a dead letter, or joins its open
 * one. Whatever run holds the conversation is fenced off, so no more of the dead reply goes
 * out; a fresh reply job carries on with the rest of the conversation's work.
 */
export async function deadLetterFailedDelivery(deps: FailedDeliveryDeps, status: StatusJobData["status"], replyId: string) {
  const error = status.errors?.[0];
  const rule = error ? ruleForGraphCode(error.code, undefined) : undefined;
  const reply = await deps.db.reply.findUniqueOrThrow({ where: { id: replyId }, select: { id: true, conversationId: true } });
  const letter = await deps.deadLetters.reply(
    {
      conversationId: reply.conversationId,
      replyId: reply.id,
      dedupKey: `status.${status.id}`,
      attempts: 1,
      failure: {
        source: "status",
        code: error ? String(error.code) : undefined,
        reason: rule?.reason ?? "Meta reported the message as failed without a reason",
        detail: { title: error?.title, message: maskPhoneNumbers(error?.message), details: maskPhoneNumbers(error?.error_data?.details), href: error?.href },
      },
    },
    "fence_off",
  );
  await scheduleReply(deps.queues, reply.conversationId, 0);
  return letter;
}

async function afterReplySent(deps: StatusDeps, replyId: string, log: Logger): Promise<void> {
  if (!deps.csat.enabled) return;
  const reply = await deps.db.reply.findUniqueOrThrow({ where: { id: replyId }, select: { kind: true, conversationId: true } });
  if (reply.kind === "ai") await deps.csat.plan(reply.conversationId, log);
}
