import { readFileSync } from "node:fs";
import { startHarness } from "../test/support/harness.ts";
import { textWebhook } from "../test/support/webhook-bodies.ts";
import { sleep, table } from "./stats.ts";

/**
 * What prompt caching saves on a 20-message history: the real reply path shapes the request
 * (system prompt and history marked as the cached prefix), and the fake Anthropic counts
 * tokens the way Anthropic bills them (~4 characters a token; cached prefix read back).
 */
export async function runCacheBench(historyMessages = 20): Promise<string> {
  const h = await startHarness({
    env: {
      REPLY_DEBOUNCE_MS: "0",
      HISTORY_MESSAGES: String(historyMessages),
      HISTORY_TOKEN_BUDGET: "100000",
      SYSTEM_PROMPT: readFileSync("fixtures/system-prompt.example.txt", "utf8").repeat(6), // a business prompt of ~550 tokens
    },
  });
  // Realistic turn lengths: a customer's sentence, a few sentences back.
  h.claude.reply = (request) => `Answer ${h.claude.requests.indexOf(request) + 1}: ${"thanks for asking, here is what we can do. ".repeat(6)}`;
  try {
    const pairs = historyMessages / 2 + 1;
    for (let i = 1; i <= pairs; i++) {
      await h.deliver(textWebhook({ text: `Question ${i}: ${"could you tell me more about your opening hours and delivery? ".repeat(2)}` }).body);
      while (h.graph.sends.length < i) await sleep(10);
    }
    while ((await h.db.reply.count({ where: { state: "sent" } })) < pairs) await sleep(10);
    const last = await h.db.reply.findFirstOrThrow({ orderBy: { createdAt: "desc" } });
    const read = last.cacheReadTokens ?? 0;
    const written = last.cacheCreationTokens ?? 0;
    const plain = last.inputTokens ?? 0;
    const total = read + written + plain;
    // Anthropic's prices relative to plain input: cache reads 0.1x, cache writes 1.25x.
    const billed = plain + written * 1.25 + read * 0.1;
    return [
      table(
        ["reply with a history of", "input tokens", "of which read from cache", "written to cache", "plain", "billed as input-token equivalents"],
        [
          ["without caching", String(total), "0", "0", String(total), String(total)],
          [`with caching (${historyMessages} messages)`, String(total), String(read), String(written), String(plain), billed.toFixed(0)],
        ],
      ),
      `  saving on that reply: ${((1 - billed / total) * 100).toFixed(0)} % of its input cost (token counts by the fake: ~4 characters a token)`,
    ].join("\n");
  } finally {
    await h.close();
  }
}
