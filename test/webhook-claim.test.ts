import { type Job, type Queue, Worker } from "bullmq";
import { afterEach, describe, expect, it } from "vitest";
import { deduplicationKey } from "../src/queue/bullmq-internals.ts";
import { inboundJobId, statusJobId } from "../src/queue/catalog.ts";
import { WEBHOOK_DEDUP_TTL_MS } from "../src/queue/queues.ts";
import { createWorkerRedis } from "../src/queue/redis.ts";
import { eventually, type Harness, startHarness, TEST_REDIS_URL } from "./support/harness.ts";
import { PrivateRedis } from "./support/private-redis.ts";
import { envelope, messagesChange, metaWire, PHONE_NUMBER_ID, statusWebhook, textMessage, textWebhook, uniqueWamid } from "./support/webhook-bodies.ts";

/**
 * Law 3: a claim never swallows a message. The claim is BullMQ's deduplication key, written
 * by the same Lua script that queues the job: claimed means queued. These tests show it on the
 * real Redis, over the job's whole life, and what happens when the key is gone. Every system
 * here runs without the app's workers; where a job must run, a plain BullMQ worker of the
 * test's own takes it, so the test decides when it finishes.
 */

let harnesses: Harness[] = [];
const cleanups: (() => Promise<unknown>)[] = [];
async function webOnly(): Promise<Harness> {
  const h = await startHarness({ workers: 0 });
  harnesses.push(h);
  return h;
}
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await Promise.all(harnesses.map((h) => h.close()));
  harnesses = [];
});

async function jobTotal(queue: Queue): Promise<number> {
  return Object.values(await queue.getJobCounts()).reduce((sum, n) => sum + n, 0);
}

/** The webhook's claim on a job: BullMQ's deduplication key for it, in the job's own queue. */
const claimKey = deduplicationKey;

/**
 * A worker of the test's own on the system's inbound queue: it holds each job active until
 * `release()` is called, then completes it, the way BullMQ completes the app's jobs (with their
 * own KEEP options).
 */
function holdingWorker(h: Harness): { release: () => void; processed: string[] } {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const processed: string[] = [];
  const connection = createWorkerRedis(TEST_REDIS_URL);
  const worker = new Worker(
    "inbound",
    async (job: Job) => {
      processed.push(job.id ?? "");
      await gate;
    },
    { connection, prefix: h.prefix },
  );
  cleanups.push(async () => {
    release();
    await worker.close();
    await connection.quit();
  });
  return { release, processed };
}

/**
 * BullMQ removes finished jobs on its own (KEEP: after an hour, or past the newest 1000): here
 * `jobId` is made to look finished two hours ago, and the next job to finish prunes it by age,
 * through BullMQ's own clean-up.
 */
async function ageOut(h: Harness, jobId: string): Promise<void> {
  const completed = h.queues.inbound.toKey("completed");
  await h.redis.zadd(completed, Date.now() - 2 * 3600_000, jobId);
  const { body } = textWebhook({ text: "a later message, whose completion prunes old jobs" });
  expect((await h.deliver(body)).statusCode).toBe(200);
  await eventually(async () => (await h.queues.inbound.getJob(jobId)) === undefined, "BullMQ to remove the aged job");
}

function metricValues(h: Harness): Promise<Record<string, number>> {
  return h.metrics.webhookItems.get().then((metric) => Object.fromEntries(metric.values.map((v) => [`${v.labels.kind}/${v.labels.outcome}`, v.value])));
}

