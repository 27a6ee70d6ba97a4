import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { claudeModel } from "../src/ai/models.ts";
import { startHarness } from "../test/support/harness.ts";
import { textWebhook } from "../test/support/webhook-bodies.ts";
import { runToolsCacheBench } from "./cache-tools.ts";
import { type CallUsage, cachedAndUncachedUsd, cachedShare, promptTokens } from "./cache-usage.ts";
import { fmt, sleep, table } from "./stats.ts";

/**
 * What prompt caching saves on a conversation of 11 replies (up to a 20-message history), with
 * each model's real minimum in force: the real reply path shapes the request (system prompt and
 * history marked as the cached prefix), and the fake Anthropic counts and caches the way
 * Anthropic bills (sim/anthropic/prompt-cache.ts: the model's tokenizer, ~3 characters a
 * token on Haiku 5.5 and ~4 on Haiku 4.5; no cache below the model's minimum prefix).
 * The cached share is cache_read ÷ (input + cache_read + cache_write), the dashboard's figure.
 */

interface Scenario {
  model: string;
  prompt: string;
  label: string;
}

const BUSINESS_PROMPT = readFileSync("fixtures/system-prompt.example.txt", "utf8").repeat(6); // 1,752 characters

const SCENARIOS: Scenario[] = [
  { model: "claude-haiku-5-5", prompt: "", label: "default prompt (~60 words)" },
  { model: "claude-haiku-5-5", prompt: BUSINESS_PROMPT, label: "business prompt (1,752 chars)" },
  { model: "claude-haiku-4-5", prompt: BUSINESS_PROMPT, label: "business prompt (1,752 chars)" },
  { model: "claude-haiku-4-5", prompt: BUSINESS_PROMPT.repeat(10), label: "business prompt ×10 (17,520 chars)" },
];

interface Measured {
  scenario: Scenario;
  /** One Claude call each (no tools here). */
  replies: CallUsage[];
}

async function converse(scenario: Scenario, historyMessages: number): Promise<Measured> {
  const h = await startHarness({
    env: {
      ANTHROPIC_MODEL: scenario.model,
      REPLY_DEBOUNCE_MS: "0",
      HISTORY_MESSAGES: String(historyMessages),
      HISTORY_TOKEN_BUDGET: "100000",
      ...(scenario.prompt ? { SYSTEM_PROMPT: scenario.prompt } : {}),
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
    const rows = await h.db.reply.findMany({ orderBy: { createdAt: "asc" } });
    return {
      scenario,
      replies: rows.map((r) => ({
        input: r.inputTokens ?? 0,
        read: r.cacheReadTokens ?? 0,
        written: r.cacheCreationTokens ?? 0,
        written1h: r.cacheCreation1hTokens ?? 0,
        output: r.outputTokens ?? 0,
      })),
    };
  } finally {
    await h.close();
  }
}

export async function runCacheBench(historyMessages = 20): Promise<string> {
  const results: Measured[] = [];
  for (const scenario of SCENARIOS) results.push(await converse(scenario, historyMessages));
  const rows = results.map((m) => {
    const { scenario, replies } = m;
    const first = replies[0]!;
    const last = replies.at(-1)!;
    const { cached, uncached } = cachedAndUncachedUsd(scenario.model, replies);
    const cachesFrom = replies.findIndex((r) => r.written > 0 || r.read > 0);
    return [
      `${scenario.model}, ${scenario.label}`,
      fmt(claudeModel(scenario.model)?.minCacheableTokens),
      `${fmt(promptTokens(first))} → ${fmt(promptTokens(last))}`,
      cachesFrom < 0 ? "never" : `#${cachesFrom + 1}`,
      `${fmt(cachedShare([last]) * 100)} %`,
      `${fmt(cachedShare(replies) * 100)} %`,
      `${fmt((cached * 1e6) / replies.length)} / ${fmt((uncached * 1e6) / replies.length)}`,
    ];
  });
  return [
    table(
      [
        `${results[0]?.replies.length ?? 0} replies, up to ${historyMessages} messages of history`,
        "cache minimum",
        "prompt, 1st → last reply",
        "prefix cached from reply",
        "cached, last reply",
        "cached, all replies",
        "µ$ a reply, cached / not",
      ],
      rows,
    ),
    "  prompt: input + cache_read + cache_write tokens, counted by the fake Anthropic with each model's tokenizer estimate;",
    "  cached: cache_read ÷ that (the dashboard's share); a prefix below the model's minimum caches nothing, and the",
    "  history's breakpoint starts caching once system prompt + history reach it; µ$: src/ai/models.ts's prices,",
    "  1-hour cache writes (the stable prefix's) at 2× input",
    "",
    await runToolsCacheBench(),
  ].join("\n");
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  runCacheBench()
    .then((text) => console.log(text))
    .catch((error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    });
}
