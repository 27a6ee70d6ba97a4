import Anthropic from "@anthropic-ai/sdk";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ClaudeClient } from "../src/ai/claude.ts";
import { estimateCostUsd } from "../src/ai/pricing.ts";
import { FakeAnthropic } from "./support/fake-anthropic.ts";

/**
 * Issue 19, caching that really caches: the fake Messages API caches by Anthropic's rules (a
 * model's minimum prefix, 5-minute and 1-hour TTLs on a clock a test moves, at most four
 * breakpoints, the hour first, a 20-block lookback) and answers scripted blocks, driven by
 * the real Anthropic SDK over HTTP, through our ClaudeClient where its request is the one.
 */

let fake: FakeAnthropic;
let clock: number;
beforeEach(async () => {
  fake = await new FakeAnthropic().start();
  clock = Date.parse("2026-12-02T10:00:00Z");
  fake.now = () => clock;
});
afterEach(async () => fake.stop());

const minutes = (n: number) => (clock += n * 60_000);

const claude = (model: string, systemPrompt: string) =>
  new ClaudeClient({ apiKey: "test-key", baseUrl: fake.url, model, maxTokens: 100, timeoutMs: 5000, systemPrompt });

const sdk = () => new Anthropic({ apiKey: "test-key", baseURL: fake.url, maxRetries: 0 });

const question = [{ role: "user" as const, text: "Are you open on Sunday?" }];

describe("the fake's prompt cache, by the model's minimum", () => {
  it("Haiku 5.5 caches nothing below its 512-token minimum, and caches and reads back a prefix above it", async () => {
    const short = claude("claude-haiku-5-5", "p".repeat(1500)); // 500 tokens at ~3 characters a token
    for (let i = 0; i < 2; i++) {
      const reply = await short.generate(question);
      expect(reply).toMatchObject({ cacheReadTokens: 0, cacheCreationTokens: 0 });
      expect(reply.inputTokens).toBeGreaterThan(500);
    }
    const long = claude("claude-haiku-5-5", "q".repeat(1600)); // 534 tokens
    const first = await long.generate(question);
    // The system prompt ends the stable prefix: written for an hour.
    expect(first).toMatchObject({ cacheReadTokens: 0, cacheCreationTokens: 534, cacheCreation1hTokens: 534 });
    const second = await long.generate(question);
    expect(second).toMatchObject({ cacheReadTokens: 534, cacheCreationTokens: 0 });
    expect(second.inputTokens).toBe(first.inputTokens);
  });

  it("Haiku 4.5's minimum is 4,096 tokens: a prompt Haiku 5.5 caches, it does not", async () => {
    const prompt = "r".repeat(8000); // 2,000 tokens at ~4 characters a token
    await claude("claude-haiku-4-5", prompt).generate(question);
    expect(await claude("claude-haiku-4-5", prompt).generate(question)).toMatchObject({ cacheReadTokens: 0, cacheCreationTokens: 0 });
    await claude("claude-haiku-5-5", prompt).generate(question);
    expect(await claude("claude-haiku-5-5", prompt).generate(question)).toMatchObject({ cacheReadTokens: 2667 });
  });

  it("the history's breakpoint caches once the whole prefix reaches the minimum, the system prompt alone being too short", async () => {
    const client = claude("claude-haiku-5-5", "s".repeat(900)); // 300 tokens: too short alone
    const turns = [
      { role: "user" as const, text: "h".repeat(900) },
      { role: "assistant" as const, text: "a".repeat(300), cacheBreakpoint: true }, // 700 tokens up to here
      ...question,
    ];
    expect(await client.generate(turns)).toMatchObject({ cacheReadTokens: 0, cacheCreationTokens: 700 });
    expect(await client.generate(turns)).toMatchObject({ cacheReadTokens: 700, cacheCreationTokens: 0 });
  });
});

