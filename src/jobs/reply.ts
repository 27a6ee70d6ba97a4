import { randomUUID } from "node:crypto";
import { type Job, RateLimitError } from "bullmq";
import type { ClaudeClient, GeneratedReply } from "../ai/claude.ts";
import type { Config } from "../config/config.ts";
import type { Db } from "../db/client.ts";
import { countHandoff, type DeadLetterDesk } from "../dlq/dead-letters.ts";
import { FencedOut, PermanentError, Postpone, RetryableError } from "../errors.ts";
import { isInfrastructureFailure } from "../infrastructure.ts";
import type { Logger } from "../logger.ts";
import type { Metrics } from "../metrics/metrics.ts";
import type { ReplyJobData } from "../queue/catalog.ts";
import { type Queues, scheduleReply } from "../queue/queues.ts";
import {
  type GenerationDeps,
  type GenerationSettings,
  generationBudgetMs,
  type ReplyCost,
  settleAnswer,
  type Written,
  writeAnswer,
} from "../replies/generation.ts";
import { templateInstead } from "../replies/template-instead.ts";
import type { VoiceNotes } from "../replies/voice-notes.ts";
import { type BeginSettings, type Begun, beginReply, type ConversationView } from "../state/conversations.ts";
import { dropUnsentCsat } from "../state/csat.ts";
import { handOff, openHandoffItem } from "../state/dead-letters.ts";
import type { Lease } from "../state/fence.ts";
import { markAccepted, markRefused, markSending, type Outbox, unsentParts } from "../state/parts.ts";
import { markReplySent, storeDraft } from "../state/replies.ts";
import { type GraphClient, type Recipient, SendTooLate } from "../whatsapp/graph-client.ts";
import { windowOpen } from "../whatsapp/window.ts";
import { type RetryDelaySettings, retryDelayMs } from "./backoff.ts";
import type { CsatAsks } from "./csat.ts";
import { decideFate, isLastAttempt } from "./policy.ts";
import type { Processor } from "./processor.ts";

export interface ReplyDeps extends GenerationDeps {
  db: Db;
  queues: Queues;
  graph: GraphClient;
  claude: ClaudeClient;
  logger: Logger;
  metrics: Metrics;
  deadLetters: DeadLetterDesk;
  csat: CsatAsks;
  voiceNotes: VoiceNotes;
}

/** What the settings say of a reply: how a burst is waited for, what the bot says when it does not write, the send's clocks, the retries. */
export interface ReplySettings extends GenerationSettings {
  retry: RetryDelaySettings;
  replyDebounceMs: number;
  conversation: Config["conversation"];
  send: SendTiming;
}

/** How long a send may take, and how long a maybe-sent part waits for its status before it is sent again (law 5). */
export interface SendTiming {
  /** A run may start a send only this soon after marking the part `sending`: a frozen run must not send late. */
  leaseMs: number;
  /** The Graph client's own timeout: a send started within the lease is answered or abandoned by then. */
  timeoutMs: number;
  /** After that, time for a status webhook to confirm a send Meta took (SEND_RECONCILE_WAIT_MS). */
  reconcileWaitMs: number;
}

/** What a run learned that Postgres could not take: kept in the job itself (Redis) until it can (laws 4 and 5). */
export type KeepInJob = (kept: Pick<ReplyJobData, "draft" | "accepted" | "step">) => Promise<void>;

/** A burst is answered once; but a customer who keeps typing is answered within this many debounce windows. */
const DEBOUNCE_MAX_WINDOWS = 5;

/** Voice notes arriving while others are heard are heard in the next round; this many, then the job fails (and retries). */
const VOICE_NOTE_ROUNDS = 3;

/**
 * The reply job; what a run learns that Postgres cannot take is kept in the job's own data
 * (KeepInJob) until it can.
 */
export function replyProcessor(deps: ReplyDeps, settings: ReplySettings): Processor<"reply"> {
  return {
    run: (job) =>
      processReply(deps, settings, job, async (kept) => {
        await job.updateData({ ...job.data, ...kept, accepted: { ...job.data.accepted, ...kept.accepted } });
      }),
  };
}

/**
 * One reply for one conversation. BullMQ runs at most one of these per conversation at a
 * time, and the database fences off a run that stalled past its lock (law 8); the reply is
 * generated once and stored before it is sent (law 4), and each part is sent at most once
 * (law 5). A job handles one reply; when more work is waiting it schedules the next job, so
 * every reply has its own attempts.
 */
