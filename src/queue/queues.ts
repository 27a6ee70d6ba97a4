import { Queue, type JobsOptions } from "bullmq";
import type { Redis } from "ioredis";
import type { InboundItem, StatusItem } from "../webhook/payload.ts";

/** The job catalog: queue names, job payloads, and how each job is added. */

export const QUEUE_NAMES = { inbound: "inbound", reply: "reply", status: "status" } as const;

export type InboundJobData = Omit<InboundItem, "kind">;
export type StatusJobData = Omit<StatusItem, "kind">;
export interface ReplyJobData {
  conversationId: string;
}

export interface Queues {
  inbound: Queue<InboundJobData>;
  reply: Queue<ReplyJobData>;
  status: Queue<StatusJobData>;
}

export interface QueueSettings {
  prefix: string;
  attempts: number;
}

/** Kept briefly for operators to inspect; the durable record is Postgres. */
const KEEP = { removeOnComplete: { age: 3600, count: 1000 }, removeOnFail: { age: 7 * 24 * 3600 } } as const;

export function createQueues(connection: Redis, settings: QueueSettings): Queues {
  const defaultJobOptions: JobsOptions = { attempts: settings.attempts, backoff: { type: "policy" }, ...KEEP };
  const options = { connection, prefix: settings.prefix, defaultJobOptions };
  return {
    inbound: new Queue<InboundJobData>(QUEUE_NAMES.inbound, options),
    reply: new Queue<ReplyJobData>(QUEUE_NAMES.reply, options),
    status: new Queue<StatusJobData>(QUEUE_NAMES.status, options),
  };
}

export async function closeQueues(queues: Queues): Promise<void> {
  await Promise.all([queues.inbound.close(), queues.reply.close(), queues.status.close()]);
}

/** BullMQ job ids may not contain ":"; wamids do not, but a hostile body might. */
const jobIdPart = (value: string) => value.replaceAll(":", "_");

/** The job id derives from the wamid, so enqueueing the same message twice is harmless (law 3). */
export async function enqueueInbound(queues: Queues, item: InboundItem): Promise<void> {
  const { kind: _kind, ...data } = item;
  await queues.inbound.add("inbound", data, { jobId: `in.${jobIdPart(item.message.id)}` });
}

export async function enqueueStatus(queues: Queues, item: StatusItem): Promise<void> {
  const { kind: _kind, ...data } = item;
  await queues.status.add("status", data, { jobId: `st.${jobIdPart(item.status.id)}.${item.status.status}` });
}

/**
 * Law 8: one reply job per conversation at a time, across every worker. BullMQ's
 * deduplication keeps at most one active and one waiting job per conversation
 * (`keepLastIfActive`); while the waiting one is still delayed, each new message pushes it
 * back (`reschedule`), so a burst gets one answer.
 */
export async function scheduleReply(queues: Queues, conversationId: string, debounceMs: number): Promise<void> {
  await queues.reply.add(
    "reply",
    { conversationId },
    { delay: debounceMs, deduplication: { id: `conv.${conversationId}`, keepLastIfActive: true, reschedule: true } },
  );
}
