import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { inboundJobId } from "../src/queue/catalog.ts";
import { MAIN_JS } from "./support/build.ts";
import { anthropicError } from "./support/fake-anthropic.ts";
import { graphError } from "./support/fake-graph.ts";
import { delayedUntil, eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { PHONE_NUMBER_ID, statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/** The worker side of DESIGN.md §2 end to end: laws 4, 5, 6, 7 and 8. */

const harness = harnessPerTest();

const openDeadLetters = (h: Harness) => h.db.deadLetter.findMany({ where: { state: "open" } });

describe("a text message", () => {
  it("gets one reply from Claude, sent from the number that received it, tagged with our reply part id", async () => {
    const h = await harness();
    const { body, wamids } = textWebhook({ text: "Do you ship to Lisbon?", from: "351912345678" });
    expect((await h.deliver(body)).statusCode).toBe(200);

    await eventually(() => h.graph.sends.length === 1, "the reply to be sent");
    const send = h.graph.sends[0]!;
    expect(send.path).toBe(`/v24.0/${PHONE_NUMBER_ID}/messages`);
    expect(send.authorization).toBe("Bearer test-access-token");
    expect(send.body).toMatchObject({ messaging_product: "whatsapp", to: "351912345678", type: "text", text: { body: "Reply #1" } });
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain("Do you ship to Lisbon?");

    await eventually(async () => (await h.db.reply.findFirst({ where: { state: "sent" } })) !== null, "the reply to be marked sent");
    const part = await h.db.outboundMessage.findFirstOrThrow();
    expect(send.body.biz_opaque_callback_data).toBe(part.id);
    expect(part).toMatchObject({ sendState: "accepted", wamid: "wamid.OUT1", text: "Reply #1" });
    const message = await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: wamids[0] } });
    expect(message.replyId).toBe(part.replyId);
  });

  it("is marked read with a typing indicator before the reply", async () => {
    const h = await harness();
    const { body, wamids } = textWebhook({ text: "hi" });
    await h.deliver(body);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    expect(h.graph.readReceipts.map((r) => r.body)).toEqual([
      { messaging_product: "whatsapp", status: "read", message_id: wamids[0], typing_indicator: { type: "text" } },
    ]);
    const receiptAt = h.graph.requests.indexOf(h.graph.readReceipts[0]!);
    expect(receiptAt).toBeLessThan(h.graph.requests.indexOf(h.graph.sends[0]!));
  });

  it("is answered while its read receipt is still unanswered: mark-read and typing never hold up the reply", async () => {
    // A Graph API slow to answer receipts (within the client's timeout) must not delay the answer.
    const h = await harness({ env: { GRAPH_TIMEOUT_MS: "30000" } });
    let answerReceipts!: () => void;
    h.graph.readReceiptsWait = new Promise((resolve) => (answerReceipts = resolve));
    const { body, wamids } = textWebhook({ text: "are you open today?" });
    await h.deliver(body);
    await eventually(() => h.graph.sends.length === 1, "the reply, with the read receipt still waiting for its answer");
    expect(h.graph.readReceipts.map((r) => r.body.message_id)).toEqual([wamids[0]]);
    answerReceipts();
  });

  it("is still answered when the read receipt fails", async () => {
    const h = await harness();
    h.graph.failReadReceipts = true;
    await h.deliver(textWebhook({ text: "hello" }).body);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    expect(h.graph.readReceipts).toHaveLength(1);
  });
});

