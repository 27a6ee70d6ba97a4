import { createHash } from "node:crypto";

/**
 * The Idempotency-Key of one tool call (law 12): derived from the business number and Claude's
 * `tool_use.id`, both stored with the call, so every retry, every worker and every run after a
 * crash sends the same key, and the business acts once. Hashed: the business gets an opaque
 * key of fixed length (64 hex digits, within every common limit), not our identifiers; JSON
 * keeps the two parts apart whatever they hold.
 */
export function idempotencyKeyFor(phoneNumberId: string, toolUseId: string): string {
  return createHash("sha256")
    .update(JSON.stringify(["wa-tool-call", phoneNumberId, toolUseId]))
    .digest("hex");
}