export async function processReply(deps: ReplyDeps, config: ReplySettings, job: Job<ReplyJobData>, keep: KeepInJob): Promise<string> {
  const { conversationId } = job.data;
  const log = deps.logger.child({ conversation: conversationId, job: job.id });
  let handoffOpened = false;
  const settings = {
    ...config.conversation,
    debounceMs: config.replyDebounceMs,
    debounceMaxMs: config.replyDebounceMs * DEBOUNCE_MAX_WINDOWS,
    historyMessages: config.historyMessages,
    generationBudgetMs: generationBudgetMs(config.generation),
    openHandoff: async (tx: Parameters<BeginSettings["openHandoff"]>[0], id: string, wamid: string, why: "asked" | "waiting") => {
      if (await openHandoffItem(tx, id, { key: wamid, waiting: why === "waiting" })) handoffOpened = true;
    },
  };
  // Before the bind, which arms the reply's generation deadline from this same moment.
  let armedAt = deps.clock.monotonicMs();
  let begun = await beginReply(deps.db, conversationId, settings, deps.clock.now());
  // Voice notes are heard before their answer is planned; each round settles every one it was given.
  for (let round = 1; begun.kind === "transcribe"; round++) {
    if (round > VOICE_NOTE_ROUNDS) throw new Error(`conversation ${conversationId}: its voice notes kept waiting for their words`);
    await deps.voiceNotes.hear(begun.voiceNotes, isLastAttempt(job), log);
    armedAt = deps.clock.monotonicMs();
    begun = await beginReply(deps.db, conversationId, settings, deps.clock.now());
  }
  // Counted once beginReply's transaction has committed: only then does the item exist.
  if (handoffOpened) countHandoff(deps);
  if (begun.kind === "no_conversation") {
    log.warn({ event: "reply.no_conversation" }, "reply job for an unknown conversation");
    return "no_conversation";
  }
  if (begun.kind === "nothing_to_answer") return "nothing_to_answer";
  // The debounce slides here, not in the queue: a queue-side reschedule would also move retries.
  if (begun.kind === "debounce") throw new Postpone(begun.untilMs, "the customer is still writing");

  const replyLog = log.child({ reply: begun.reply.id });
  let outcome: string;
  try {
    await completeReply(deps, config, begun, armedAt, job.data, keep, replyLog);
    outcome = "sent";
  } catch (error) {
    outcome = await settleFailedRun(deps, config, job, begun, error, replyLog);
  }

  // What the take saw waiting behind this reply. A message stored since schedules its own job,
  // which BullMQ keeps until this one ends (scheduleReply).
  if (begun.more) await scheduleReply(deps.queues, conversationId, 0);
  return outcome;
}

/**
 * A run that failed: the one decision (policy.ts) says whether it waits, stops, holds off the
 * whole queue (Meta's sender-wide limits), retries, or dead-letters the reply. Throws for all
 * but the last, which answers the run's outcome.
 */
async function settleFailedRun(
  deps: ReplyDeps,
  config: ReplySettings,
  job: Job<ReplyJobData>,
  begun: Extract<Begun, { kind: "reply" }>,
  error: unknown,
  replyLog: Logger,
) {
  const { lease, reply } = begun;
  const fate = decideFate(error, job, config.retry, deps.clock.now().getTime());
  switch (fate.action) {
    case "wait":
    case "stop":
      throw error; // the worker postpones or drops this run (workers.ts)
    case "throttle": {
      // BullMQ's queue-wide rate limit: every worker holds off every reply, and this job goes
      // back to waiting without spending an attempt.
      const delayMs = retryDelayMs(job.attemptsMade + 1, fate.failure, config.retry);
      replyLog.warn({ event: "reply.throttled", code: fate.failure.code, reason: fate.failure.reason, delayMs }, "Meta limits the sender; every reply waits");
      await deps.queues.reply.rateLimit(delayMs);
      throw new RateLimitError();
    }
    case "retry":
      replyLog.warn(
        { event: "reply.retry", code: fate.failure.code, reason: fate.failure.reason, ambiguous: fate.failure.ambiguous, attempt: job.attemptsMade + 1 },
        "reply failed; will retry",
      );
      throw fate.failure;
    case "dead_letter": {
      const letter = await deps.deadLetters.reply(
        {
          conversationId: lease.conversationId,
          replyId: reply.id,
          failure: fate.failure,
          attempts: job.attemptsMade + 1,
          dedupKey: `reply.${reply.id}.${randomUUID()}`,
        },
        { lease },
      );
      if (letter === "csat_dropped") {
        replyLog.warn({ event: "csat.not_delivered", code: fate.failure.code, reason: fate.failure.reason }, "CSAT message not delivered; dropped");
        return "dead_lettered";
      }
      replyLog.error(
        {
          event: "reply.dead_lettered",
          deadLetter: letter?.id,
          source: fate.failure.source,
          code: fate.failure.code,
          reason: fate.failure.reason,
          maybeSent: fate.failure.ambiguous,
        },
        "reply dead-lettered",
      );
      return "dead_lettered";
    }
  }
}

