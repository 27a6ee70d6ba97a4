import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { classifyAnthropicError } from "../src/ai/claude.ts";
import { explain, REASON_KINDS } from "../src/dlq/explain.ts";
import { reasonKind } from "../src/dlq/reasons.ts";
import { KNOWN_GRAPH_CODES, ruleForGraphCode } from "../src/whatsapp/error-codes.ts";

/**
 * Issue 9: why an item waits for a person, in staff's words, with what to do next: one table
 * the API serves with every item (src/dlq/explain.ts).
 */

const meta = (code: number | string, source: "graph" | "status" = "graph") =>
  explain({ source, code: String(code), reason: ruleForGraphCode(Number(code), 400).reason });

describe("explaining a dead letter to staff", () => {
  it("window closed (Meta's 131047, or ours before sending): send an approved template; the window reopens when the customer writes", () => {
    for (const words of [meta(131047), meta(131047, "status"), explain({ source: "window", code: "window_closed", reason: "" })]) {
      expect(words.kind).toBe("window_closed");
      expect(words.next).toMatch(/approved template/);
      expect(words.next).toMatch(/opens again as soon as the customer writes/);
    }
  });

  it("131026: this number cannot receive WhatsApp messages; don't resend", () => {
    expect(meta(131026)).toMatchObject({
      kind: "cannot_receive",
      title: "This number cannot receive WhatsApp messages",
      next: expect.stringMatching(/Don't send it again/),
    });
  });

  it("131049 and 131048: Meta holds messages back; later, not now", () => {
    expect(meta(131049)).toMatchObject({ kind: "meta_limits", next: expect.stringMatching(/wait at least a day/) });
    expect(meta(131048, "status")).toMatchObject({
      kind: "meta_limits",
      text: expect.stringMatching(/blocked or reported/),
      next: expect.stringMatching(/later/),
    });
  });

  it("Meta's limits (130429, 131056, 80007, 4): resend later", () => {
    for (const code of [130429, 131056, 80007, 4])
      expect(meta(code), String(code)).toMatchObject({ kind: "meta_limits", next: expect.stringMatching(/send it again in a few minutes/) });
  });

  it("the access token (190, 0): tell an operator", () => {
    for (const code of [190, 0]) expect(meta(code)).toMatchObject({ kind: "setup", next: expect.stringMatching(/Tell an operator/) });
  });

  it("131062: a username (BSUID) recipient; needs the phone number", () => {
    expect(meta(131062)).toMatchObject({ kind: "needs_phone", title: "Needs the customer's phone number", next: expect.stringMatching(/phone number/) });
  });

  it("a reply that may already have arrived says so, whatever failed", () => {
    for (const code of ["timeout", "network", "http_502", "answer_lost"]) {
      const words = explain({ source: "graph", code, reason: "" }, { maybeSent: true });
      expect(words.kind).toBe("meta_unavailable");
      expect(words.next).toMatch(/may already have arrived/);
    }
  });

  it("Claude's 4xx: what Claude said, in its words", () => {
    const failure = classifyAnthropicError(
      new Anthropic.BadRequestError(
        400,
        { type: "error", error: { type: "invalid_request_error", message: "Output blocked by content filtering policy" } },
        undefined,
        new Headers(),
      ),
    );
    const words = explain({ source: failure.source, code: failure.code ?? null, reason: failure.reason });
    expect(words).toMatchObject({ kind: "claude", title: "Claude refused to write a reply", said: "Output blocked by content filtering policy" });
    expect(words.text).toContain("“Output blocked by content filtering policy”");
    expect(explain({ source: "anthropic", code: "empty", reason: "Claude returned no text (stop reason refusal)" }).title).toBe("Claude declined to answer");
    expect(explain({ source: "anthropic", code: "401", reason: "Claude answered 401 (authentication_error): invalid x-api-key" })).toMatchObject({
      kind: "setup",
      next: expect.stringMatching(/operator/),
    });
    expect(explain({ source: "anthropic", code: "529", reason: "Claude answered 529" })).toMatchObject({ kind: "claude", title: "Claude was unavailable" });
  });

  it("the reconciler's items (stuck, inbound_failed) and a customer's request for a person", () => {
    expect(explain({ source: "internal", code: "stuck", reason: "" })).toMatchObject({ kind: "stuck", title: "The reply got stuck" });
    expect(explain({ source: "internal", code: "inbound_failed", reason: "" })).toMatchObject({ kind: "stuck", title: "A message could not be processed" });
    expect(explain({ source: "internal", code: null, reason: "boom" })).toMatchObject({ kind: "stuck", text: expect.stringContaining("boom") });
    expect(explain({ source: "handoff", code: null, reason: "" })).toMatchObject({ kind: "handoff", title: "The customer asked for a person" });
  });

  it("every code Meta's table names has its own words, and every kind a label", () => {
    for (const code of KNOWN_GRAPH_CODES) expect(meta(code).title, String(code)).not.toBe("Meta refused the message");
    expect(meta(132001).kind).toBe("setup");
    expect(meta(999999)).toMatchObject({ kind: "other", text: expect.stringContaining("999999") });
    for (const source of ["graph", "status", "anthropic", "window", "internal", "handoff"]) {
      for (const code of [null, "131047", "400", "stuck", "window_closed"]) expect(REASON_KINDS[reasonKind(source, code)]).toBeTruthy();
    }
  });
});
