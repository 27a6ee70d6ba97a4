import { type Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { systemClock } from "../src/clock.ts";
import { eraseCustomer } from "../src/customer-data/erase.ts";
import { DeadLetterDesk } from "../src/dlq/dead-letters.ts";
import { CsatAsks } from "../src/jobs/csat.ts";
import { reconcile } from "../src/jobs/reconcile.ts";
import { idempotencyKeys, StoredAnswers } from "../src/queue/stored-answers.ts";
import { eraseContact } from "../src/state/erasure.ts";
import { everyKey, everyRow } from "./support/every-row.ts";
import { eventually, type Harness, TEST_REDIS_URL } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 6's last line: the reconciler. Whatever left work where no one looks (a job BullMQ gave
 * up on, a job Redis lost), it is found, driven again once, then dead-lettered, and logged.
 * The faults are injected into the real queues: a worker that crashes on every job it takes
 * (to BullMQ, a stalled or crashing worker looks exactly like this), and jobs removed from
 * Redis behind the system's back.
 */

const harness = harnessPerTest();
let rogues: { worker: Worker; connection: Redis }[] = [];
afterEach(async () => {
  await Promise.all(
    rogues.map(async (r) => {
      await r.worker.close(true);
      r.connection.disconnect();
    }),
  );
  rogues = [];
});

/** A worker on the system's queue that crashes on every job, spending all its attempts. */
function crashingWorker(h: Harness, queue: Queue): void {
  const connection = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  const worker = new Worker(
    queue.name,
    async (): Promise<unknown> => {
      throw new Error("the worker crashed mid-job");
    },
    { connection, prefix: h.prefix, settings: { backoffStrategy: () => 0 } },
  );
  rogues.push({ worker, connection });
}

async function stopCrashingWorkers(): Promise<void> {
  await Promise.all(rogues.map((r) => r.worker.close()));
}

function capturedLogs() {
  const lines: { event?: string }[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as { event?: string }) });
  return { logger, events: () => lines.map((l) => l.event) };
}

const failedCount = async (queue: Queue) => (await queue.getJobCounts("failed")).failed ?? 0;
const SWEEP_NOW = { RECONCILE_AFTER_MS: "0", RECONCILE_INTERVAL_MS: "3600000", REPLY_DEBOUNCE_MS: "0" };

/** What a sweep run by the test itself needs: the system's own parts, every item overdue. */
const sweepDeps = (h: Harness) => ({
  db: h.db,
  queues: h.queues,
  deadLetters: new DeadLetterDesk({ db: h.db, queues: h.queues, metrics: h.metrics, clock: systemClock }, ""),
  csat: new CsatAsks({ db: h.db, queues: h.queues, logger: pino({ level: "silent" }), clock: systemClock }, undefined),
  redis: h.redis,
  storedAnswers: new StoredAnswers(h.redis, h.prefix),
  prefix: h.prefix,
  logger: pino({ level: "silent" }),
  clock: systemClock,
});
/** A sweep of the test's own, acting on work of any age. */
const sweep = (deps: ReturnType<typeof sweepDeps>) => reconcile(deps, { afterMs: 0, queuePrefix: deps.prefix });

