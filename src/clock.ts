import { performance } from "node:perf_hooks";

/**
 * The one clock: made by the entry point (src/main.ts) and handed down to everything that
 * needs the time, so a test can hand in a fixed or moved one (STYLE.md, 2). Nothing else reads
 * the wall clock (test/clock.test.ts reads the sources to hold that).
 */
export interface Clock {
  /** The wall clock: what a row records, what a deadline or a TTL is compared with. */
  now(): Date;
  /** A monotonic reading in milliseconds, for durations: it never jumps when the wall clock is set. */
  monotonicMs(): number;
}

export const systemClock: Clock = {
  now: () => new Date(),
  monotonicMs: () => performance.now(),
};