describe("one AI call per answer (law 4) and one send per reply (law 5)", () => {
  it("the same wamid delivered 5 times concurrently gets one Claude call and one send", async () => {
    const h = await harness();
    const { body } = textWebhook({ text: "price?" });
    const answers = await Promise.all(Array.from({ length: 5 }, () => h.deliver(body)));
    expect(answers.map((a) => a.statusCode)).toEqual([200, 200, 200, 200, 200]);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.graph.sends).toHaveLength(1);
    expect(await h.db.inboundMessage.count()).toBe(1);
  });

  it("a redelivery after the Redis claim was lost is stopped by Postgres: no second reply", async () => {
    const h = await harness();
    const { body, wamids } = textWebhook({ text: "first" });
    await h.deliver(body);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    // As if Redis lost the claim (the job's deduplication key: eviction, failover)...
    await h.queues.inbound.removeDeduplicationKey(inboundJobId(wamids[0]!));
    // ...and the finished job: the job id derives from the wamid, so BullMQ would refuse it otherwise.
    await h.queues.inbound.clean(0, 1000, "completed");
    expect((await h.deliver(body)).statusCode).toBe(200);
    await eventually(async () => (await h.queues.inbound.getJobCounts("completed")).completed === 1, "the redelivery to be processed");
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.graph.sends).toHaveLength(1);
  });

  it("Graph 500, 500, then 200 → one send and one Claude call", async () => {
    const h = await harness();
    h.graph.answerSends(
      { status: 500, body: graphError(131000, "Something went wrong") },
      { status: 503, body: graphError(133004, "Server temporarily unavailable") },
    );
    const { body } = textWebhook({ text: "are you open?" });
    await h.deliver(body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply to be sent");
    expect(h.graph.sends).toHaveLength(3); // two refused attempts, one accepted
    expect(h.claude.requests).toHaveLength(1);
    expect(await h.db.outboundMessage.count({ where: { sendState: "accepted" } })).toBe(1);
    expect(await openDeadLetters(h)).toHaveLength(0);
  });

  it("a worker process killed mid-send: the job runs again and sends the stored draft without asking Claude again", async () => {
    // The worker dies long before its send would time out; the new one waits out the part's
    // resend_after (lease + GRAPH_TIMEOUT_MS + SEND_RECONCILE_WAIT_MS) for a status, then resends.
    const h = await harness({ workers: 0, env: { JOB_LOCK_MS: "1000", GRAPH_TIMEOUT_MS: "5000", SEND_RECONCILE_WAIT_MS: "500" } });
    h.graph.answerSends({ hang: true }); // Meta never answers: the worker is mid-send when it dies
    const child = spawn(process.execPath, [MAIN_JS, "worker"], {
      env: { ...process.env, ...h.env, LOG_LEVEL: "silent" },
      stdio: "ignore",
    });
    try {
      await h.deliver(textWebhook({ text: "hello" }).body);
      // Meta has the request in hand (not merely our "sending" mark): the worker dies mid-send.
      await eventually(() => h.graph.sends.length === 1, "the worker process to start and reach Meta with the send", 60_000);
    } finally {
      child.kill("SIGKILL");
    }
    await new Promise((resolve) => child.once("exit", resolve));
    expect(await h.db.reply.findFirstOrThrow()).toMatchObject({ state: "ready", text: "Reply #1" });

    h.startWorkers(); // another worker picks up the stalled job once its lock expires
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the stored draft to be sent", 30_000);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.graph.sentTexts).toEqual(["Reply #1", "Reply #1"]); // the unconfirmed send, then the resend (law 5's window)
  }, 90_000);

  it("a send whose answer was lost is reconciled from the status webhook and not sent again", async () => {
    const h = await harness({ env: { GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "1500" } });
    h.graph.answerSends({ hang: true });
    const { body } = textWebhook({ text: "hello" });
    await h.deliver(body);
    // Meta took the message but our client timed out: the part stays "sending" without a wamid.
    const part = await eventually(async () => h.db.outboundMessage.findFirst({ where: { sendState: "sending", wamid: null } }), "the send to time out");
    await eventually(async () => (await h.queues.reply.getJobCounts("delayed")).delayed === 1, "the retry to be scheduled");
    expect((await h.deliver(statusWebhook({ id: "wamid.LOST1", status: "sent", biz_opaque_callback_data: part.id }))).statusCode).toBe(200);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the retry to finish the reply");
    expect(h.graph.sends).toHaveLength(1);
    expect(await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).toMatchObject({ wamid: "wamid.LOST1", sendState: "accepted" });
  });
});

