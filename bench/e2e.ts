import { performance } from "node:perf_hooks";
import { type Harness, startHarness } from "../test/support/harness.ts";
import type { RecordedRequest } from "../test/support/fake-graph.ts";
import { textWebhook } from "../test/support/webhook-bodies.ts";
import { fmt, percentile, sleep, table } from "./stats.ts";

/**
 * Benchmark 2: the whole pipeline, webhook → inbound job → reply job → Claude (fake) → Graph
 * send (fake), with real workers, Redis and Postgres. Every message comes from a different
 * user, so every message is its own conversation and nothing is merged by the debounce.
 */

export interface EndToEndScenario {
  name: string;
  messages: number;
  claudeLatencyMs: number;
  replyConcurrency: number;
  /** Webhook POSTs in flight at once while delivering (the inject path; HTTP is benchmark 1's). */
  deliveryConcurrency: number;
  /** Single messages sent one at a time, each after the last was answered: the latency of an idle system. */
  idleSamples: number;
  timeoutMs: number;
}

export interface EndToEndResult {
  scenario: EndToEndScenario;
  deliveryMs: number;
  elapsedMs: number;
  /** Webhook → send latency of the idle samples: median and 99th percentile. */
  idleP50: number;
  idleP99: number;
  repliesPerSec: number;
  p50: number;
  p99: number;
  max: number;
  sends: number;
  recipients: number;
  claudeCalls: number;
  claudeMaxInFlight: number;
  deadLetters: number;
  failedJobs: number;
  non200: number;
  /** CPU of the bench process over the run, as % of one core (the machine has two). */
  nodeCpuPercent: number;
  /** Event-loop utilisation of the main thread (web, workers and fakes all run on it). */
  nodeBusy: number;
}

/** Conversations run end to end before the clock starts. */
const WARMUP_MESSAGES = 10;

/** After the last expected send, how long to keep watching for sends that must not happen (a duplicate). */
const SETTLE_MS = 500;

export async function runEndToEnd(scenario: EndToEndScenario): Promise<EndToEndResult> {
  const h = await startHarness({
    env: { REPLY_CONCURRENCY: String(scenario.replyConcurrency), REPLY_DEBOUNCE_MS: "0" },
  });
  try {
    // FakeGraph records each request but not when it came. Stamping them as they are
    // recorded (before the fake answers) times each send exactly, with no polling error.
    const sentAt = new Map<string, number>();
    const waiters = new Set<{ remaining: Set<string>; resolve: () => void }>();
    const record = h.graph.requests.push.bind(h.graph.requests);
    h.graph.requests.push = (...items: RecordedRequest[]) => {
      const now = performance.now();
      for (const item of items) {
        const to = String(item.body.to);
        if (item.body.type !== "text" || sentAt.has(to)) continue;
        sentAt.set(to, now);
        for (const waiter of waiters) {
          waiter.remaining.delete(to);
          if (waiter.remaining.size === 0) {
            waiters.delete(waiter);
            waiter.resolve();
          }
        }
      }
      return record(...items);
    };
    /** Resolves once every one of `users` has had a reply sent. */
    const repliesTo = (users: string[]) => new Promise<void>((resolve) => waiters.add({ remaining: new Set(users), resolve }));

    // Warm-up: the first messages pay for connection pools, Prisma's first queries and the
    // JIT; a few conversations end to end first, so the figures are the steady pipeline's.
    const warmUsers = Array.from({ length: WARMUP_MESSAGES }, (_, i) => `1444${String(i).padStart(7, "0")}`);
    const warmed = repliesTo(warmUsers);
    await deliverAll(h, warmUsers, scenario.deliveryConcurrency, new Map());
    await withTimeout(warmed, scenario.timeoutMs, "warm-up replies");
    h.claude.latencyMs = scenario.claudeLatencyMs;

    const idle: number[] = [];
    for (let i = 0; i < scenario.idleSamples; i++) {
      const user = `1333${String(i).padStart(7, "0")}`;
      const replied = repliesTo([user]);
      const deliveredAt = new Map<string, number>();
      await deliverAll(h, [user], 1, deliveredAt);
      await withTimeout(replied, scenario.timeoutMs, "an idle-sample reply");
      idle.push(sentAt.get(user)! - deliveredAt.get(user)!);
    }
    const claudeCallsBefore = h.claude.requests.length;

    const users = Array.from({ length: scenario.messages }, (_, i) => `1555${String(i).padStart(7, "0")}`);
    const allSent = repliesTo(users);
    const deliveredAt = new Map<string, number>();
    const cpuStart = process.cpuUsage();
    const eluStart = performance.eventLoopUtilization();
    const start = performance.now();
    const non200 = await deliverAll(h, users, scenario.deliveryConcurrency, deliveredAt);
    const deliveryMs = performance.now() - start;
    const finished = await withTimeout(allSent, scenario.timeoutMs, "replies").then(() => true, () => false);
    const cpu = process.cpuUsage(cpuStart);
    const elu = performance.eventLoopUtilization(eluStart);
    const replied = users.filter((u) => sentAt.has(u));
    const elapsedMs = (finished ? Math.max(...replied.map((u) => sentAt.get(u)!)) : performance.now()) - start;
    if (!finished) console.error(`  ${scenario.name}: only ${replied.length} of ${users.length} replies within ${scenario.timeoutMs} ms`);

    await sleep(SETTLE_MS);
    const measured = new Set(users);
    const sends = h.graph.sends.filter((s) => measured.has(String(s.body.to)));
    const latencies = replied.map((u) => sentAt.get(u)! - deliveredAt.get(u)!);
    return {
      scenario,
      deliveryMs,
      elapsedMs,
      idleP50: percentile(idle, 50),
      idleP99: percentile(idle, 99),
      repliesPerSec: replied.length / (elapsedMs / 1000),
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: percentile(latencies, 100),
      sends: sends.length,
      recipients: new Set(sends.map((s) => String(s.body.to))).size,
      claudeCalls: h.claude.requests.length - claudeCallsBefore,
      claudeMaxInFlight: h.claude.maxInFlight,
      deadLetters: await h.db.deadLetter.count(),
      failedJobs: (await h.queues.inbound.getFailedCount()) + (await h.queues.reply.getFailedCount()),
      non200,
      nodeCpuPercent: ((cpu.user + cpu.system) / 1000 / elapsedMs) * 100,
      nodeBusy: elu.utilization,
    };
  } finally {
    await h.close();
  }
}

