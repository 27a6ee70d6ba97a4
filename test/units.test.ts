import { describe, expect, it } from "vitest";
import { classifyAnthropicError, toAlternatingMessages } from "../src/ai/claude.ts";
import { PermanentError, RetryableError } from "../src/errors.ts";
import { decideFate, retryDelayMs } from "../src/jobs/policy.ts";
import { splitForWhatsApp } from "../src/replies/split.ts";
import { ruleForGraphCode } from "../src/whatsapp/error-codes.ts";
import Anthropic from "@anthropic-ai/sdk";

describe("splitting a reply for WhatsApp", () => {
  it("leaves a reply of up to 4096 characters whole", () => {
    expect(splitForWhatsApp("a".repeat(4096))).toEqual(["a".repeat(4096)]);
  });

  it("cuts longer replies into parts of at most 4096 UTF-16 units, preferring word breaks", () => {
    const text = Array.from({ length: 2000 }, (_, i) => `word${i}`).join(" ");
    const parts = splitForWhatsApp(text);
    expect(parts.length).toBeGreaterThan(1);
    for (const part of parts) {
      expect(part.length).toBeLessThanOrEqual(4096);
      expect(part).toMatch(/^word\d+.*word\d+$/s); // no word cut in half
    }
    expect(parts.join(" ")).toBe(text);
  });

  it("never splits a surrogate pair or an emoji sequence", () => {
    const family = "👩‍👩‍👧‍👦"; // one grapheme of 11 UTF-16 units
    const text = family.repeat(1000);
    const parts = splitForWhatsApp(text);
    for (const part of parts) {
      expect(part.length).toBeLessThanOrEqual(4096);
      expect(part.length % family.length).toBe(0);
    }
    expect(parts.join("")).toBe(text);
  });
});

describe("which errors are retried (law 7)", () => {
  it.each([
    [4, true],
    [80007, true],
    [130429, true],
    [131056, true],
    [131000, true],
    [2, true],
    [131047, false],
    [131026, false],
    [190, false],
    [100, false],
    [132001, false],
  ])("Meta code %i → retry %s", (code, retry) => {
    expect(ruleForGraphCode(code, 400).retry).toBe(retry);
  });

  it("an unknown Meta code follows its HTTP status", () => {
    expect(ruleForGraphCode(999999, 503).retry).toBe(true);
    expect(ruleForGraphCode(999999, 400).retry).toBe(false);
  });

  it.each([
    [408, RetryableError],
    [409, RetryableError],
    [429, RetryableError],
    [500, RetryableError],
    [529, RetryableError],
    [400, PermanentError],
    [401, PermanentError],
    [403, PermanentError],
    [404, PermanentError],
    [413, PermanentError],
  ])("Anthropic %i → %o", (status, kind) => {
    const error = Anthropic.APIError.generate(status, { type: "error", error: { type: "x", message: "m" } }, "m", new Headers());
    expect(classifyAnthropicError(error)).toBeInstanceOf(kind);
  });

  it("a timeout reaching Anthropic is retried", () => {
    expect(classifyAnthropicError(new Anthropic.APIConnectionTimeoutError())).toBeInstanceOf(RetryableError);
  });

  it("a retryable failure on the last attempt goes to the dead-letter queue", () => {
    const settings = { baseDelayMs: 1000, maxDelayMs: 60_000 };
    const failure = new RetryableError({ source: "graph", reason: "x" });
    expect(decideFate(failure, { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings).action).toBe("retry");
    expect(decideFate(failure, { attemptsMade: 2, attemptsStarted: 3, opts: { attempts: 3 } }, settings).action).toBe("dead_letter");
    expect(decideFate(new PermanentError({ source: "graph", reason: "x" }), { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings).action).toBe("dead_letter");
    expect(decideFate(new Error("db down"), { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings).action).toBe("retry");
    const throughput = new RetryableError({ source: "graph", code: "130429", reason: "x", throttle: true });
    expect(decideFate(throughput, { attemptsMade: 2, attemptsStarted: 3, opts: { attempts: 3 } }, settings).action).toBe("throttle"); // costs no attempt
  });

  it("backoff grows exponentially with jitter, is capped, and honours a failure's minimum", () => {
    const settings = { baseDelayMs: 1000, maxDelayMs: 60_000 };
    expect(retryDelayMs(1, undefined, settings, () => 0)).toBe(500);
    expect(retryDelayMs(1, undefined, settings, () => 1)).toBe(1000);
    expect(retryDelayMs(4, undefined, settings, () => 1)).toBe(8000);
    expect(retryDelayMs(30, undefined, settings, () => 1)).toBe(60_000);
    const pairLimit = new RetryableError({ source: "graph", code: "131056", reason: "x", minDelayMs: 6000 });
    expect(retryDelayMs(1, pairLimit, settings, () => 0)).toBe(6000);
  });
});

describe("conversation history for Claude", () => {
  it("alternates roles, joins consecutive turns of one role, and starts with the user", () => {
    expect(
      toAlternatingMessages([
        { role: "assistant", text: "Welcome!" },
        { role: "user", text: "hi" },
        { role: "user", text: "anyone?" },
        { role: "assistant", text: "Yes" },
        { role: "user", text: "price?" },
      ]),
    ).toEqual([
      { role: "user", content: [{ type: "text", text: "hi" }, { type: "text", text: "anyone?" }] },
      { role: "assistant", content: [{ type: "text", text: "Yes" }] },
      { role: "user", content: [{ type: "text", text: "price?" }] },
    ]);
  });
});