describe("errors decide their fate (law 7)", () => {
  it("Graph 131047 makes a dead letter with that code at once, with no retry", async () => {
    const h = await harness();
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message", "24 hours have passed") });
    const { body } = textWebhook({ text: "hello?" });
    await h.deliver(body);
    const [letter] = await eventually(async () => {
      const rows = await openDeadLetters(h);
      return rows.length === 1 ? rows : null;
    }, "a dead letter");
    expect(letter).toMatchObject({ source: "graph", code: "131047", attempts: 1 });
    expect(letter!.reason).toMatch(/24 hours/);
    expect(letter!.detail).toMatchObject({ details: "24 hours have passed", fbtraceId: "AbCdEfGh123", httpStatus: 400 });
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(1);
    expect(await h.db.reply.findFirstOrThrow()).toMatchObject({ state: "dead", text: "Reply #1" });
  });

  it("Graph 5xx on every attempt ends in a dead letter once the attempts are spent", async () => {
    const h = await harness({ env: { JOB_ATTEMPTS: "3" } });
    h.graph.answerSends(...Array.from({ length: 3 }, () => ({ status: 503, body: graphError(2, "Service temporarily unavailable") })));
    await h.deliver(textWebhook({ text: "hello" }).body);
    const [letter] = await eventually(async () => {
      const rows = await openDeadLetters(h);
      return rows.length === 1 ? rows : null;
    }, "a dead letter");
    expect(letter).toMatchObject({ source: "graph", code: "2", attempts: 3 });
    expect(h.graph.sends).toHaveLength(3);
    expect(h.claude.requests).toHaveLength(1);
  });

  it("Meta's pair rate limit (131056) delays only that conversation (≥ 6 s), never the others, and is not dead-lettered", async () => {
    const h = await harness();
    h.graph.answerSends({ status: 400, body: graphError(131056, "(Business Account, Consumer Account) pair rate limit hit") });
    await h.deliver(textWebhook({ text: "hello", from: "111" }).body);
    await eventually(() => h.graph.sends.length === 1, "the refused send");
    const refused = await h.db.conversation.findFirstOrThrow({ where: { contact: { waId: "111" } } });
    const retryAt = await eventually(async () => {
      const job = (await h.queues.reply.getDelayed()).find((j) => j.data.conversationId === refused.id);
      return job?.id ? delayedUntil(h.redis, h.queues.reply, job.id) : undefined;
    }, "the refused reply's retry to be scheduled");
    expect(retryAt - h.graph.sends[0]!.at).toBeGreaterThanOrEqual(6000); // Meta asks for ≥ 6 s per pair: BullMQ's due time, set after the refusal
    await h.deliver(textWebhook({ text: "hello", from: "222" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 2, "both replies", 15_000);
    expect(h.graph.sends.map((s) => s.body.to)).toEqual(["111", "222", "111"]); // the other customer did not wait
    expect(h.graph.sends[2]!.at).toBeGreaterThanOrEqual(retryAt);
    expect(await openDeadLetters(h)).toHaveLength(0);
  });

  it("Meta's throughput limit (130429) slows every reply down, spends no attempt and loses nothing", async () => {
    const h = await harness({ env: { JOB_ATTEMPTS: "1" } }); // one attempt: a retry would have dead-lettered it
    h.graph.answerSends({ status: 400, body: graphError(130429, "Rate limit hit") });
    await h.deliver(textWebhook({ text: "hello", from: "111" }).body);
    await eventually(() => h.graph.sends.length === 1, "the throttled send");
    // Redis read the limit's TTL after `askedAt`, so the limit lasts until askedAt + ttl at least.
    const limitedUntil = await eventually(async () => {
      const askedAt = Date.now();
      const ttl = await h.queues.reply.getRateLimitTtl();
      return ttl > 0 ? askedAt + ttl : undefined;
    }, "the reply queue to be rate-limited");
    await h.deliver(textWebhook({ text: "hello", from: "222" }).body); // another customer waits too
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 2, "both replies after the pause", 20_000);
    // Nothing went out to anyone while Meta's limit held.
    for (const send of h.graph.sends.slice(1)) expect(send.at).toBeGreaterThanOrEqual(limitedUntil);
    expect(await openDeadLetters(h)).toHaveLength(0);
    expect(h.claude.requests).toHaveLength(2);
    expect(h.graph.sends.map((s) => s.body.to)).toEqual(["111", "111", "222"]);
  });

  it("Anthropic 529 twice, then OK → one reply", async () => {
    const h = await harness();
    h.claude.answer({ status: 529 }, { status: 529 });
    await h.deliver(textWebhook({ text: "hello" }).body);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(3);
    expect(h.graph.sentTexts).toEqual(["Reply #3"]);
    expect(await openDeadLetters(h)).toHaveLength(0);
  });

  it("Anthropic 400 → a dead letter without a draft, and Claude is not asked again", async () => {
    const h = await harness();
    h.claude.answer({ status: 400, body: anthropicError(400) });
    await h.deliver(textWebhook({ text: "hello" }).body);
    const [letter] = await eventually(async () => {
      const rows = await openDeadLetters(h);
      return rows.length === 1 ? rows : null;
    }, "a dead letter");
    expect(letter).toMatchObject({ source: "anthropic", code: "400" });
    expect(letter!.reason).toMatch(/invalid_request_error/);
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.graph.sends).toHaveLength(0);
    expect(await h.db.reply.findFirstOrThrow()).toMatchObject({ state: "dead", text: null });
  });
});