async function completeReply(
  deps: ReplyDeps,
  config: ReplySettings,
  begun: Extract<Begun, { kind: "reply" }>,
  armedAt: number,
  data: ReplyJobData,
  keep: KeepInJob,
  log: Logger,
): Promise<void> {
  const { lease, conversation, reply, planned } = begun;
  // Sends Meta took while the database was away, recorded first: they must not go out again.
  for (const [partId, wamid] of Object.entries(data.accepted ?? {})) await markAccepted(deps.db, partId, wamid, deps.clock.now());
  // Read and "typing…" for what this reply answers, beside the reply path: while Claude writes,
  // never in front of it. Best effort: a failed receipt must never block the reply.
  if (planned) showTyping(deps, conversation, planned.messages.at(-1)!.wamid, log);
  const kept = data.draft;
  let outbox: Outbox | undefined;
  // A CSAT ask or its thanks past the window is not sent at all: a template in its place would ask nothing.
  if (isCsat(reply.kind) && !windowOpen(conversation.lastInboundAt, deps.clock.now())) {
    if (await dropUnsentCsat(deps.db, lease, reply.id, deps.clock.now()))
      log.info({ event: "csat.window_closed", kind: reply.kind }, "the 24-hour window closed before the CSAT message went out; not sent");
    return;
  }
  // Checked before Claude is paid for a reply that could not be sent anyway, and again after.
  if (!windowOpen(conversation.lastInboundAt, deps.clock.now()))
    await templateInstead(deps.db, config.numbers, lease, conversation, reply, log, deps.clock.now());
  else if (reply.state === "generating") {
    const written: Written =
      kept?.replyId === reply.id
        ? { kind: "draft", draft: kept, lastCall: kept.lastCall }
        : await writeAnswer(deps, config, begun, armedAt, log, {
            kept: data.step,
            keep: async (step) => {
              await keep({ step });
              log.warn({ event: "reply.step_kept_in_job", step: step.step }, "database unavailable; Claude's step is kept in the job until it can be stored");
            },
          });
    // A draft kept through an outage: its call's row in the ledger is settled now (again is harmless).
    if (written.kind === "draft" && written.draft === kept && written.lastCall) await settleAnswer(deps, config, written.lastCall);
    let stored: Awaited<ReturnType<typeof storeDraft>>;
    try {
      stored =
        written.kind === "handoff"
          ? await handOff(
              deps.db,
              lease,
              reply.id,
              { key: written.toolUseId, reason: written.reason, reply: handoffReply(config.conversation, written.cost) },
              deps.clock.now(),
            )
          : await storeDraft(deps.db, lease, reply.id, written.draft, deps.clock.now());
    } catch (error) {
      // Paid for: if Postgres cannot take it now, Redis keeps it until it can (law 4).
      if (isInfrastructureFailure(error) && written.kind === "draft" && written.draft !== kept) {
        await keep({ draft: { replyId: reply.id, ...written.draft, lastCall: written.lastCall } });
        log.warn({ event: "reply.draft_kept_in_job" }, "database unavailable; Claude's answer is kept in the job until it can be stored");
      }
      throw error;
    }
    // Each part is a billed WhatsApp message (issue 20): counted as the reply's parts are stored.
    if (stored.outbox) deps.metrics.replyParts.observe({ phone_number_id: conversation.phoneNumberId }, stored.outbox.parts.length);
    if (kept?.replyId === reply.id) log.info({ event: "reply.draft_recovered" }, "stored the answer the job kept while the database was away");
    if (written.kind === "handoff" && stored.outbox) {
      countHandoff(deps);
      // Claude's reason is the customer's business (law 10): it is in the item, for staff, never in a log line.
      log.info({ event: "reply.handed_off", toolUse: written.toolUseId }, "Claude handed the customer to a person; the bot pauses for them");
    }
    // Overtaken while Claude wrote: the answer is stored for the run that holds the conversation now, which sends it.
    if (!stored.held) throw new FencedOut(`conversation ${lease.conversationId} was taken over while Claude wrote; its answer is stored for the new holder`);
    if (!windowOpen(stored.lastInboundAt, deps.clock.now())) {
      await templateInstead(deps.db, config.numbers, lease, { ...conversation, lastInboundAt: stored.lastInboundAt }, reply, log, deps.clock.now());
    } else outbox = stored.outbox;
  }
  const sent = await sendParts(deps, config, lease, conversation, outbox ?? (await unsentParts(deps.db, reply.id)), keep, log);
  if (sent || (await markReplySent(deps.db, reply.id, deps.clock.now()))) {
    log.info({ event: "reply.sent" }, "reply sent");
    // The bot has answered: the customer is asked how it went once they have been quiet a while.
    if (reply.kind === "ai") await deps.csat.plan(conversation.id, log);
  }
}