describe("the fake's prompt cache, by TTL", () => {
  const system = (ttl: "5m" | "1h"): Anthropic.TextBlockParam[] => [{ type: "text", text: "s".repeat(1800), cache_control: { type: "ephemeral", ttl } }];
  const messages: Anthropic.MessageParam[] = [
    { role: "user", content: [{ type: "text", text: "m".repeat(1200), cache_control: { type: "ephemeral" } }] },
    { role: "assistant", content: "Hello." },
    { role: "user", content: "Are you open?" },
  ];
  const ask = (ttl: "5m" | "1h") => sdk().messages.create({ model: "claude-haiku-5-5", max_tokens: 100, system: system(ttl), messages });

  it("reports writes split by TTL, and a 1-hour entry outlives a 5-minute one", async () => {
    const first = await ask("1h");
    expect(first.usage).toMatchObject({
      cache_read_input_tokens: 0,
      cache_creation_input_tokens: 1000,
      cache_creation: { ephemeral_1h_input_tokens: 600, ephemeral_5m_input_tokens: 400 },
    });
    minutes(6); // the 5-minute entry is gone; the hour's is read, the rest written again for 5 minutes
    expect((await ask("1h")).usage).toMatchObject({
      cache_read_input_tokens: 600,
      cache_creation_input_tokens: 400,
      cache_creation: { ephemeral_1h_input_tokens: 0, ephemeral_5m_input_tokens: 400 },
    });
    minutes(4); // read back in full, which refreshes both entries
    expect((await ask("1h")).usage).toMatchObject({ cache_read_input_tokens: 1000, cache_creation_input_tokens: 0 });
    minutes(61); // both gone
    expect((await ask("1h")).usage).toMatchObject({ cache_read_input_tokens: 0, cache_creation_input_tokens: 1000 });
  });

  it("5-minute entries live 5 minutes from their last use", async () => {
    await ask("5m");
    minutes(4);
    expect((await ask("5m")).usage.cache_read_input_tokens).toBe(1000);
    minutes(4); // 8 minutes after the write, 4 after the read
    expect((await ask("5m")).usage.cache_read_input_tokens).toBe(1000);
    minutes(5);
    expect((await ask("5m")).usage).toMatchObject({
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 0 },
    });
  });

  it("the usage's TTL split is costed at each TTL's price", async () => {
    const first = await ask("1h");
    const usage = {
      inputTokens: first.usage.input_tokens,
      cacheReadTokens: 0,
      cacheCreationTokens: first.usage.cache_creation_input_tokens ?? 0,
      cacheCreation1hTokens: first.usage.cache_creation?.ephemeral_1h_input_tokens ?? 0,
      outputTokens: first.usage.output_tokens,
    };
    // Haiku 5.5: $0.10 input, $0.20 hour writes, $0.125 5-minute writes, $0.50 output a million.
    const expected = (usage.inputTokens * 0.1 + 600 * 0.2 + 400 * 0.125 + usage.outputTokens * 0.5) / 1e6;
    expect(estimateCostUsd("claude-haiku-5-5", usage)).toBeCloseTo(expected, 12);
  });
});

describe("the fake's prompt cache, by position", () => {
  it("tools come first: a breakpoint on the last tool caches their definitions, read back under a changing conversation", async () => {
    const tools: Anthropic.Tool[] = [
      { name: "order_status", description: "d".repeat(1000), input_schema: { type: "object", properties: { order: { type: "string" } } } },
      { name: "book", description: "e".repeat(1000), input_schema: { type: "object" }, cache_control: { type: "ephemeral" } },
    ];
    const ask = (question: string) =>
      sdk().messages.create({ model: "claude-haiku-5-5", max_tokens: 100, tools, messages: [{ role: "user", content: question }] });
    const written = (await ask("Where is my order?")).usage.cache_creation_input_tokens ?? 0;
    expect(written).toBeGreaterThan(512);
    expect((await ask("Can I book for Friday?")).usage).toMatchObject({ cache_read_input_tokens: written, cache_creation_input_tokens: 0 });
  });

  it("automatic caching (a top-level cache_control) marks the prompt's last block", async () => {
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "z".repeat(1800) }];
    const ask = () => sdk().messages.create({ model: "claude-haiku-5-5", max_tokens: 100, cache_control: { type: "ephemeral" }, messages });
    expect((await ask()).usage.cache_creation_input_tokens).toBe(600);
    expect((await ask()).usage.cache_read_input_tokens).toBe(600);
  });
});

