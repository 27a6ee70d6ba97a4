import type { Job } from "bullmq";
import { asFailure, type Failure, FencedOut, PermanentError, Postpone, type RetryableError } from "../errors.ts";
import { isInfrastructureFailure } from "../infrastructure.ts";
import { type RetryDelaySettings, retryDelayMs } from "./backoff.ts";

/**
 * The one place where a failure's fate is decided (law 7): permanent failures and retryable
 * ones on their last attempt go to the dead-letter queue; other retryable ones go back to
 * BullMQ, which waits `retryDelayMs` (backoff.ts) before the next attempt. Our own infrastructure being
 * away (Postgres, Redis) is nobody's fault: the job waits for it and spends no attempt, however
 * long it takes (law 6), and so does a postponement.
 */

/**
 * However long the outage, a waiting job looks again at least this often: a database back
 * from a failover is noticed within seconds, not after the retry backoff's minutes.
 */
const INFRASTRUCTURE_WAIT_MAX_MS = 10_000;

export type Fate =
  | { action: "wait"; delayMs: number; reason: string }
  | { action: "stop"; reason: string }
  | { action: "retry"; failure: RetryableError }
  | { action: "throttle"; failure: RetryableError }
  | { action: "dead_letter"; failure: Failure };

type JobProgress = Pick<Job, "attemptsMade" | "attemptsStarted" | "opts">;

export function isLastAttempt(job: JobProgress): boolean {
  return job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
}

export function decideFate(error: unknown, job: JobProgress, settings: RetryDelaySettings, nowMs: number): Fate {
  if (error instanceof FencedOut) return { action: "stop", reason: error.message };
  if (error instanceof Postpone) return { action: "wait", delayMs: Math.max(0, error.untilMs - nowMs), reason: error.reason };
  if (isInfrastructureFailure(error)) {
    // Starts that spent no attempt are the waits so far: back off on them, capped.
    const waits = Math.max(1, job.attemptsStarted - job.attemptsMade);
    const reason = error instanceof Error ? error.message.trim().split("\n").at(-1)! : String(error);
    const delayMs = retryDelayMs(waits, error, { ...settings, maxDelayMs: Math.min(settings.maxDelayMs, INFRASTRUCTURE_WAIT_MAX_MS) });
    return { action: "wait", delayMs, reason };
  }
  const failure = asFailure(error);
  if (failure instanceof PermanentError) return { action: "dead_letter", failure };
  // A sender-wide limit is nobody's fault and costs no attempt: the whole queue waits instead.
  if (failure.throttle) return { action: "throttle", failure };
  if (isLastAttempt(job)) return { action: "dead_letter", failure };
  return { action: "retry", failure };
}
