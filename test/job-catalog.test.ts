import { createRequire } from "node:module";
import { Queue } from "bullmq";
import { afterAll, describe, expect, it } from "vitest";
import { BULLMQ_VERSION, connectionOf, deduplicationKey, issueAdd } from "../src/queue/bullmq-internals.ts";
import { JOB_NAMES, JOBS } from "../src/queue/catalog.ts";
import { closeQueues, createQueues } from "../src/queue/queues.ts";
import { createFailFastRedis } from "../src/queue/redis.ts";
import { deleteKeys, TEST_REDIS_URL, waitForReady } from "./support/harness.ts";

/**
 * The job catalog is the one definition of each job (src/queue/catalog.ts), and the BullMQ
 * internals the webhook's add uses are held here to the installed bullmq, so an upgrade that
 * changes them fails in this file rather than in a webhook.
 */

const redis = createFailFastRedis(TEST_REDIS_URL);
const prefix = `{t-catalog-${process.pid}}`;
afterAll(async () => {
  await deleteKeys(redis, prefix);
  await redis.quit();
});

const camel = (name: string) => name.replace(/-(\w)/g, (_m, c: string) => c.toUpperCase());

describe("the job catalog", () => {
  it("names, for each job, the module whose processor runs it", async () => {
    for (const name of JOB_NAMES) {
      const module = (await import(`../${JOBS[name].processor}`)) as Record<string, unknown>;
      expect(typeof module[`${camel(name)}Processor`], `${JOBS[name].processor} exports ${camel(name)}Processor`).toBe("function");
    }
  });

  it("makes every queue with its definition's attempts, backoff and retention", async () => {
    await waitForReady(redis);
    const queues = createQueues(redis, { prefix, attempts: 7 });
    try {
      expect(Object.keys(queues).sort()).toEqual([...JOB_NAMES].sort());
      expect(queues.inbound.defaultJobOptions).toMatchObject({ attempts: 7, backoff: { type: "policy" }, ...JOBS.inbound.retention });
      expect(queues.reconcile.defaultJobOptions).toMatchObject({ attempts: 1, ...JOBS.reconcile.retention });
      expect(queues.reconcile.defaultJobOptions.backoff).toBeUndefined();
    } finally {
      await closeQueues(queues);
    }
  });
});

describe("BullMQ's internals the webhook's add relies on (src/queue/bullmq-internals.ts)", () => {
  it("are read from the bullmq that is installed", () => {
    const installed = (createRequire(import.meta.url)("bullmq/package.json") as { version: string }).version;
    expect(installed).toBe(BULLMQ_VERSION);
  });

  it("add a job as Queue.add does, its deduplication key where deduplicationKey says, and a second add of it does nothing", async () => {
    await waitForReady(redis);
    const queue = new Queue("contract", { connection: redis, prefix });
    try {
      const connection = await connectionOf(queue);
      const add = () => issueAdd(queue, connection, "contract", { n: 1 }, { jobId: "job-1", deduplication: { id: "job-1", ttl: 60_000 } });
      await add();
      expect((await queue.getJob("job-1"))?.data).toEqual({ n: 1 });
      expect(await queue.getDeduplicationJobId("job-1")).toBe("job-1");
      const ttl = await redis.pttl(deduplicationKey(queue, "job-1"));
      expect(ttl).toBeGreaterThan(0);
      expect(ttl).toBeLessThanOrEqual(60_000);
      await add();
      expect(await queue.getJobCountByTypes("waiting")).toBe(1);
    } finally {
      await queue.close();
    }
  });
});