describe("the fake refuses breakpoints as Anthropic does", () => {
  const text = (n: number, ttl?: "5m" | "1h"): Anthropic.TextBlockParam => ({
    type: "text",
    text: `${n}`.repeat(100),
    cache_control: ttl ? { type: "ephemeral", ttl } : { type: "ephemeral" },
  });

  it("a fifth breakpoint is a 400 invalid request", async () => {
    const request = sdk().messages.create({
      model: "claude-haiku-5-5",
      max_tokens: 100,
      system: [text(1), text(2)],
      messages: [{ role: "user", content: [text(3), text(4), text(5)] }],
    });
    await expect(request).rejects.toMatchObject({ status: 400, message: expect.stringContaining("A maximum of 4 blocks with cache_control") });
  });

  it("a 1-hour breakpoint after a 5-minute one is a 400 invalid request", async () => {
    const request = sdk().messages.create({
      model: "claude-haiku-5-5",
      max_tokens: 100,
      system: [text(1, "5m"), text(2, "1h")],
      messages: question.map((q) => ({ role: q.role, content: q.text })),
    });
    await expect(request).rejects.toMatchObject({ status: 400, message: expect.stringContaining("ttl='1h'") });
  });

  it("an entry more than 20 blocks before the breakpoint is not found; within 20 it is", async () => {
    const blocks = (breakpointAt: number): Anthropic.TextBlockParam[] =>
      Array.from({ length: 30 }, (_, i) => ({
        type: "text",
        text: i === 0 ? "x".repeat(2000) : `block ${i}`,
        ...(i === breakpointAt ? { cache_control: { type: "ephemeral" } } : {}),
      }));
    const ask = (breakpointAt: number) =>
      sdk().messages.create({ model: "claude-haiku-5-5", max_tokens: 100, messages: [{ role: "user", content: blocks(breakpointAt) }] });
    const written = await ask(2);
    expect(written.usage.cache_creation_input_tokens).toBeGreaterThan(0);
    expect((await ask(29)).usage.cache_read_input_tokens).toBe(0); // 27 blocks after it
    expect((await ask(22)).usage.cache_read_input_tokens).toBe(written.usage.cache_creation_input_tokens);
  });
});

describe("scripted answers beyond one text", () => {
  it("a tool call reaches the SDK as a ToolUseBlock, with an id made up for it and stop_reason tool_use", async () => {
    fake.answer({
      content: [
        { type: "text", text: "Let me look that up." },
        { type: "tool_use", name: "order_status", input: { order: "A-17" } },
      ],
    });
    const message = await sdk().messages.create({
      model: "claude-haiku-5-5",
      max_tokens: 100,
      messages: [{ role: "user", content: "Where is my order A-17?" }],
    });
    expect(message.stop_reason).toBe("tool_use");
    const call = message.content.find((b): b is Anthropic.ToolUseBlock => b.type === "tool_use");
    expect(call).toMatchObject({ type: "tool_use", name: "order_status", input: { order: "A-17" } });
    expect(call?.id).toMatch(/^toolu_[A-Za-z0-9]+$/);
  });

  it("keeps a given tool call id, cited text and the stop reason it is told", async () => {
    const citation = {
      type: "search_result_location",
      source: "faq",
      title: "Hours",
      cited_text: "Open 9 to 6",
      search_result_index: 0,
      start_block_index: 0,
      end_block_index: 1,
    };
    fake.answer(
      { content: [{ type: "tool_use", id: "toolu_given", name: "lookup", input: {} }] },
      { content: [{ type: "text", text: "We open at 9.", citations: [citation] }], stopReason: "max_tokens" },
    );
    const first = await sdk().messages.create({ model: "claude-haiku-5-5", max_tokens: 100, messages: [{ role: "user", content: "hours?" }] });
    expect(first.content[0]).toMatchObject({ type: "tool_use", id: "toolu_given" });
    const second = await sdk().messages.create({ model: "claude-haiku-5-5", max_tokens: 100, messages: [{ role: "user", content: "hours?" }] });
    expect(second).toMatchObject({ stop_reason: "max_tokens", content: [{ type: "text", text: "We open at 9.", citations: [citation] }] });
  });

  it("the Claude client reads the text after a thinking block, as Haiku 5.5 may begin its answer", async () => {
    fake.answer({ content: [{ type: "thinking" }, { type: "text", text: "Yes, 10 to 4." }] });
    expect((await claude("claude-haiku-5-5", "Be brief.").generate(question)).text).toBe("Yes, 10 to 4.");
  });

  it("text and status answers work as before", async () => {
    fake.answer({ text: "Plain." }, { status: 529 });
    expect((await claude("claude-haiku-5-5", "Be brief.").generate(question)).text).toBe("Plain.");
    await expect(claude("claude-haiku-5-5", "Be brief.").generate(question)).rejects.toMatchObject({ code: "529" });
  });
});