/** A CSAT ask (its buttons) or its thanks (src/jobs/csat.ts). */
const isCsat = (kind: string) => kind === "csat" || kind === "csat_thanks";

function showTyping(deps: ReplyDeps, conversation: ConversationView, wamid: string, log: Logger): void {
  deps.graph.markReadWithTyping(conversation.phoneNumberId, wamid).catch((error: unknown) => {
    log.warn({ event: "reply.mark_read_failed", err: error }, "could not mark read / show typing");
  });
}

/** What a customer handed to a person hears (HANDOFF_REPLY; empty: nothing), with what Claude's calls deciding it cost. */
const handoffReply = (conversation: Config["conversation"], cost: ReplyCost): GeneratedReply => ({ text: conversation.handoffReply, ...cost });

/**
 * Sends the reply's unsent parts in order. A part is sent only by the run that marked it
 * `sending` under a valid lease, and only promptly after; a part left `sending` by a send
 * whose outcome we never learned waits for its status webhook (until `resend_after`) before
 * it is sent again (law 5). Only Graph's error body makes it safe to send again at once.
 */
async function sendParts(
  deps: ReplyDeps,
  config: Pick<ReplySettings, "send" | "numbers">,
  lease: Lease,
  conversation: ConversationView,
  outbox: Outbox,
  keep: KeepInJob,
  log: Logger,
): Promise<boolean> {
  const { parts, firstSeq, quote } = outbox;
  if (parts.length === 0) return false;
  const to = recipientOf(conversation);
  let replySent = false;
  const { leaseMs, timeoutMs, reconcileWaitMs } = config.send;

  for (const part of parts) {
    const template = templateOf(config.numbers, conversation, part);
    if (part.sendState === "sending" && part.resendAfter && part.resendAfter.getTime() > deps.clock.now().getTime()) {
      throw new Postpone(part.resendAfter.getTime(), "a maybe-sent part waits for its status webhook");
    }
    // Taken before the statement, as its resend_after is: the lease never runs past what it promises.
    const markedAt = deps.clock.monotonicMs();
    const attempt = await markForSend(deps, lease, part.id, leaseMs + timeoutMs + reconcileWaitMs);
    if (attempt === undefined) continue; // its status webhook came meanwhile, or a person chose to send it anew
    // A run frozen right here (a GC pause, a stopped VM), or whose connection to Meta comes up
    // late, must not send late: by now another worker may have counted this part as maybe-sent
    // and be waiting out `resend_after`. Checked again as the request is written (startBy).
    const startBy = markedAt + leaseMs;
    if (deps.clock.monotonicMs() > startBy) await sentTooLate(deps, part.id, attempt, leaseMs);
    // Law 5's unavoidable window: we started this send before and never learned its outcome.
    if (part.sendState === "sending")
      log.warn({ event: "reply.resend_unconfirmed", part: part.id }, "no status came for an earlier send of this part; sending it again");
    let wamid: string;
    try {
      ({ wamid } = await sendPart(deps.graph, conversation, part, { to, template, startBy, replyTo: part.seq === firstSeq ? quote : undefined }));
    } catch (error) {
      if (error instanceof SendTooLate) await sentTooLate(deps, part.id, attempt, leaseMs);
      // Meta answered with its error body, so it did not take the message: safe to send again.
      if ((error instanceof RetryableError || error instanceof PermanentError) && !error.ambiguous) await markRefused(deps.db, part.id, attempt);
      else log.warn({ event: "reply.maybe_sent", part: part.id }, "Meta may have taken this send; it waits for its status before any resend");
      throw error;
    }
    try {
      const accepted = await markAccepted(deps.db, part.id, wamid, deps.clock.now());
      replySent = accepted.replySent;
      if (replySent && accepted.answersSinceMs !== null)
        deps.metrics.webhookToReply.observe(Math.max(0, deps.clock.now().getTime() - accepted.answersSinceMs) / 1000);
    } catch (error) {
      // Meta took it; if Postgres cannot hear it now, Redis keeps the wamid, or a resend after
      // `resend_after` would send the part twice.
      if (isInfrastructureFailure(error)) await keep({ accepted: { [part.id]: wamid } });
      throw error;
    }
  }
  return replySent;
}

