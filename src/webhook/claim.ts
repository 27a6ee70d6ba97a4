import type { Redis } from "ioredis";

/**
 * Law 3: a claim never swallows a message. A wamid is first claimed as short-lived
 * "pending"; only after its job is in the queue does it become "done" for 24 h. If the
 * process dies in between, "pending" expires and Meta's next delivery is processed.
 */

const DONE_TTL_MS = 24 * 60 * 60 * 1000;
const POLL_MS = 20;

export type ClaimOutcome = "enqueued" | "duplicate";

export class ClaimInFlightError extends Error {
  override readonly name = "ClaimInFlightError";
  constructor(readonly key: string) {
    super(`another delivery is still enqueueing ${key}`);
  }
}

export interface ClaimSettings {
  pendingTtlMs: number;
  waitMs: number;
}

/** Deletes the key only while it is still ours and still pending. */
const RELEASE_PENDING = `if redis.call("GET", KEYS[1]) == "pending" then return redis.call("DEL", KEYS[1]) end return 0`;

export async function claimAndEnqueue(
  redis: Redis,
  key: string,
  settings: ClaimSettings,
  enqueue: () => Promise<unknown>,
): Promise<ClaimOutcome> {
  const deadline = Date.now() + settings.waitMs;
  for (;;) {
    const claimed = await redis.set(key, "pending", "PX", settings.pendingTtlMs, "NX");
    if (claimed === "OK") {
      try {
        await enqueue();
      } catch (error) {
        await redis.eval(RELEASE_PENDING, 1, key).catch(() => undefined);
        throw error;
      }
      await redis.set(key, "done", "PX", DONE_TTL_MS);
      return "enqueued";
    }
    const state = await redis.get(key);
    if (state === "done") return "duplicate";
    // A vanished key means the other request failed and released the claim: claim it ourselves.
    if (state === null) continue;
    // "pending" (or anything we did not write): another request is mid-enqueue, and its 200
    // is not ours to give (law 3). Wait briefly for "done", else let Meta deliver again.
    if (Date.now() >= deadline) throw new ClaimInFlightError(key);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
