import { afterEach, describe, expect, it } from "vitest";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 3, history and cost: what Claude sees, and what it costs. */

let h: Harness;
afterEach(async () => h?.close());

interface Block {
  type: string;
  text: string;
  cache_control?: { type: string; ttl?: string };
}

/**
 * A system prompt long enough to pass any model's minimum cacheable prefix (512 tokens on
 * Haiku 5.5, 4 096 on Haiku 4.5): below it Anthropic caches nothing, and no breakpoint is placed.
 */
const LONG_PROMPT = `You are the assistant of Sapataria Lusa. ${"Our shoes are made by hand in Porto from leather we tan ourselves. ".repeat(240)}`;

/**
 * A conversation of `n` question/answer pairs, one after the other: each question waits until
 * the reply before it is recorded sent, not only until Meta has it. History is ordered by time,
 * so a question stored in between would come before that reply in the next prompt.
 */
async function converse(n: number): Promise<void> {
  for (let i = 1; i <= n; i++) {
    await h.deliver(textWebhook({ text: `question ${i}` }).body);
    await eventually(() => h.graph.sends.length === i, `reply ${i}`);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === i, `reply ${i} recorded sent`);
  }
}

describe("conversation history for Claude", () => {
  it("Claude sees the recent history in order, then the new message; the stable prefix is cached for an hour, the history for five minutes", async () => {
    h = await startHarness({ env: { HISTORY_MESSAGES: "4", REPLY_DEBOUNCE_MS: "0", SYSTEM_PROMPT: LONG_PROMPT } });
    await converse(4);
    const request = h.claude.requests[3]!;
    const turns = request.messages.map((m) => ({ role: m.role, texts: (m.content as Block[]).map((b) => b.text) }));
    expect(turns).toEqual([
      { role: "user", texts: ["question 2"] },
      { role: "assistant", texts: ["Reply #2"] },
      { role: "user", texts: ["question 3"] },
      { role: "assistant", texts: ["Reply #3"] },
      { role: "user", texts: ["question 4"] },
    ]);
    const system = request.system as Block[];
    expect(system[0]!.cache_control).toEqual({ type: "ephemeral", ttl: "1h" });
    const blocks = request.messages.flatMap((m) => m.content as Block[]);
    expect(blocks.map((b) => b.cache_control)).toEqual([undefined, undefined, undefined, { type: "ephemeral" }, undefined]); // the end of the history, for 5 minutes (the default TTL)
  });

  it("places no breakpoint where the prefix is below the model's minimum: Anthropic would cache nothing and bill the write anyway", async () => {
    h = await startHarness({ env: { HISTORY_MESSAGES: "4", REPLY_DEBOUNCE_MS: "0", SYSTEM_PROMPT: "You sell shoes." } });
    await converse(2);
    const request = h.claude.requests[1]!;
    expect(JSON.stringify(request)).not.toContain("cache_control");
    const replies = await h.db.reply.findMany({ orderBy: { createdAt: "asc" } });
    expect(replies.map((r) => [r.cacheReadTokens, r.cacheCreationTokens])).toEqual([
      [0, 0],
      [0, 0],
    ]);
  });

  it("keeps only the newest history that fits HISTORY_TOKEN_BUDGET", async () => {
    h = await startHarness({ env: { HISTORY_MESSAGES: "20", HISTORY_TOKEN_BUDGET: "10", REPLY_DEBOUNCE_MS: "0" } });
    await converse(4);
    const texts = h.claude.requests[3]!.messages.flatMap((m) => (m.content as Block[]).map((b) => b.text));
    // ~3 characters a token: "Reply #2" (3) + "question 3" (4) + "Reply #3" (3) fit in 10;
    // "question 2" would not. History that opens with our reply keeps it as a note.
    expect(texts).toEqual(['[Earlier in this chat, the business wrote: "Reply #2"]', "question 3", "Reply #3", "question 4"]);
  });

  it("stores the model and token usage of every reply, including what the cache saved", async () => {
    h = await startHarness({ env: { REPLY_DEBOUNCE_MS: "0", SYSTEM_PROMPT: LONG_PROMPT } });
    await converse(3);
    const replies = await h.db.reply.findMany({ orderBy: { createdAt: "asc" } });
    for (const reply of replies) {
      expect(reply.model).toBe("claude-haiku-5-5");
      expect(reply.inputTokens).toBeGreaterThan(0);
      expect(reply.outputTokens).toBe(20);
    }
    expect(replies[0]).toMatchObject({ cacheReadTokens: 0 });
    expect(replies[0]!.cacheCreationTokens).toBeGreaterThan(0); // the system prompt is written once...
    expect(replies[2]!.cacheReadTokens).toBeGreaterThan(replies[1]!.cacheReadTokens!); // ...and the growing history read back
  });
});