describe("one conversation, one voice at a time (law 8)", () => {
  it("a burst of 3 messages gets one reply that saw all three", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "400" } });
    for (const text of ["Hi", "I ordered yesterday", "where is my parcel?"]) {
      expect((await h.deliver(textWebhook({ text }).body)).statusCode).toBe(200);
    }
    await eventually(() => h.graph.sends.length === 1, "the reply");
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.graph.sends).toHaveLength(1);
    const seen = h.claude.userText(0);
    for (const text of ["Hi", "I ordered yesterday", "where is my parcel?"]) expect(seen).toContain(text);
  });

  it("never generates two replies of one conversation at once, across worker processes", async () => {
    const h = await harness({ workers: 3, env: { REPLY_DEBOUNCE_MS: "0" } });
    h.claude.latencyMs = 300;
    for (let i = 0; i < 6; i++) {
      await h.deliver(textWebhook({ text: `message ${i}` }).body);
      // The next message comes while Claude writes an answer, however loaded the machine (a
      // fixed pause let a slow worker gather all six into one reply, with nothing to overlap).
      await eventually(() => h.claude.inFlight > 0, "Claude to be writing", 20_000);
    }
    await eventually(async () => (await h.db.inboundMessage.count({ where: { replyId: null } })) === 0 && h.claude.inFlight === 0, "every message answered");
    await eventually(async () => (await h.db.reply.count({ where: { state: { not: "sent" } } })) === 0, "every reply sent");
    expect(h.claude.maxInFlight).toBe(1);
    expect(h.claude.requests.length).toBeGreaterThanOrEqual(2);
    // Each later reply saw the earlier answers: replies went out in order.
    const sent = await h.db.reply.findMany({ orderBy: { sentAt: "asc" } });
    expect(sent.map((r) => r.createdAt.getTime())).toEqual([...sent.map((r) => r.createdAt.getTime())].sort((a, b) => a - b));
  });

  it("different conversations are answered concurrently", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    h.claude.latencyMs = 300;
    await Promise.all(["111", "222", "333", "444"].map((from) => h.deliver(textWebhook({ text: "hi", from }).body)));
    await eventually(() => h.graph.sends.length === 4, "four replies");
    expect(h.claude.maxInFlight).toBeGreaterThan(1);
    expect(new Set(h.graph.sends.map((s) => s.body.to))).toEqual(new Set(["111", "222", "333", "444"]));
  });
});

describe("a long reply", () => {
  it("is split into WhatsApp-sized messages, sent in order, none broken inside a character", async () => {
    const h = await harness();
    const long = `${"Olá 👋🏽 ".repeat(700)}\n\n${"fim. ".repeat(400)}`;
    h.claude.answer({ text: long });
    await h.deliver(textWebhook({ text: "tell me everything" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply");
    expect(h.graph.sends.length).toBeGreaterThan(1);
    for (const text of h.graph.sentTexts) {
      expect(text.length).toBeLessThanOrEqual(4096);
      expect(text).not.toMatch(/[\ud800-\udbff]$/);
    }
    expect(h.graph.sentTexts.join(" ").replace(/\s+/g, " ")).toBe(long.trim().replace(/\s+/g, " "));
  });
});

describe("hostile ids stay apart", () => {
  it('wamids "a:b", "a_b" and one with a lone surrogate are three messages, each answered once', async () => {
    const h = await harness();
    const ids = ["wamid.HOSTILE.a:b", "wamid.HOSTILE.a_b", "wamid.HOSTILE.\ud800x"];
    const { body } = textWebhook(...ids.map((id, i) => ({ id, text: `message ${i}`, from: `4477000000${i}` })));
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(new Set(ids.map(inboundJobId)).size).toBe(3);
    for (const id of ids) expect(await h.queues.inbound.getJob(inboundJobId(id)), id).toBeDefined();
    await eventually(() => h.graph.sends.length === 3, "three answers");
    await untilQuiet(h);
    expect(h.graph.sends.map((s) => s.body.to).sort()).toEqual(["44770000000", "44770000001", "44770000002"]);
    expect(await h.db.inboundMessage.count()).toBe(3);
  });
});