/** One part through the Graph API, as what it is: a CSAT ask's buttons, a template, or text (the first part quoting the customer). */
function sendPart(
  graph: ReplyDeps["graph"],
  conversation: ConversationView,
  part: Outbox["parts"][number],
  send: { to: Recipient; template: ReturnType<typeof templateOf>; startBy: number; replyTo: Outbox["quote"] },
): Promise<{ wamid: string }> {
  const { to, template, startBy } = send;
  const { phoneNumberId } = conversation;
  if (part.interactive) return graph.sendInteractive({ phoneNumberId, to, interactive: part.interactive, bizOpaqueCallbackData: part.id, startBy });
  if (template)
    return graph.sendTemplate({
      phoneNumberId,
      to,
      name: template.name,
      language: template.language,
      parameters: "parameters" in template ? template.parameters : undefined,
      bizOpaqueCallbackData: part.id,
      startBy,
    });
  return graph.sendText({ phoneNumberId, to, text: part.text, bizOpaqueCallbackData: part.id, replyTo: send.replyTo, startBy });
}

/** The template a part goes out as, if any: a person's choice (issue 21), or the number's windowClosedTemplate. */
function templateOf(numbers: Config["numbers"], conversation: ConversationView, part: Outbox["parts"][number]) {
  // A template a person chose carries its own language and parameters; the number's is looked up now.
  const template = !part.template
    ? undefined
    : part.templateLanguage
      ? { name: part.template, language: part.templateLanguage, parameters: part.templateParameters ?? [] }
      : numbers.get(conversation.phoneNumberId)?.windowClosedTemplate;
  if (part.template && template?.name !== part.template) {
    // Never send a template's stand-in text as a free-form message.
    throw new PermanentError({ source: "window", code: "template_missing", reason: `Template "${part.template}" is no longer configured for this number` });
  }
  return template;
}

/**
 * pending (or sending, past its resend_after) → sending, for this run: the send attempt it
 * may make, or undefined when the part needs no send any more. Every other refusal ends the run.
 */
async function markForSend(deps: ReplyDeps, lease: Lease, partId: string, resendAfterMs: number): Promise<number | undefined> {
  const marked = await markSending(deps.db, lease, partId, resendAfterMs, deps.clock.now());
  if (marked.ok) return marked.attempt;
  switch (marked.refused) {
    case "fenced_out":
      throw new FencedOut(`conversation ${lease.conversationId} was taken over before part ${partId} was sent`);
    case "reply_not_ready":
      throw new FencedOut(`reply of part ${partId} left "ready" (dead-lettered or reopened meanwhile): nothing more of it is sent by this run`);
    case "accepted":
    case "unconfirmed":
      return undefined;
    case "gone":
      throw new Error(`part ${partId} vanished while its run held the conversation`);
    case "waiting_for_status":
      throw new Postpone(Math.max(deps.clock.now().getTime() + 200, marked.resendAfter.getTime()), "a maybe-sent part waits for its status webhook");
  }
}

/**
 * The send did not start within its lease, so nothing of it left: the part goes back to
 * pending (whoever runs next may send it) and this attempt counts as a retryable failure.
 */
async function sentTooLate(deps: ReplyDeps, partId: string, attempt: number, leaseMs: number): Promise<never> {
  await markRefused(deps.db, partId, attempt);
  throw new RetryableError({
    source: "graph",
    code: "send_late",
    reason: `The send could not start within ${leaseMs} ms of being marked (the connection to Meta came up late, or the worker froze): nothing was sent`,
  });
}

/** The phone number when known (Meta's advice), else the BSUID (WHATSAPP.md §9). */
function recipientOf(conversation: ConversationView): Recipient {
  if (conversation.waId) return { phone: conversation.waId };
  if (conversation.userId) return { bsuid: conversation.userId };
  throw new PermanentError({ source: "internal", code: "no_address", reason: "The customer has neither a phone number nor a BSUID on record" });
}