/** One webhook per user, `concurrency` POSTs in flight; records when each POST began. Returns the non-200 count. */
async function deliverAll(h: Harness, users: string[], concurrency: number, deliveredAt: Map<string, number>): Promise<number> {
  // Bodies are built up front, so the clock measures the system, not the test data.
  const bodies = users.map((from, i) => ({ from, body: textWebhook({ from, text: `Hello, this is user ${i}. Are you open today?` }).body }));
  let next = 0;
  let non200 = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < bodies.length; i = next++) {
        const { from, body } = bodies[i]!;
        deliveredAt.set(from, performance.now());
        const response = await h.deliver(body);
        if (response.statusCode !== 200) non200++;
      }
    }),
  );
  return non200;
}

async function withTimeout(promise: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function formatEndToEnd(results: EndToEndResult[]): string {
  const out: string[] = [];
  out.push(
    table(
      ["scenario", "messages", "replies/s", "elapsed s", "delivery s", "p50 ms", "p99 ms", "max ms", "idle p50 ms", "idle p99 ms", "Claude max in flight", "node busy", "node CPU"],
      results.map((r) => [
        r.scenario.name,
        fmt(r.scenario.messages),
        fmt(r.repliesPerSec, 1),
        fmt(r.elapsedMs / 1000, 2),
        fmt(r.deliveryMs / 1000, 2),
        fmt(r.p50),
        fmt(r.p99),
        fmt(r.max),
        fmt(r.idleP50),
        fmt(r.idleP99),
        fmt(r.claudeMaxInFlight),
        `${fmt(r.nodeBusy * 100)}%`,
        `${fmt(r.nodeCpuPercent)}%`,
      ]),
    ),
    "  latency: webhook POST start -> the fake Graph receiving that user's reply, all messages delivered at once (so it",
    "  includes waiting behind the others); idle p50: one message at a time on an idle system; elapsed: first POST -> last reply;",
    "  node busy: main-thread event-loop utilisation (web, workers, fakes); node CPU: all threads, % of one core (of 200%).",
  );
  for (const r of results) {
    if (r.scenario.claudeLatencyMs > 0) {
      const theoretical = r.scenario.replyConcurrency / (r.scenario.claudeLatencyMs / 1000);
      out.push(
        `  ${r.scenario.name}: ${fmt(r.repliesPerSec, 1)} replies/s achieved vs. ${r.scenario.replyConcurrency} / ${r.scenario.claudeLatencyMs / 1000} s = ` +
          `${fmt(theoretical, 1)}/s theoretical -> ratio ${fmt(r.repliesPerSec / theoretical, 2)}`,
      );
    }
  }
  out.push("");
  for (const r of results) {
    const { messages } = r.scenario;
    const problems = [
      r.recipients < messages ? `${messages - r.recipients} users got no reply` : "",
      r.sends > r.recipients ? `${r.sends - r.recipients} duplicate sends (law 5)` : "",
      r.claudeCalls > messages ? `${r.claudeCalls - messages} extra Claude calls (law 4)` : "",
      r.deadLetters > 0 ? `${r.deadLetters} dead letters` : "",
      r.failedJobs > 0 ? `${r.failedJobs} failed jobs` : "",
      r.non200 > 0 ? `${r.non200} webhooks not answered 200` : "",
    ].filter(Boolean);
    out.push(
      `Check ${r.scenario.name}: ${r.sends} sends to ${r.recipients} users, ${r.claudeCalls} Claude calls for ${messages} messages, ` +
        `${r.deadLetters} dead letters, ${r.failedJobs} failed jobs, ${r.non200} non-200 -> ${problems.length ? `FAIL: ${problems.join("; ")}` : "OK"}`,
    );
  }
  return out.join("\n");
}
