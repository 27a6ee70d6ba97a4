import pino from "pino";
import { describe, expect, it } from "vitest";
import { buildMetricsApp } from "../src/app.ts";
import type { Clock } from "../src/clock.ts";
import { createMetrics, mergeMetrics } from "../src/metrics/metrics.ts";
import { anthropicError } from "./support/fake-anthropic.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, type HarnessOptions } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { sampleValue } from "./support/prometheus-text.ts";
import { PHONE_NUMBER_ID, statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * What an operator alerts on moves when the thing happens: a reply's Claude call, tokens, cost
 * and time to answer; Meta's error codes; dead letters by reason; duplicate deliveries; a job
 * waiting with no worker to take it. Read from a real `/metrics` answer of a real system.
 */

const harness = harnessPerTest();

async function system(options?: HarnessOptions & { clock?: Clock }) {
  const h = await harness(options);
  const app = buildMetricsApp({ logger: pino({ level: "silent" }), queues: h.queues, db: h.db, metrics: h.metrics, clock: options?.clock });
  const scrape = async () => {
    const res = await app.inject({ method: "GET", url: "/metrics" });
    expect(res.statusCode).toBe(200);
    return res.body;
  };
  /** Scrapes until `metric` with `labels` reaches `atLeast` (the job that moves it may still be finishing). */
  const scrapeWhen = (metric: string, labels: Record<string, string>, atLeast = 1) =>
    eventually(
      async () => {
        const text = await scrape();
        return (sampleValue(text, metric, labels) ?? 0) >= atLeast ? text : undefined;
      },
      `${metric} ${JSON.stringify(labels)} to reach ${atLeast}`,
    );
  return { h, scrape, scrapeWhen };
}

const haiku = { phone_number_id: PHONE_NUMBER_ID, model: "claude-haiku-5-5" };

async function answeredReply(h: Harness) {
  return eventually(() => h.db.reply.findFirst({ where: { state: "sent" } }), "the reply to be sent");
}

describe("a reply", () => {
  it("counts one Claude call by business number and model, the tokens it billed, their estimated cost, and the time from webhook to reply", async () => {
    const { h, scrapeWhen } = await system();
    await h.deliver(textWebhook({ text: "are you open on sunday?" }).body);
    const reply = await answeredReply(h);
    const text = await scrapeWhen("wa_webhook_to_reply_seconds_count", {});

    expect(sampleValue(text, "wa_claude_calls_total", { ...haiku, outcome: "ok" })).toBe(1);
    const tokens = (kind: string) => sampleValue(text, "wa_claude_tokens_total", { ...haiku, kind });
    expect(tokens("input")).toBe(reply.inputTokens);
    expect(tokens("output")).toBe(reply.outputTokens);
    expect(tokens("cache_read")).toBe(reply.cacheReadTokens);
    expect(tokens("cache_write")).toBe(reply.cacheCreationTokens);
    // Haiku 5.5: $0.10 in, $0.125 cache write (5 minutes), $0.01 cache read, $0.50 out, per million tokens.
    const usd = (reply.inputTokens! * 0.1 + reply.cacheCreationTokens! * 0.125 + reply.cacheReadTokens! * 0.01 + reply.outputTokens! * 0.5) / 1e6;
    expect(sampleValue(text, "wa_claude_cost_usd_total", haiku)).toBeCloseTo(usd, 12);
    expect(usd).toBeGreaterThan(0);

    expect(sampleValue(text, "wa_webhook_to_reply_seconds_count")).toBe(1);
    expect(sampleValue(text, "wa_webhook_to_reply_seconds_sum")).toBeGreaterThan(0);
    expect(sampleValue(text, "wa_webhook_duration_seconds_count", { outcome: "accepted" })).toBe(1);
    expect(sampleValue(text, "wa_dead_letters_created_total")).toBeUndefined();
  });

  it("Claude's refusal counts as a permanent error and a dead letter for the reason 'claude'", async () => {
    const { h, scrapeWhen } = await system();
    h.claude.answer({ status: 400, body: anthropicError(400) });
    await h.deliver(textWebhook({ text: "hello" }).body);
    const text = await scrapeWhen("wa_dead_letters_created_total", { reason: "claude" });
    expect(sampleValue(text, "wa_claude_calls_total", { ...haiku, outcome: "permanent_error" })).toBe(1);
    expect(sampleValue(text, "wa_claude_calls_total", { outcome: "ok" })).toBeUndefined();
    expect(sampleValue(text, "wa_claude_tokens_total")).toBeUndefined();
  });

  it("a Claude call that times out counts apart, as one that may be billed without an answer; its retry is a call of its own", async () => {
    const { h, scrapeWhen } = await system({ env: { ANTHROPIC_TIMEOUT_MS: "300" } });
    h.claude.latencyMs = 1000;
    await h.deliver(textWebhook({ text: "hello" }).body);
    const text = await scrapeWhen("wa_claude_calls_total", { ...haiku, outcome: "timeout" });
    expect(sampleValue(text, "wa_claude_calls_total", { ...haiku, outcome: "retryable_error" })).toBeUndefined();
    h.claude.latencyMs = 0;
    const answered = await scrapeWhen("wa_claude_calls_total", { ...haiku, outcome: "ok" });
    expect(sampleValue(answered, "wa_claude_calls_total", { ...haiku, outcome: "timeout" })).toBeGreaterThanOrEqual(1);
  });
});

describe("Meta's errors", () => {
  it("a send Meta refuses with 131047 counts that code and a dead letter for the reason 'window_closed'", async () => {
    const { h, scrapeWhen } = await system();
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
    await h.deliver(textWebhook({ text: "hi" }).body);
    const text = await scrapeWhen("wa_dead_letters_created_total", { reason: "window_closed" });
    expect(sampleValue(text, "wa_graph_errors_total", { code: "131047", via: "api" })).toBe(1);
    expect(sampleValue(text, "wa_dead_letters_created_total")).toBe(1);
  });

  it("a failed delivery status counts Meta's code once, however often Meta delivers it", async () => {
    const { h, scrape, scrapeWhen } = await system();
    await h.deliver(textWebhook({ text: "hi" }).body);
    await answeredReply(h);
    const part = await h.db.outboundMessage.findFirstOrThrow({ where: { wamid: { not: null } } });
    const failed = statusWebhook({ id: part.wamid!, status: "failed", errors: [{ code: 131026, title: "Message undeliverable" }] });
    expect((await h.deliver(failed)).statusCode).toBe(200);
    await scrapeWhen("wa_dead_letters_created_total", { reason: "cannot_receive" });
    expect((await h.deliver(failed)).statusCode).toBe(200);

    const text = await scrape();
    expect(sampleValue(text, "wa_graph_errors_total", { code: "131026", via: "status" })).toBe(1);
    expect(sampleValue(text, "wa_webhook_items_total", { kind: "status", outcome: "duplicate" })).toBe(1);
    expect(sampleValue(text, "wa_dead_letters_created_total")).toBe(1);
  });
});

describe("deliveries", () => {
  it("a delivery Meta makes again counts as a duplicate, and every delivery is timed once by how it was answered", async () => {
    const { h, scrapeWhen } = await system();
    const { body } = textWebhook({ text: "one message, delivered twice" });
    await h.deliver(body);
    await h.deliver(body);
    expect((await h.deliver(body, { "x-hub-signature-256": "sha256=00" })).statusCode).toBe(401);
    const text = await scrapeWhen("wa_webhook_duration_seconds_count", { outcome: "accepted" }, 2);

    expect(sampleValue(text, "wa_webhook_items_total", { kind: "message", outcome: "duplicate" })).toBe(1);
    expect(sampleValue(text, "wa_webhook_items_total", { kind: "message", outcome: "enqueued" })).toBe(1);
    expect(sampleValue(text, "wa_webhook_duration_seconds_count", { outcome: "accepted" })).toBe(2);
    expect(sampleValue(text, "wa_webhook_duration_seconds_count", { outcome: "bad_signature" })).toBe(1);
    expect(sampleValue(text, "wa_webhook_duration_seconds_bucket", { outcome: "accepted", le: "+Inf" })).toBe(2);
  });

  it("a customer asking for a person counts a dead letter for the reason 'handoff'", async () => {
    const { h, scrapeWhen } = await system();
    await h.deliver(textWebhook({ text: "human" }).body);
    const text = await scrapeWhen("wa_dead_letters_created_total", { reason: "handoff" });
    expect(sampleValue(text, "wa_dead_letters_created_total")).toBe(1);
  });
});

describe("the queues", () => {
  it("a job waiting with no worker to take it shows its age; a queue with nothing waiting shows 0", async () => {
    let clock = Date.now();
    const { h, scrape } = await system({ clock: { now: () => new Date(clock), monotonicMs: () => clock } });
    await h.stopWorkers();
    await h.deliver(textWebhook({ text: "anyone there?" }).body);
    const [job] = await h.queues.inbound.getWaiting(0, 0);
    clock = job!.timestamp + 90_000;

    const text = await scrape();
    expect(sampleValue(text, "wa_queue_oldest_waiting_seconds", { queue: "inbound" })).toBe(90);
    expect(sampleValue(text, "wa_queue_oldest_waiting_seconds", { queue: "reply" })).toBe(0);
    expect(sampleValue(text, "wa_queue_jobs", { queue: "inbound", state: "waiting" })).toBe(1);
  });
});

describe("several processes", () => {
  it("under npm start, each process's counters and histograms keep their own role label, so sum() across roles adds them", async () => {
    const [web, worker] = [createMetrics(), createMetrics()];
    web.registry.setDefaultLabels({ role: "web" });
    worker.registry.setDefaultLabels({ role: "worker" });
    web.webhookDuration.observe({ outcome: "accepted" }, 0.002);
    worker.webhookToReply.observe(1.5);
    worker.webhookToReply.observe(4);
    worker.deadLettersCreated.inc({ reason: "claude" });

    const text = await mergeMetrics([await web.registry.getMetricsAsJSON(), await worker.registry.getMetricsAsJSON()]).metrics();
    expect(sampleValue(text, "wa_webhook_duration_seconds_count", { role: "web", outcome: "accepted" })).toBe(1);
    expect(sampleValue(text, "wa_webhook_to_reply_seconds_count", { role: "worker" })).toBe(2);
    expect(sampleValue(text, "wa_webhook_to_reply_seconds_bucket", { role: "worker", le: "2" })).toBe(1);
    expect(sampleValue(text, "wa_dead_letters_created_total", { role: "worker", reason: "claude" })).toBe(1);
    expect(text.match(/^# TYPE wa_webhook_to_reply_seconds /gm)).toHaveLength(1);
  });
});
