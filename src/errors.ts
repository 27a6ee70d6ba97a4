/**
 * Errors say what to do next. Every failure that reaches a job is one of these two, and
 * `jobs/fate.ts` alone turns them into "retry" or "dead letter" (law 7).
 */

export type FailureSource = "graph" | "anthropic" | "status" | "window" | "internal";

interface FailureInit {
  source: FailureSource;
  code?: string | undefined;
  reason: string;
  detail?: Record<string, unknown> | undefined;
  cause?: unknown;
}

abstract class ReplyFailure extends Error {
  readonly source: FailureSource;
  readonly code: string | undefined;
  readonly reason: string;
  readonly detail: Record<string, unknown> | undefined;

  constructor(init: FailureInit) {
    super(init.code ? `${init.source} ${init.code}: ${init.reason}` : `${init.source}: ${init.reason}`, {
      cause: init.cause,
    });
    this.source = init.source;
    this.code = init.code;
    this.reason = init.reason;
    this.detail = init.detail;
  }
}

/** Worth trying again later: 429s, 5xx, timeouts, Meta's throttling codes. */
export class RetryableError extends ReplyFailure {
  override readonly name = "RetryableError";
  /** A lower bound for the next attempt (Retry-After, Meta's 6 s pair limit). */
  readonly minDelayMs: number | undefined;
  /**
   * True when the request may have reached the other side (timeout, dropped connection):
   * for a send, Meta may have accepted the message (law 5).
   */
  readonly ambiguous: boolean;
  /** The limit is on the whole sender (Meta's 130429, 80007, 4): every send should wait, not only this one. */
  readonly throttle: boolean;

  constructor(init: FailureInit & { minDelayMs?: number | undefined; ambiguous?: boolean; throttle?: boolean }) {
    super(init);
    this.minDelayMs = init.minDelayMs;
    this.ambiguous = init.ambiguous ?? false;
    this.throttle = init.throttle ?? false;
  }
}

/** Trying again cannot help: goes to the dead-letter queue at once, with its code and reason. */
export class PermanentError extends ReplyFailure {
  override readonly name = "PermanentError";
}

export type Failure = RetryableError | PermanentError;

/** Anything unexpected (a bug, a database outage) is retried: it may pass, and nothing is lost. */
export function asFailure(error: unknown): Failure {
  if (error instanceof RetryableError || error instanceof PermanentError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new RetryableError({ source: "internal", reason: message, cause: error });
}
