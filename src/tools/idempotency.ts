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

/**
 * The key of each tool call Claude asks for: the same tool with the same input (canonical JSON)
 * as an earlier call of the reply's round, or an earlier one of these, is the same action, with
 * that call's key (a model asking again must not act twice); any other is keyed by its own id.
 */
export function withKeys<T extends { id: string; name: string; input: unknown }>(
  phoneNumberId: string,
  uses: readonly T[],
  earlier: readonly { name: string; input: unknown; idempotencyKey: string }[],
): (T & { idempotencyKey: string })[] {
  const keys = new Map<string, string>();
  for (const call of earlier) if (!keys.has(actionOf(call))) keys.set(actionOf(call), call.idempotencyKey);
  return uses.map((use) => {
    const action = actionOf(use);
    const idempotencyKey = keys.get(action) ?? idempotencyKeyFor(phoneNumberId, use.id);
    keys.set(action, idempotencyKey);
    return { ...use, idempotencyKey };
  });
}

const actionOf = (call: { name: string; input: unknown }) => JSON.stringify([call.name, canonical(call.input)]);

/** A JSON value with every object's keys in order: the same input however Claude ordered it. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((key) => [key, canonical((value as Record<string, unknown>)[key])]),
  );
}
