/**
 * Errors say what to do next. Every failure that reaches a job is one of these two, and
 * `jobs/policy.ts` alone turns them into "retry" or "dead letter" (law 7). Two more are not
 * failures at all: `Postpone` (not yet: wait, costing no attempt) and `FencedOut` (another
 * worker owns the conversation now: stop without a trace).
 */

export type FailureSource = "graph" | "anthropic" | "transcriber" | "status" | "window" | "budget" | "tool" | "internal";

interface FailureInit {
  source: FailureSource;
  code?: string | undefined;
  reason: string;
  detail?: Record<string, unknown> | undefined;
  cause?: unknown;
  /**
   * True when the request may have reached the other side and been acted on (a timeout, a
   * dropped connection, an answer without Graph's error body): for a send, Meta may have
   * taken the message (law 5). Only Graph's own error body proves it did not.
   */
  ambiguous?: boolean | undefined;
}

abstract class ReplyFailure extends Error {
  readonly source: FailureSource;
  readonly code: string | undefined;
  readonly reason: string;
  readonly detail: Record<string, unknown> | undefined;
  readonly ambiguous: boolean;

  constructor(init: FailureInit) {
    super(init.code ? `${init.source} ${init.code}: ${init.reason}` : `${init.source}: ${init.reason}`, {
      cause: init.cause,
    });
    this.source = init.source;
    this.code = init.code;
    this.reason = init.reason;
    this.detail = init.detail;
    this.ambiguous = init.ambiguous ?? false;
  }
}

/** Worth trying again later: 429s, 5xx, timeouts, Meta's throttling codes. */
export class RetryableError extends ReplyFailure {
  override readonly name = "RetryableError";
  /** A lower bound for the next attempt (Retry-After, Meta's 6 s pair limit). */
  readonly minDelayMs: number | undefined;
  /** The limit is on the whole sender (Meta's 130429, 80007, 4): every send should wait, not only this one. */
  readonly throttle: boolean;

  constructor(init: FailureInit & { minDelayMs?: number | undefined; throttle?: boolean }) {
    super(init);
    this.minDelayMs = init.minDelayMs;
    this.throttle = init.throttle ?? false;
  }
}

/** Trying again cannot help: goes to the dead-letter queue at once, with its code and reason. */
export class PermanentError extends ReplyFailure {
  override readonly name = "PermanentError";
}

export type Failure = RetryableError | PermanentError;

/** Not yet, and nobody's fault (a debounce, a maybe-sent part awaiting its status): try again at `untilMs`, costing no attempt. */
export class Postpone extends Error {
  override readonly name = "Postpone";
  constructor(
    readonly untilMs: number,
    readonly reason: string,
  ) {
    super(reason);
  }
}

/** Another worker has taken the conversation over (this one stalled past its lock): this run must stop, writing and sending nothing (law 8). */
export class FencedOut extends Error {
  override readonly name = "FencedOut";
}

/** Anything unexpected (a bug, a database outage) is retried: it may pass, and nothing is lost. */
export function asFailure(error: unknown): Failure {
  if (error instanceof RetryableError || error instanceof PermanentError) return error;
  return new RetryableError({ source: "internal", reason: describeError(error), cause: error });
}

/**
 * An error's message as it may be stored and shown (a dead letter's reason, BullMQ's
 * failedReason, a log line): Prisma's messages quote the whole call, arguments and all, and a
 * message's text or a customer's phone number is among them (law 10). Only their last line,
 * which says what was wrong, is kept.
 */
export function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  if (!error.name.startsWith("PrismaClient")) return error.message;
  const said = error.message
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean)
    .at(-1);
  return `${error.name}: ${said ?? "(no message)"}`;
}

/** An error as BullMQ may keep it (failedReason, stacktrace): described as above, the original kept only as its cause. */
export function forTheQueue(error: unknown): unknown {
  if (!(error instanceof Error) || !error.name.startsWith("PrismaClient")) return error;
  return new Error(describeError(error), { cause: error });
}