describe("the reconciler", () => {
  it("drives a reply job BullMQ gave up on again at start-up: the message is answered once, and the failed set is empty", async () => {
    const logs = capturedLogs();
    const h = await harness({ env: SWEEP_NOW, logger: logs.logger });
    await h.queues.reply.pause();
    const { body, wamids } = textWebhook({ text: "are you open today?" });
    await h.deliver(body);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), "the message to be stored");
    await h.stopWorkers();

    crashingWorker(h, h.queues.reply);
    await h.queues.reply.resume();
    await eventually(async () => (await failedCount(h.queues.reply)) === 1, "the reply job to fail for good");
    await stopCrashingWorkers();

    h.startWorkers(); // a worker starts: its first sweep finds the failed job
    await eventually(() => h.graph.sends.length === 1, "the answer", 15_000);
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
    expect(h.claude.requests).toHaveLength(1);
    expect(await failedCount(h.queues.reply)).toBe(0);
    expect(logs.events()).toContain("reconcile.failed_job_redriven");
  });

  it("finds stored messages whose reply job Redis lost: driven again once; lost again, they become one dead letter", async () => {
    const h = await harness({ env: SWEEP_NOW });
    // The worker's start-up sweep (RECONCILE_AFTER_MS 0) must not run while the message is
    // stored but its reply not yet scheduled: it would take the one redrive this test counts.
    await eventually(async () => {
      const jobs = await h.queues.reconcile.getJobCounts("completed", "waiting", "active");
      return (jobs.completed ?? 0) > 0 && (jobs.waiting ?? 0) + (jobs.active ?? 0) === 0;
    }, "the start-up sweep to be done");
    await h.queues.reply.pause();
    const { body, wamids } = textWebhook({ text: "hello?" });
    await h.deliver(body);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), "the message to be stored");
    await h.stopWorkers();
    const deps = sweepDeps(h);

    await h.queues.reply.drain(true); // Redis lost the job (a failover without AOF, say)
    expect(await sweep(deps)).toMatchObject({ redriven: 1, deadLettered: 0 });
    expect(await h.queues.reply.getJobCounts("waiting")).toMatchObject({ waiting: 1 }); // the queue is paused: it waits

    await h.queues.reply.drain(true); // and lost it again
    expect(await sweep(deps)).toMatchObject({ redriven: 0, deadLettered: 1 });
    const letter = await h.db.deadLetter.findFirstOrThrow({ include: { reply: { include: { messages: true } } } });
    expect(letter).toMatchObject({ state: "open", source: "internal", code: "stuck" });
    expect(letter.reply!.messages.map((m) => m.wamid)).toEqual(wamids);

    expect(await sweep(deps)).toEqual({ redriven: 0, deadLettered: 0, failedJobs: 0, erasesFinished: 0, skipped: 0 }); // once
  });

  it("drives a failed inbound job again once; failing again, its message is kept as a dead letter for staff", async () => {
    const h = await harness({ workers: 0, env: SWEEP_NOW });
    const deps = sweepDeps(h);
    crashingWorker(h, h.queues.inbound);
    const { body, wamids } = textWebhook({ text: "I want to cancel my order" });
    await h.deliver(body);
    await eventually(async () => (await failedCount(h.queues.inbound)) === 1, "the inbound job to fail for good");

    expect(await sweep(deps)).toMatchObject({ failedJobs: 1, deadLettered: 0 });
    await eventually(async () => (await failedCount(h.queues.inbound)) === 1, "the job, driven again, to fail again");
    expect(await sweep(deps)).toMatchObject({ failedJobs: 1, deadLettered: 1 });

    const message = await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: wamids[0] }, include: { reply: { include: { deadLetters: true } } } });
    expect(message.text).toBe("I want to cancel my order");
    expect(message.reply?.deadLetters).toMatchObject([{ state: "open", code: "inbound_failed" }]);
    expect(await failedCount(h.queues.inbound)).toBe(0);
  });

  it("one item that cannot be settled is logged and skipped: the sweep goes on to the next failed job and to stuck conversations", async () => {
    const logs = capturedLogs();
    const h = await harness({ env: SWEEP_NOW, logger: logs.logger });
    await eventually(async () => {
      const jobs = await h.queues.reconcile.getJobCounts("completed", "waiting", "active");
      return (jobs.completed ?? 0) > 0 && (jobs.waiting ?? 0) + (jobs.active ?? 0) === 0;
    }, "the start-up sweep to be done");
    // A conversation whose reply job Redis lost: stuck work for the sweep's second half.
    await h.queues.reply.pause();
    const stuck = textWebhook({ text: "is anyone there?", from: "34611111111" });
    await h.deliver(stuck.body);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: stuck.wamids[0] } }), "the stuck message to be stored");
    await h.stopWorkers();
    await h.queues.reply.drain(true);

    // A message Postgres will refuse to store (here a trigger, as a constraint or a bug would), whose job failed twice over.
    const poison = textWebhook({ text: "this one cannot be stored", from: "34622222222" });
    await h.db.$executeRawUnsafe(`
      CREATE FUNCTION refuse_poison() RETURNS trigger AS $$ BEGIN
        IF NEW.wamid = '${poison.wamids[0]}' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW;
      END $$ LANGUAGE plpgsql`);
    await h.db.$executeRawUnsafe("CREATE TRIGGER refuse_poison BEFORE INSERT ON inbound_messages FOR EACH ROW EXECUTE FUNCTION refuse_poison()");
    crashingWorker(h, h.queues.inbound);
    await h.deliver(poison.body);
    await eventually(async () => (await failedCount(h.queues.inbound)) === 1, "the poison's job to fail for good");
    const deps = { ...sweepDeps(h), logger: logs.logger };
    expect(await sweep(deps)).toMatchObject({ failedJobs: 1, skipped: 0, redriven: 1 }); // driven again once, and the stuck conversation
    await eventually(async () => (await failedCount(h.queues.inbound)) === 1, "the poison's job, driven again, to fail again");
    await stopCrashingWorkers();
    await h.queues.reply.drain(true); // the stuck conversation's new job lost again

    expect(await sweep(deps)).toMatchObject({ skipped: 1, deadLettered: 1 });
    expect(logs.events()).toContain("reconcile.item_failed");
    const letter = await h.db.deadLetter.findFirstOrThrow({ include: { reply: { include: { messages: true } } } });
    expect(letter.reply!.messages.map((m) => m.wamid)).toEqual(stuck.wamids);
    expect(await failedCount(h.queues.inbound)).toBe(1); // kept where the next sweep finds it again
  });
  it("finishes an erase whose process stopped after its commit: the jobs and stored answers still holding the customer go, and its audit row forgets them", async () => {
    const h = await harness({ env: SWEEP_NOW });
    const dana = { phone: "14155550178", name: "Dana Reyes" };
    h.claude.answer({ text: "We open at nine." });
    await h.deliver(textWebhook({ text: "When do you open?", from: dana.phone, name: dana.name }).body);
    await eventually(() => h.graph.sends.length === 1, "the answer");
    await untilQuiet(h);
    await h.stopWorkers();
    // An answer the staff API kept for an Idempotency-Key, quoting them.
    await h.redis.set(`${idempotencyKeys(h.prefix)}api:k1`, JSON.stringify({ state: "done", status: 200, body: `{"to":"${dana.phone}"}` }));
    const contact = await h.db.contact.findUniqueOrThrow({ where: { waId: dana.phone } });

    // The erase commits; its process stops before it cleans Redis.
    await eraseContact(h.db, contact.id, { actor: "api", hashOf: () => "hash" }, new Date());
    expect(await everyRow(h)).not.toContain(dana.name);
    expect(await everyKey(h)).toContain(dana.phone);

    const deps = sweepDeps(h);
    expect(await sweep(deps)).toMatchObject({ erasesFinished: 1, skipped: 0 });
    const keys = await everyKey(h);
    for (const word of [dana.phone, dana.name, "When do you open?"]) expect(keys, `a key still holds "${word}"`).not.toContain(word);
    expect(await everyRow(h)).not.toContain(dana.phone);
    expect(await h.db.dataRequest.findFirstOrThrow({ where: { kind: "erase" } })).toMatchObject({ contactId: contact.id, redisNeedles: [] });
    expect(await sweep(deps)).toMatchObject({ erasesFinished: 0 }); // once
  });
  it("an erase that meets a running job of the customer's says its clean-up is pending; a sweep removes that job once it has ended", async () => {
    const h = await harness({ env: SWEEP_NOW });
    const finn = { phone: "13125550164", name: "Finn Walsh" };
    h.claude.answer({ text: "Your parcel left today, Finn." });
    h.claude.latencyMs = 1500;
    try {
      await h.deliver(textWebhook({ text: "Where is my parcel?", from: finn.phone, name: finn.name }).body);
      await eventually(() => h.claude.requests.length === 1, "Claude asked, the reply job running");
      const contact = await h.db.contact.findUniqueOrThrow({ where: { waId: finn.phone }, include: { conversations: true } });
      const erased = await eraseCustomer(
        {
          db: h.db,
          queues: h.queues,
          storedAnswers: new StoredAnswers(h.redis, h.prefix),
          clock: systemClock,
          logger: pino({ level: "silent" }),
          identityKey: "k",
        },
        contact.id,
        "api",
      );
      expect(erased).toMatchObject({ erased: { contacts: 1 }, redis: "pending" });
      await untilQuiet(h);
      await h.stopWorkers();
      expect(h.graph.sends).toEqual([]); // fenced off: it sent nothing
      const conversationId = contact.conversations[0]!.id;
      expect(await everyKey(h)).toContain(conversationId); // the run that ended, kept with its data

      expect(await sweep(sweepDeps(h))).toMatchObject({ erasesFinished: 1, skipped: 0 });
      expect(await everyKey(h)).not.toContain(conversationId);
      expect(await everyRow(h)).not.toContain(finn.phone);
    } finally {
      h.claude.latencyMs = 0;
    }
  });
});