describe("POST /webhook: a claim never swallows a message (law 3)", () => {
  it("the claim and the job are written by one script, in one round trip: there is no moment where one exists without the other", async () => {
    // A Redis of its own: MONITOR on the shared one would stream every other test file's
    // commands too, a flood ioredis's monitor connection has been seen to trip over.
    const redis = await PrivateRedis.start();
    cleanups.push(() => redis.destroy());
    const h = await startHarness({ workers: 0, env: { REDIS_URL: redis.url } });
    harnesses.push(h);
    const { body, wamids } = textWebhook({ text: "claimed and queued at once" });
    const jobId = inboundJobId(wamids[0]!);
    const queue = h.queues.inbound;

    // MONITOR lists every command Redis runs, in order, with those a script runs marked "lua":
    // a script runs alone, so its commands are contiguous and nothing else runs in between.
    const monitor = await h.redis.monitor();
    const lines: { source: string; args: string[] }[] = [];
    monitor.on("monitor", (_time: string, args: string[], source: string) => lines.push({ source, args }));
    try {
      expect((await h.deliver(body)).statusCode).toBe(200);
      await eventually(() => lines.some((l) => l.args[0]?.toLowerCase() === "lpush" && l.args[1] === queue.keys.wait), "MONITOR to show the job queued");
    } finally {
      await monitor.disconnect();
    }

    // What the app sent for this delivery: a read naming the outcome, and the one script.
    const sent = lines.filter((l) => l.source !== "lua" && l.args.some((a) => a.includes(h.prefix)));
    expect(sent.map((l) => l.args[0]?.toLowerCase())).toEqual(["exists", expect.stringMatching(/^eval(sha)?$/)]);
    expect(sent[0]!.args.slice(1)).toEqual([queue.toKey(jobId), claimKey(queue, jobId)]); // a read: it writes nothing

    // Inside that one script: the claim for 24 h, the job, and the job in the waiting list.
    const script = lines.indexOf(sent[1]!);
    const end = lines.findIndex((l, i) => i > script && l.source !== "lua");
    const inside = lines.slice(script + 1, end === -1 ? undefined : end).map((l) => [l.args[0]?.toUpperCase(), ...l.args.slice(1)]);
    expect(inside).toContainEqual(["SET", claimKey(queue, jobId), jobId, "PX", String(WEBHOOK_DEDUP_TTL_MS), "NX"]);
    expect(inside.some(([command, key]) => command === "HMSET" && key === queue.toKey(jobId))).toBe(true);
    expect(inside).toContainEqual(["LPUSH", queue.keys.wait, jobId]);
  });

  it("the claim names its job and lives 24 h, for a message, a status and a business event alike", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "hello" });
    const wamid = uniqueWamid();
    const change = {
      field: "user_id_update",
      value: { metadata: { phone_number_id: PHONE_NUMBER_ID }, user_id_update: [{ user_id: { previous: "US.old1", current: "US.new1" } }] },
    };
    for (const delivery of [body, statusWebhook({ id: wamid, status: "delivered" }), metaWire(envelope([change]))]) {
      expect((await h.deliver(delivery)).statusCode).toBe(200);
    }
    const [event] = await h.queues.events.getJobs();
    const jobs: [Queue, string][] = [
      [h.queues.inbound, inboundJobId(wamids[0]!)],
      [h.queues.status, statusJobId(wamid, "delivered")],
      [h.queues.events, event?.id ?? "no event job"],
    ];
    for (const [queue, jobId] of jobs) {
      expect(await queue.getDeduplicationJobId(jobId)).toBe(jobId);
      const ttl = await h.redis.pttl(claimKey(queue, jobId));
      expect(ttl).toBeGreaterThan(WEBHOOK_DEDUP_TTL_MS - 60_000);
      expect(ttl).toBeLessThanOrEqual(WEBHOOK_DEDUP_TTL_MS);
    }
  });

  it("a redelivery while the job waits, runs, has completed, and after BullMQ has removed it is answered 200 and adds nothing", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "delivered again and again" });
    const jobId = inboundJobId(wamids[0]!);
    const queue = h.queues.inbound;
    expect((await h.deliver(body)).statusCode).toBe(200);

    expect(await queue.getJobState(jobId)).toBe("waiting");
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await jobTotal(queue)).toBe(1);

    const worker = holdingWorker(h);
    await eventually(async () => (await queue.getJobState(jobId)) === "active", "the job to be taken");
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await jobTotal(queue)).toBe(1);

    worker.release();
    await eventually(async () => (await queue.getJobState(jobId)) === "completed", "the job to complete");
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await jobTotal(queue)).toBe(1);

    // BullMQ's clean-up of finished jobs leaves the claim in place for the rest of its 24 h.
    await ageOut(h, jobId);
    expect(await queue.getDeduplicationJobId(jobId)).toBe(jobId);
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await queue.getJob(jobId)).toBeUndefined();
    expect(worker.processed.filter((id) => id === jobId)).toHaveLength(1); // it ran once
  });

  it("once the claim has expired and the job is gone, a redelivery is queued again", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "a day later" });
    const jobId = inboundJobId(wamids[0]!);
    const queue = h.queues.inbound;
    expect((await h.deliver(body)).statusCode).toBe(200);
    const worker = holdingWorker(h);
    worker.release();
    await eventually(async () => (await queue.getJobState(jobId)) === "completed", "the job to complete");
    await ageOut(h, jobId);

    // The 24 h pass (the key is made to expire now, by Redis itself).
    await h.redis.pexpire(claimKey(queue, jobId), 1);
    await eventually(async () => (await h.redis.exists(claimKey(queue, jobId))) === 0, "the claim to expire");

    expect((await h.deliver(body)).statusCode).toBe(200);
    await eventually(() => worker.processed.filter((id) => id === jobId).length === 2, "the redelivery to run");
    // A new claim came with the new job. (Postgres's UNIQUE wamid keeps it from a second answer: reply-flow.test.ts.)
    expect(await queue.getDeduplicationJobId(jobId)).toBe(jobId);
  });

  it("a claim lost while its job is still queued (a failed job outlives its 24 h key) lets nothing through: the job id derives from the wamid", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "still queued" });
    const jobId = inboundJobId(wamids[0]!);
    expect((await h.deliver(body)).statusCode).toBe(200);
    await h.redis.del(claimKey(h.queues.inbound, jobId));

    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await jobTotal(h.queues.inbound)).toBe(1);
    expect(await h.queues.inbound.getJobState(jobId)).toBe("waiting");
  });

  it("a job removed on purpose (job.remove(), as the reconciler settles failed jobs) takes its claim with it: a redelivery is queued again", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "removed by hand" });
    const jobId = inboundJobId(wamids[0]!);
    expect((await h.deliver(body)).statusCode).toBe(200);
    await (await h.queues.inbound.getJob(jobId))?.remove();
    expect(await h.queues.inbound.getDeduplicationJobId(jobId)).toBeNull();

    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await h.queues.inbound.getJobState(jobId)).toBe("waiting");
    expect(await h.queues.inbound.getDeduplicationJobId(jobId)).toBe(jobId);
  });

  it("five concurrent deliveries of one message give one job and five 200s, counted as one enqueued and four duplicates", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "five at once" });
    const responses = await Promise.all(Array.from({ length: 5 }, () => h.deliver(body)));
    expect(responses.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect(await jobTotal(h.queues.inbound)).toBe(1);
    expect(await h.queues.inbound.getDeduplicationJobId(inboundJobId(wamids[0]!))).toBe(inboundJobId(wamids[0]!));
    expect(await metricValues(h)).toMatchObject({ "message/enqueued": 1, "message/duplicate": 4 });
  });

  it("a batch with one message already queued enqueues the others and counts that one as a duplicate", async () => {
    const h = await webOnly();
    const seen = textMessage({ text: "queued before" });
    const fresh = textMessage({ text: "never seen" });
    expect((await h.deliver(metaWire(envelope([messagesChange([seen])])))).statusCode).toBe(200);
    expect((await h.deliver(metaWire(envelope([messagesChange([seen, fresh])])))).statusCode).toBe(200);
    expect(await jobTotal(h.queues.inbound)).toBe(2);
    expect(await metricValues(h)).toMatchObject({ "message/enqueued": 2, "message/duplicate": 1 });
  });
});
