import type { Db } from "../db/client.ts";
import { type DeadLetterDeps, recordDeadLetter } from "../dlq/dead-letters.ts";
import type { Logger } from "../logger.ts";
import type { StatusJobData } from "../queue/catalog.ts";
import { markAccepted, recordStatus } from "../replies/state.ts";
import { maskPhoneNumbers } from "../whatsapp/answer-shape.ts";
import { ruleForGraphCode } from "../whatsapp/error-codes.ts";
import type { GraphErrorsCount } from "../whatsapp/graph-client.ts";

/**
 * Meta's delivery receipts. Statuses arrive out of order and more than once, so the stored
 * status only moves forward: sent < delivered < read; failed is terminal. A failed status
 * means the earlier 200 did not mean delivered: the reply becomes a dead letter.
 */
const RANK: Record<StatusJobData["status"]["status"], number> = { sent: 1, delivered: 2, read: 3, played: 3, failed: 4 };

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface StatusDeps extends DeadLetterDeps {
  logger: Logger;
  metrics: DeadLetterDeps["metrics"] & { graphErrors: GraphErrorsCount };
}

export async function processStatus(deps: StatusDeps, data: StatusJobData): Promise<string> {
  const { status } = data;
  const log = deps.logger.child({ wamid: status.id, status: status.status });
  const part = await findPart(deps, data, log);
  if (!part) {
    log.info({ event: "status.unknown_message" }, "status for a message we did not send (or no longer track); ignored");
    return "unknown";
  }

  const advanced = await recordStatus(deps.db, part.id, { status: status.status, rank: RANK[status.status], at: new Date(Number(status.timestamp) * 1000) });
  if (!advanced) {
    log.debug({ event: "status.stale" }, "status is not newer than what we have");
    return "stale";
  }
  log.info({ event: "status.recorded" }, "delivery status recorded");
  if (status.status !== "failed") return "recorded";

  // Counted once, as the status moves to failed: a redelivered webhook is stale by now.
  deps.metrics.graphErrors.inc({ code: status.errors?.[0] ? String(status.errors[0].code) : "none", via: "status" });
  const letter = await deadLetterFailedDelivery(deps, status, part.replyId);
  log.error(
    { event: "reply.dead_lettered", deadLetter: letter?.id, joined: letter ? !letter.created : undefined, code: status.errors?.[0]?.code },
    "delivery failed; reply dead-lettered",
  );
  return "dead_lettered";
}

/** Meta reported a reply's message failed: the reply becomes a dead letter, or joins its open one. */
export async function deadLetterFailedDelivery(deps: DeadLetterDeps, status: StatusJobData["status"], replyId?: string) {
  const { db } = deps;
  const ours = status.biz_opaque_callback_data;
  const part = replyId
    ? { replyId }
    : await db.outboundMessage.findFirst({
        where: { OR: [{ wamid: status.id }, ...(ours && UUID.test(ours) ? [{ id: ours }] : [])] },
        select: { replyId: true },
      });
  if (!part) return null;
  const error = status.errors?.[0];
  const rule = error ? ruleForGraphCode(error.code, undefined) : undefined;
  const reply = await db.reply.findUniqueOrThrow({ where: { id: part.replyId }, select: { id: true, conversationId: true } });
  return recordDeadLetter(deps, {
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
  });
}

/** By wamid; else by our part id in biz_opaque_callback_data, which reconciles a send we never saw answered (law 5). */
async function findPart(deps: { db: Db }, data: StatusJobData, log: Logger) {
  const { status } = data;
  const byWamid = await deps.db.outboundMessage.findUnique({ where: { wamid: status.id }, select: { id: true, replyId: true } });
  if (byWamid) return byWamid;
  const ours = status.biz_opaque_callback_data;
  if (!ours || !UUID.test(ours)) return null;
  const part = await deps.db.outboundMessage.findUnique({ where: { id: ours }, select: { id: true, replyId: true, wamid: true } });
  if (!part) return null;
  const confirmed = await markAccepted(deps.db, part.id, status.id);
  if (confirmed.accepted) log.info({ event: "status.reconciled", part: part.id, replySent: confirmed.replySent }, "send confirmed by status webhook");
  return part;
}
