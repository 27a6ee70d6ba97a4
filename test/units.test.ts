import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { classifyAnthropicError } from "../src/ai/claude.ts";
import { toAlternatingMessages } from "../src/ai/request.ts";
import { FencedOut, PermanentError, Postpone, RetryableError } from "../src/errors.ts";
import { retryDelayMs } from "../src/jobs/backoff.ts";
import { decideFate } from "../src/jobs/policy.ts";
import { type PendingMessage, planNextAnswer } from "../src/messages/plan.ts";
import { readJob } from "../src/queue/catalog.ts";
import { ruleForGraphCode } from "../src/whatsapp/error-codes.ts";
import { splitForWhatsApp } from "../src/whatsapp/split.ts";

/** A fixed now for decisions that compare times. */
const NOW = Date.parse("2026-12-04T12:00:00Z");

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
    expect(decideFate(failure, { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings, NOW).action).toBe("retry");
    expect(decideFate(failure, { attemptsMade: 2, attemptsStarted: 3, opts: { attempts: 3 } }, settings, NOW).action).toBe("dead_letter");
    expect(
      decideFate(new PermanentError({ source: "graph", reason: "x" }), { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings, NOW).action,
    ).toBe("dead_letter");
    expect(decideFate(new Error("db down"), { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings, NOW).action).toBe("retry");
    const throughput = new RetryableError({ source: "graph", code: "130429", reason: "x", throttle: true });
    expect(decideFate(throughput, { attemptsMade: 2, attemptsStarted: 3, opts: { attempts: 3 } }, settings, NOW).action).toBe("throttle"); // costs no attempt
  });

  it("our own infrastructure away, a postponement or a fenced-out run never spends an attempt, even on the last one", () => {
    const settings = { baseDelayMs: 1000, maxDelayMs: 60_000 };
    const last = { attemptsMade: 2, attemptsStarted: 9, opts: { attempts: 3 } };
    const unreachable = Object.assign(new Error("Can't reach database server at 127.0.0.1:5432"), { code: "P1001" });
    expect(decideFate(unreachable, last, settings, NOW)).toMatchObject({ action: "wait" });
    expect(decideFate(Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:6379"), { code: "ECONNREFUSED" }), last, settings, NOW).action).toBe("wait");
    expect(decideFate(new Error("Connection is closed."), last, settings, NOW).action).toBe("wait");
    expect(decideFate(new Postpone(NOW + 5000, "debounce"), last, settings, NOW)).toMatchObject({ action: "wait", delayMs: expect.any(Number) });
    expect(decideFate(new FencedOut("taken over"), last, settings, NOW).action).toBe("stop");
    // The waits so far set the backoff: seven starts without an attempt wait longer than one.
    const first = decideFate(unreachable, { attemptsMade: 0, attemptsStarted: 1, opts: { attempts: 3 } }, settings, NOW);
    const later = decideFate(unreachable, { attemptsMade: 0, attemptsStarted: 8, opts: { attempts: 3 } }, settings, NOW);
    expect(first.action === "wait" && later.action === "wait" && later.delayMs > first.delayMs).toBe(true);
    // ...but a long outage never pushes the next look past 10 s: recovery is noticed at once.
    const long = decideFate(unreachable, { attemptsMade: 0, attemptsStarted: 40, opts: { attempts: 3 } }, settings, NOW);
    expect(long.action === "wait" && long.delayMs <= 10_000).toBe(true);
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
      {
        role: "user",
        content: [
          { type: "text", text: '[Earlier in this chat, the business wrote: "Welcome!"]' },
          { type: "text", text: "hi" },
          { type: "text", text: "anyone?" },
        ],
      },
      { role: "assistant", content: [{ type: "text", text: "Yes" }] },
      { role: "user", content: [{ type: "text", text: "price?" }] },
    ]);
  });
});

