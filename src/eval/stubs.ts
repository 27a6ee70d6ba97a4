import type { BusinessActions } from "../tools/actions.ts";
import type { ToolOutcome } from "../tools/call.ts";
import type { ToolStub } from "./file.ts";

/**
 * The business's tools as an eval or the playground sees them: Claude is told of the number's
 * real tools (the same definitions as live), and a call is answered by the first stub whose
 * `input` is a subset of Claude's (or that has none), without any request. A call no stub
 * answers is answered "not run" and noted: the case fails, naming the tool and its input. Only
 * `live` sends it to the business, and the playground sends a read (GET) there.
 */

export interface StubbedCall {
  name: string;
  input: unknown;
  /** What Claude read back. */
  answer: string;
  isError: boolean;
  /** `stubbed`: answered by a stub; `executed`: sent to the business; `not_run`: no stub, not sent. */
  how: "stubbed" | "executed" | "not_run";
}

export interface StubbedActions extends BusinessActions {
  /** Every call made through these, in order. */
  readonly calls: StubbedCall[];
}

export interface StubOptions {
  /** Which calls no stub answers still go to the business: none, only reads (GET), or all (`--live-tools`). */
  live: "none" | "reads" | "all";
  /** Each tool's request method, for `live: "reads"`. */
  methodOf?: (phoneNumberId: string, name: string) => string | undefined;
}

export function stubbedActions(real: BusinessActions, stubs: Readonly<Record<string, readonly ToolStub[]>>, options: StubOptions): StubbedActions {
  const calls: StubbedCall[] = [];
  return {
    calls,
    definitions: (phoneNumberId) => real.definitions(phoneNumberId),
    async call(phoneNumberId, name, input, callOptions): Promise<ToolOutcome> {
      const stub = (stubs[name] ?? []).find((s) => s.input === undefined || isSubset(s.input, input));
      if (stub) {
        const answer = typeof stub.answer === "string" ? stub.answer : JSON.stringify(stub.answer);
        calls.push({ name, input, answer, isError: stub.error ?? false, how: "stubbed" });
        return { isError: stub.error ?? false, text: answer, status: 200, ms: 0, unsure: false, maybeActed: false, request: { method: "STUB", url: name } };
      }
      const method = options.methodOf?.(phoneNumberId, name);
      if (options.live === "all" || (options.live === "reads" && (method === "GET" || method === "HEAD"))) {
        const outcome = await real.call(phoneNumberId, name, input, callOptions);
        calls.push({ name, input, answer: outcome.text, isError: outcome.isError, how: "executed" });
        return outcome;
      }
      const text = `Not run: ${name} is not called here (no stub answers this input). Tell the customer you cannot check this right now.`;
      calls.push({ name, input, answer: text, isError: true, how: "not_run" });
      return { isError: true, text, ms: 0, unsure: false, maybeActed: false, request: { method: "", url: "" } };
    },
  };
}

/** Whether every key of `part` is in `whole` with the same value (objects compared the same way, arrays and scalars equal). */
export function isSubset(part: unknown, whole: unknown): boolean {
  if (part === null || typeof part !== "object" || Array.isArray(part)) return JSON.stringify(part) === JSON.stringify(whole);
  if (whole === null || typeof whole !== "object" || Array.isArray(whole)) return false;
  return Object.entries(part).every(([key, value]) => Object.hasOwn(whole, key) && isSubset(value, (whole as Record<string, unknown>)[key]));
}
