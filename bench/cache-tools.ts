import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DemoShop, writeDemoNumbers } from "../sim/business/shop.ts";
import { answersToolResults } from "../test/support/fake-anthropic.ts";
import { startHarness } from "../test/support/harness.ts";
import { PHONE_NUMBER_ID, textWebhook } from "../test/support/webhook-bodies.ts";
import { type CallUsage, cachedAndUncachedUsd, cachedShare, promptTokens } from "./cache-usage.ts";
import { fmt, sleep, table } from "./stats.ts";

/**
 * What prompt caching saves once a number has knowledge and tools (issue 19), on the default
 * model: the demo shop's number (sim/business/shop.ts: its knowledge files, its order
 * lookup at a local DemoShop), 11 customer messages of which 5 ask about an order. The fake
 * Claude answers those with a `lookup_order` tool_use, then, with the tool_result in the last
 * user turn, in words; the rest in words at once. The demo's knowledge (1 KB) fits the token
 * budget: it goes whole, as cited documents, ending the stable prefix (src/ai/request.ts).
 * Beside it, in the same run, the same 11 messages to a number with neither (the default
 * prompt; handoff_to_human, given to every number, still among its tools). Usage is read as stored: each
 * claude_steps row is one call (a tool step), and a reply row holds all its calls' sum, so
 * the last call of a reply is the reply's usage less its steps'.
 */

const MESSAGES: { text: string; order?: string }[] = [
  { text: "Hi! Are you open on Saturday afternoon?" },
  { text: "Where is my order A1001? It should have shipped by now.", order: "A1001" },
  { text: "How long does delivery take to Spain?" },
  { text: "Could you check order A1002 for me, please?", order: "A1002" },
  { text: "Is delivery free if I spend 90 euros?" },
  { text: "And my other order, A1003: has it arrived?", order: "A1003" },
  { text: "How do I return shoes that do not fit?" },
  { text: "What is the status of A1001 now?", order: "A1001" },
  { text: "Are you open over the Christmas week?" },
  { text: "Please look up order A1002 again: is there a delivery date yet?", order: "A1002" },
  { text: "Thanks! When will the refund reach my card?" },
];

interface Call extends CallUsage {
  /** A call after its reply's first: it answers a tool step's results. */
  afterTool: boolean;
}

interface Measured {
  label: string;
  /** The configured model: the default, ANTHROPIC_MODEL unset. */
  model: string;
  answers: number;
  calls: Call[];
  claudeRequests: number;
  toolCallRows: number;
  shopRequests: number;
}

async function converse(label: string, business: { shop: DemoShop; dir: string } | undefined): Promise<Measured> {
  const h = await startHarness({
    env: {
      REPLY_DEBOUNCE_MS: "0",
      ...(business ? { PHONE_NUMBERS_FILE: await writeDemoNumbers(business.dir, PHONE_NUMBER_ID, business.shop.url, 5000) } : {}),
    },
  });
  const before = business?.shop.requests.length ?? 0;
  // Answers of a few sentences, as the existing scenarios have; another once the tool has answered.
  h.claude.reply = (request) =>
    answersToolResults(request)
      ? `Your order is on its way: ${"here is what our order system says and what happens next. ".repeat(4)}`
      : `Answer ${h.claude.requests.indexOf(request) + 1}: ${"thanks for asking, here is what we can do. ".repeat(6)}`;
  try {
    for (const [i, message] of MESSAGES.entries()) {
      if (business && message.order)
        h.claude.answer({
          content: [
            { type: "text", text: "Let me look that order up." },
            { type: "tool_use", name: "lookup_order", input: { orderId: message.order } },
          ],
        });
      await h.deliver(textWebhook({ text: message.text }).body);
      while (h.graph.sends.length <= i) await sleep(10);
    }
    while ((await h.db.reply.count({ where: { state: "sent" } })) < MESSAGES.length) await sleep(10);
    const replies = await h.db.reply.findMany({ orderBy: { createdAt: "asc" }, include: { steps: { orderBy: { step: "asc" } } } });
    const calls = replies.flatMap((r): Call[] => {
      const steps = r.steps.map((s) => ({
        input: s.inputTokens,
        read: s.cacheReadTokens,
        written: s.cacheCreationTokens,
        written1h: s.cacheCreation1hTokens,
        output: s.outputTokens,
        afterTool: s.step > 0,
      }));
      const less = (total: number | null, pick: (c: Call) => number) => (total ?? 0) - steps.reduce((n, c) => n + pick(c), 0);
      const last: Call = {
        input: less(r.inputTokens, (c) => c.input),
        read: less(r.cacheReadTokens, (c) => c.read),
        written: less(r.cacheCreationTokens, (c) => c.written),
        written1h: less(r.cacheCreation1hTokens, (c) => c.written1h),
        output: less(r.outputTokens, (c) => c.output),
        afterTool: steps.length > 0,
      };
      return [...steps, last];
    });
    return {
      label,
      model: h.config.anthropic.model,
      answers: replies.length,
      calls,
      claudeRequests: h.claude.requests.length,
      toolCallRows: await h.db.toolCall.count(),
      shopRequests: (business?.shop.requests.length ?? 0) - before,
    };
  } finally {
    await h.close();
  }
}

export async function runToolsCacheBench(): Promise<string> {
  const shop = await new DemoShop().start();
  const dir = await mkdtemp(join(tmpdir(), "bench-cache-tools-"));
  try {
    const results = [await converse("knowledge + tools (demo shop)", { shop, dir }), await converse("baseline: no knowledge, no business tools", undefined)];
    const rows = results.map((m) => {
      const { cached, uncached } = cachedAndUncachedUsd(m.model, m.calls);
      const second = m.calls.filter((c) => c.afterTool);
      const sum = (pick: (c: Call) => number) => m.calls.reduce((n, c) => n + pick(c), 0);
      if (m.claudeRequests !== m.calls.length) throw new Error(`${m.label}: the fake saw ${m.claudeRequests} calls, the database holds ${m.calls.length}`);
      return [
        `${m.model}, ${m.label}`,
        fmt(m.calls.length / m.answers, 2),
        `${fmt(m.toolCallRows)} / ${fmt(m.shopRequests)}`,
        `${fmt(promptTokens(m.calls[0]!))} → ${fmt(promptTokens(m.calls.at(-1)!))}`,
        `${fmt(sum((c) => c.written1h))} / ${fmt(sum((c) => c.written - c.written1h))}`,
        second.length > 0 ? `${fmt(cachedShare(second) * 100)} %` : "-",
        `${fmt(cachedShare(m.calls) * 100)} %`,
        `${fmt((cached * 1e6) / m.answers)} / ${fmt((uncached * 1e6) / m.answers)}`,
      ];
    });
    return [
      table(
        [
          `${MESSAGES.length} customer messages, ${MESSAGES.filter((m) => m.order).length} about an order`,
          "Claude calls an answer",
          "tool calls, rows / at the shop",
          "prompt, 1st → last call",
          "written 1h / 5m",
          "cached, 2nd calls of tool steps",
          "cached, all calls",
          "µ$ an answer, cached / not",
        ],
        rows,
      ),
      "  per Claude call, from stored usage (claude_steps rows; a reply row less its steps for its last call); cached:",
      "  cache_read ÷ (input + cache_read + cache_write) summed over all calls; written: cache-write tokens by TTL, all calls;",
      "  µ$: src/ai/models.ts's prices, 1-hour writes at 2× input; the baseline, like every number, still has handoff_to_human",
    ].join("\n");
  } finally {
    await shop.stop();
    await rm(dir, { recursive: true, force: true });
  }
}