describe("planning the next answer, in the order the customer wrote", () => {
  const settings = { optOutReply: "Bye", optInReply: "Welcome back", handoffReply: "A person will answer" };
  const open = { optedOut: false, paused: false };
  let n = 0;
  const m = (over: Partial<PendingMessage>): PendingMessage => ({ id: `m${++n}`, wamid: `w${n}`, text: null, cannedText: null, control: null, ...over });

  it("a burst of questions is one answer; a configured answer after them waits for the next", () => {
    const [a, b, voice, c] = [m({ text: "a" }), m({ text: "b" }), m({ cannedText: "no voice" }), m({ text: "c" })];
    expect(planNextAnswer([a!, b!, voice!, c!], open, settings).answer).toEqual({ kind: "ai", messageIds: [a!.id, b!.id] });
    expect(planNextAnswer([voice!, m({ cannedText: "no voice" }), c!], open, settings).answer).toMatchObject({ kind: "canned", text: "no voice" });
  });

  it("STOP then hi: the confirmation, hi skipped as opted out; hi then STOP: hi is answered first", () => {
    const stop = m({ text: "STOP", control: "opt_out" });
    const hi = m({ text: "hi" });
    const first = planNextAnswer([stop, hi], open, settings);
    expect(first).toMatchObject({ answer: { kind: "canned", messageIds: [stop.id], text: "Bye" }, effects: { optedOut: true } });
    expect(planNextAnswer([hi], { optedOut: true, paused: false }, settings).skips).toEqual([{ id: hi.id, reason: "customer opted out" }]);
    expect(planNextAnswer([hi, stop], open, settings)).toMatchObject({ answer: { kind: "ai", messageIds: [hi.id] }, effects: {} });
  });

  it("a second STOP and a repeated request for a person are skipped with their reasons", () => {
    const stop = m({ text: "stop", control: "opt_out" });
    expect(planNextAnswer([stop], { optedOut: true, paused: false }, settings).skips).toEqual([{ id: stop.id, reason: "opted out (repeated)" }]);
    const human = m({ text: "human", control: "handoff" });
    expect(planNextAnswer([human], { optedOut: false, paused: true }, settings).skips).toEqual([
      { id: human.id, reason: "bot paused for a person (repeated request)" },
    ]);
    expect(planNextAnswer([human], open, settings)).toMatchObject({
      answer: { kind: "canned", text: "A person will answer" },
      effects: { handoffWamid: human.wamid },
    });
  });
});

describe("reading a job's data when it is taken (the job catalog)", () => {
  it("takes any id Postgres's uuid takes, not only RFC 9562's versions, and refuses what is not one", () => {
    const md5Shaped = "a3c65c29-7427-0e7f-5b94-4d2c6d1ef73c"; // md5(...)::uuid: version bits 0
    expect(readJob("reply", { conversationId: md5Shaped }, Date.now())).toMatchObject({ ok: true, data: { conversationId: md5Shaped } });
    expect(readJob("reply", { conversationId: "not-a-uuid" }, Date.now())).toMatchObject({ ok: false, reason: expect.stringContaining("conversationId") });
  });

  it("reads a timestamp older than Meta's redeliveries last, or from the future, as the time received, and keeps a possible one", () => {
    const received = Date.UTC(2026, 11, 2, 12, 0, 0);
    const message = (timestamp: string) => ({
      phoneNumberId: "106540352242922",
      sender: { waId: "34600000000" },
      message: { id: "wamid.A", from: "34600000000", timestamp, type: "text", text: { body: "hi" } },
    });
    const read = (timestamp: string) => {
      const result = readJob("inbound", message(timestamp), received);
      if (!result.ok) throw new Error(result.reason);
      return result.data.message.timestamp;
    };
    const seconds = (ms: number) => String(Math.floor(ms / 1000));
    expect(read(seconds(received - 6 * 86_400_000))).toBe(seconds(received - 6 * 86_400_000)); // a redelivery days late
    expect(read(seconds(received - 30 * 86_400_000))).toBe(seconds(received));
    expect(read("99999999999999")).toBe(seconds(received));
    expect(read(seconds(received + 3_600_000))).toBe(seconds(received));
  });
});
