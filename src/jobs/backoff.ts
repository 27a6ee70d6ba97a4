import { RetryableError } from "../errors.ts";

/**
 * How long a job waits before its next attempt, in one place: BullMQ's backoff of every queue
 * (`backoff: { type: "policy" }`), a throttled reply, an infrastructure wait (policy.ts).
 */

export interface RetryDelaySettings {
  baseDelayMs: number;
  maxDelayMs: number;
}

/**
 * Exponential backoff with jitter: attempt n waits between half and all of base·2^(n-1),
 * capped, and never less than the failure asks for (Retry-After, Meta's 6 s pair limit).
 * The jitter spreads retries so an outage does not end in a thundering herd.
 */
export function retryDelayMs(attemptsMade: number, error: unknown, settings: RetryDelaySettings, random: () => number = Math.random): number {
  const exponential = Math.min(settings.maxDelayMs, settings.baseDelayMs * 2 ** Math.max(0, attemptsMade - 1));
  const jittered = Math.round(exponential / 2 + random() * (exponential / 2));
  const floor = error instanceof RetryableError ? (error.minDelayMs ?? 0) : 0;
  return Math.max(jittered, floor);
}
