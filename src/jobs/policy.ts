import type { Job } from "bullmq";
import { asFailure, type Failure, PermanentError, RetryableError } from "../errors.ts";

/**
 * The one place where a failure's fate is decided (law 7): permanent failures and retryable
 * ones on their last attempt go to the dead-letter queue; other retryable ones go back to
 * BullMQ, which waits `retryDelayMs` before the next attempt.
 */

export type Fate =
  | { action: "retry"; failure: RetryableError }
  | { action: "throttle"; failure: RetryableError }
  | { action: "dead_letter"; failure: Failure };

function isLastAttempt(job: Pick<Job, "attemptsMade" | "opts">): boolean {
  return job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
}

export function decideFate(error: unknown, job: Pick<Job, "attemptsMade" | "opts">): Fate {
  const failure = asFailure(error);
  if (failure instanceof PermanentError) return { action: "dead_letter", failure };
  // A sender-wide limit is nobody's fault and costs no attempt: the whole queue waits instead.
  if (failure.throttle) return { action: "throttle", failure };
  if (isLastAttempt(job)) return { action: "dead_letter", failure };
  return { action: "retry", failure };
}

export interface RetryDelaySettings {
  baseDelayMs: number;
  maxDelayMs: number;
}

/**
 * Exponential backoff with jitter: attempt n waits between half and all of base·2^(n-1),
 * capped, and never less than the failure asks for (Retry-After, Meta's 6 s pair limit).
 * The jitter spreads retries so an outage does not end in a thundering herd.
 */
export function retryDelayMs(
  attemptsMade: number,
  error: unknown,
  settings: RetryDelaySettings,
  random: () => number = Math.random,
): number {
  const exponential = Math.min(settings.maxDelayMs, settings.baseDelayMs * 2 ** Math.max(0, attemptsMade - 1));
  const jittered = Math.round(exponential / 2 + random() * (exponential / 2));
  const floor = error instanceof RetryableError ? (error.minDelayMs ?? 0) : 0;
  return Math.max(jittered, floor);
}
