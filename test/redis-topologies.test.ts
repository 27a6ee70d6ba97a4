import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../bench/stats.ts";
import { COMMON_ENV } from "../chaos/scenarios.ts";
import { type Settled, settle } from "../chaos/settle.ts";
import { ChaosSystem, QUEUE_PREFIX } from "../chaos/system.ts";
import { inboundJobId } from "../src/queue/catalog.ts";
import { eventually } from "./support/harness.ts";
import { freePorts } from "./support/ports.ts";
import { sampleValue } from "./support/prometheus-text.ts";
import { type ReplicatedRedis, startReplicatedRedis } from "./support/redis-topologies.ts";
import { WebRole } from "./support/web-role.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Past one machine (issue 11): the whole system on a Redis Cluster (3 masters, a replica
 * each) and on a master watched by three Sentinels, each from Debian's redis-server on
 * loopback, with 2 web and 2 worker processes. Meta delivers every message several times while
 * the master holding the queues is SIGKILLed. A supervisor starts it again a few seconds later,
 * and it rejoins as a replica of the server promoted in its place; or it is lost for good, and
 * the promoted server has no replica at all.
 */

const MESSAGES = 100;
const DELIVERIES = 4;
/** How long the lost server stays down after its replica took over, as a supervisor's restart might take. */
const DOWN_AFTER_FAILOVER_MS = 3000;
/** The master lost for good: half the customers write before the failover (the kill mid-way), half after it. */
const LOST_FOR_GOOD_MESSAGES = 60;
/** A bound, not a measurement: after the failover, every web process takes webhooks again within this. */
const ACCEPTING_AGAIN_WITHIN_MS = 15_000;
/** /metrics on the web processes' own port. */
const METRICS_TOKEN = "topology-metrics-token";

let logRoot: string;
beforeAll(async () => {
  logRoot = await mkdtemp(join(tmpdir(), "redis-topologies-"));
});
let failed = false;
afterEach((context) => {
  if (context.task.result?.state === "fail") failed = true;
});
afterAll(async () => {
  // The processes' logs are what explains a failure: kept then (the message names them), or when asked.
  if (failed || process.env.KEEP_TEST_LOGS) console.log(`redis-topologies: the processes' logs are in ${logRoot}`);
  else await rm(logRoot, { recursive: true, force: true });
});

describe.each(["cluster", "sentinel"] as const)("on Redis %s", (topology) => {
  /** The storm's system: 2 web and 2 worker processes on `topology`. */
  const startSystem = (slug: string, seed: number) =>
    ChaosSystem.start({
      slug,
      logRoot,
      workers: 2,
      webs: 2,
      redis: topology,
      // Webhooks are refused from the kill until the failover (seconds here, more on a loaded
      // machine; README): status webhooks too. A send that times out on a loaded machine is maybe-sent, and one that
      // waited less than that for its status would be sent again (law 5), so these wait longer.
      env: { ...COMMON_ENV, GRAPH_TIMEOUT_MS: "5000", SEND_RECONCILE_WAIT_MS: "30000", METRICS_TOKEN },
      claudeLatencyMs: 200,
      duplicateRate: 0,
      seed,
    });

  it(`${MESSAGES} messages, each delivered ${DELIVERIES} times to 2 web processes, the queues' master SIGKILLed mid-storm: ` +
    "every message answered once with one Claude call, and none that was answered 200 is lost", async () => {
    const system = await startSystem(topology, 11);
    try {
      const redis = system.replicated!;
      const lost = await redis.masterOf(QUEUE_PREFIX);
      let killedAt = 0;
      for (let i = 0; i < MESSAGES; i++) {
        system.customers.write(i, undefined, DELIVERIES);
        if (i === MESSAGES / 2) {
          await lost.kill();
          killedAt = Date.now();
        }
        await sleep(30);
      }
      const promoted = await redis.failedOver(QUEUE_PREFIX, lost);
      const failedOverAt = Date.now();
      const probed = await acceptingAgain(system, failedOverAt + ACCEPTING_AGAIN_WITHIN_MS);
      const acceptingAfterMs = Date.now() - failedOverAt;
      await sleep(DOWN_AFTER_FAILOVER_MS - acceptingAfterMs);
      await lost.start();

      const { settled, tally, failedJobs, leftJobs } = await settle(system, Date.now() + 90_000, { shortMs: 2000, longMs: 12_000 });
      const measured =
        `${topology}, master back ${DOWN_AFTER_FAILOVER_MS} ms after the failover: failed over ${failedOverAt - killedAt} ms after the kill ` +
        `(${lost.port} -> ${promoted.port}), every web process answering 200 ${acceptingAfterMs} ms after it (probes refused: ` +
        `${JSON.stringify(probed.refused)}); deliveries ${JSON.stringify(system.deliverer.stats)}; unreplicated writes ${await unreplicatedWrites(system)}`;
      console.log(measured);
      const context =
        `${measured}; tally ${JSON.stringify(tally)}; failed jobs ${JSON.stringify(failedJobs)}; jobs left ${JSON.stringify(leftJobs)}; ` +
        `warnings ${JSON.stringify(await warningsIn(system.logDir))}; logs ${system.logDir}`;
      expectEveryMessageAnsweredOnce(system, { settled, tally, failedJobs }, MESSAGES, context);
      if (topology === "cluster") await expectEveryKeyInTheQueueSlot(redis);
    } finally {
      await system.close();
    }
  }, 240_000);

  it(`${LOST_FOR_GOOD_MESSAGES} messages, each delivered twice, the queues' master SIGKILLed mid-storm and lost for good (its promoted ` +
    "replica has none): every web process answers 200 again within seconds of the failover, counting the writes as unreplicated, " +
    "and every message is answered once", async () => {
    const system = await startSystem(`${topology}-lost`, 12);
    try {
      const redis = system.replicated!;
      const lost = await redis.masterOf(QUEUE_PREFIX);
      const before = LOST_FOR_GOOD_MESSAGES / 2;
      let killedAt = 0;
      for (let i = 0; i < before; i++) {
        system.customers.write(i, undefined, 2);
        if (i === before / 2) {
          await lost.kill();
          killedAt = Date.now();
        }
        await sleep(30);
      }
      const promoted = await redis.failedOver(QUEUE_PREFIX, lost);
      const failedOverAt = Date.now();
      expect(await promoted.connectedReplicas()).toBe(0);
      const probed = await acceptingAgain(system, failedOverAt + ACCEPTING_AGAIN_WITHIN_MS);
      const acceptingAfterMs = Date.now() - failedOverAt;
      for (let i = before; i < LOST_FOR_GOOD_MESSAGES; i++) {
        system.customers.write(i, undefined, 2);
        await sleep(30);
      }

      const { settled, tally, failedJobs, leftJobs } = await settle(system, Date.now() + 90_000, { shortMs: 2000, longMs: 12_000 });
      const unreplicated = await unreplicatedWrites(system);
      const measured =
        `${topology}, master lost for good: failed over ${failedOverAt - killedAt} ms after the kill (${lost.port} -> ${promoted.port}), ` +
        `every web process answering 200 ${acceptingAfterMs} ms after it (probes refused: ${JSON.stringify(probed.refused)}); ` +
        `deliveries ${JSON.stringify(system.deliverer.stats)}; unreplicated writes ${unreplicated}`;
      console.log(measured);
      const context =
        `${measured}; tally ${JSON.stringify(tally)}; failed jobs ${JSON.stringify(failedJobs)}; jobs left ${JSON.stringify(leftJobs)}; ` +
        `warnings ${JSON.stringify(await warningsIn(system.logDir))}; logs ${system.logDir}`;
      expectEveryMessageAnsweredOnce(system, { settled, tally, failedJobs }, LOST_FOR_GOOD_MESSAGES, context);
      expect(unreplicated, context).toBeGreaterThan(0);
      // No replica ever came back: every one of those 200s rested on the promoted master alone.
      expect(await promoted.connectedReplicas(), context).toBe(0);
    } finally {
      await system.close();
    }
  }, 240_000);

  it("a webhook is answered 200 only once a replica holds its job: with the replica frozen it is 503, and 200 when the replica thaws", async () => {
    const redis = await startReplicatedRedis(topology);
    // The longest wait there is: a replica that is merely slow on a loaded machine still acknowledges in time.
    const web = await WebRole.start({ ...redis.env, REDIS_WAIT_TIMEOUT_MS: "1500" });
    try {
      await eventually(() => web.ready, "the web role to reach Redis", 15_000);
      await waitsForTheReplica(web);
      const { wait: waiting } = await web.queues.inbound.getJobCounts("wait");

      const replica = await redis.replicaOf(await redis.masterOf(web.prefix));
      replica.signal("SIGSTOP");
      const { body, wamids } = textWebhook({ text: "while the replica is frozen" });
      try {
        // The master took the job, but a master lost now would take it along: not safe yet.
        // (Frozen for long, the replica would be counted as gone: a Cluster flags it failed
        // after cluster-node-timeout, and the master would then take webhooks on its own.)
        expect((await web.deliver(body)).statusCode).toBe(503);
        expect(await web.queues.inbound.getJob(inboundJobId(wamids[0]!))).toBeDefined();
      } finally {
        replica.signal("SIGCONT");
      }
      // Meta's redelivery finds the job queued (law 3): 200, and still one job.
      await eventually(async () => (await web.deliver(body)).statusCode === 200, "the redelivery to be answered 200", 15_000);
      expect(await web.queues.inbound.getJobCounts("wait")).toEqual({ wait: waiting! + 1 });
    } finally {
      await web.close();
      await redis.destroy();
    }
  }, 60_000);

  it("the queues' master lost for good: a webhook is answered 200 again once its promoted replica serves, counted as unreplicated; " +
    "with REDIS_WAIT_STRICT=true the same webhook keeps being answered 503", async () => {
    const redis = await startReplicatedRedis(topology);
    const web = await WebRole.start(redis.env);
    const strict = await WebRole.start({ ...redis.env, REDIS_WAIT_STRICT: "true" }, web.prefix);
    try {
      await eventually(() => web.ready && strict.ready, "the web roles to reach Redis", 15_000);
      await waitsForTheReplica(web);
      expect((await strict.deliver(textWebhook({ text: "copied?" }).body)).statusCode).toBe(200);

      const lost = await redis.masterOf(web.prefix);
      await lost.kill();
      const promoted = await redis.failedOver(web.prefix, lost);
      expect(await promoted.connectedReplicas()).toBe(0);
      await eventually(
        async () => (await web.deliver(textWebhook({ text: "still there?" }).body)).statusCode === 200,
        "a webhook answered 200 by the promoted master alone",
        ACCEPTING_AGAIN_WITHIN_MS,
      );
      expect(await web.unreplicatedWrites()).toBeGreaterThan(0);
      expect(web.events("webhook.unreplicated")).toHaveLength(1);

      // The operator's choice: nothing can copy the job, so Meta keeps the message.
      const { body, wamids } = textWebhook({ text: "refused?" });
      for (let i = 0; i < 5; i++) {
        expect((await strict.deliver(body)).statusCode).toBe(503);
        await sleep(500);
      }
      // It reached the promoted master (its add is there): it is the wait that refuses, not a lost connection.
      expect(await strict.queues.inbound.getJob(inboundJobId(wamids[0]!))).toBeDefined();
      expect(await strict.unreplicatedWrites()).toBe(0);
    } finally {
      await Promise.allSettled([web.close(), strict.close()]);
      await redis.destroy();
    }
  }, 90_000);

  it("with no Redis node reachable, the webhook answers 503 at once instead of waiting for a connection", async () => {
    const dead = (await freePorts(2)).map((port) => `127.0.0.1:${port}`).join(",");
    const web = await WebRole.start(topology === "cluster" ? { REDIS_CLUSTER_NODES: dead } : { REDIS_SENTINELS: dead, REDIS_SENTINEL_NAME: "wa-master" });
    try {
      // A webhook that waited for Redis would hang until the test's timeout, not answer.
      expect((await web.deliver(textWebhook({ text: "is anyone there?" }).body)).statusCode).toBe(503);
    } finally {
      await web.close();
    }
  });
});

/**
 * A fresh message's delivery answered 200 and not counted as unreplicated: the web role knows
 * its master's replica. (A new cluster lists a replica only once it has copied something.)
 */
async function waitsForTheReplica(web: WebRole): Promise<void> {
  await eventually(
    async () => {
      const before = await web.unreplicatedWrites();
      const answered = await web.deliver(textWebhook({ text: "is it copied?" }).body);
      return answered.statusCode === 200 && (await web.unreplicatedWrites()) === before;
    },
    "a delivery answered 200 once a replica holds its job",
    15_000,
  );
}

/**
 * After a failover: status webhooks (no customer, no Claude call) posted once to every web
 * process every 200 ms, until one round is answered 200 by all of them, or `deadline`.
 */
async function acceptingAgain(system: ChaosSystem, deadline: number): Promise<{ refused: Record<string, number> }> {
  const refused: Record<string, number> = {};
  for (let probe = 0; ; probe++) {
    const statuses = await Promise.all(
      system.webhookUrls.map((url, i) => system.postOnce(url, statusWebhook({ id: `wamid.PROBE${probe}x${i}`, status: "delivered" }))),
    );
    for (const status of statuses.filter((s) => s !== 200)) refused[status] = (refused[status] ?? 0) + 1;
    if (statuses.every((status) => status === 200)) return { refused };
    if (Date.now() > deadline) throw new Error(`the web processes still refuse webhooks after the failover: ${JSON.stringify(refused)}`);
    await sleep(200);
  }
}

/** wa_redis_unreplicated_writes_total, summed over the web processes (scraped on their port with the token). */
async function unreplicatedWrites(system: ChaosSystem): Promise<number> {
  let sum = 0;
  for (const url of system.webhookUrls) {
    const response = await fetch(url.replace(/\/webhook$/, "/metrics"), { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    sum += sampleValue(await response.text(), "wa_redis_unreplicated_writes_total") ?? Number.NaN;
  }
  return sum;
}

/** Law 2 and the one-answer laws after a storm: every message answered once, with one Claude call, none lost, no process lost. */
function expectEveryMessageAnsweredOnce(
  system: ChaosSystem,
  { settled, tally, failedJobs }: Pick<Settled, "settled" | "tally" | "failedJobs">,
  messages: number,
  context: string,
): void {
  expect(settled, context).toBe(true);
  expect(tally.sentIn, context).toBe(messages);
  // Meta stops delivering a message at its first 200: a 200 for a job the lost master
  // took to its grave would leave that message unanswered for good.
  expect(system.deliverer.stats.abandoned, context).toBe(0);
  expect({ lost: tally.lost, answered: tally.answered, deadLettered: tally.deadLettered }, context).toEqual({
    lost: 0,
    answered: messages,
    deadLettered: 0,
  });
  expect(tally.claudeCalls, context).toBe(messages);
  expect(tally.sendsTaken, context).toBe(tally.partsTaken);
  expect(
    Object.values(failedJobs).every((n) => n === 0),
    context,
  ).toBe(true);
  // The outage is paid in refusals Meta redelivers, never in a process lost.
  expect(
    Object.keys(system.deliverer.stats.refused).filter((status) => status !== "503"),
    context,
  ).toEqual([]);
  expect(
    system.processes.filter((p) => !p.running && !p.killedOnPurpose).map((p) => p.name),
    context,
  ).toEqual([]);
}

/**
 * Each process's warnings and errors, counted by event and message (numbers masked): CI keeps
 * no log files, so a failure's message carries what the processes complained about.
 */
async function warningsIn(dir: string): Promise<Record<string, Record<string, number>>> {
  const digest: Record<string, Record<string, number>> = {};
  for (const file of (await readdir(dir)).filter((name) => name.endsWith(".log"))) {
    const counts: Record<string, number> = {};
    for (const line of (await readFile(join(dir, file), "utf8")).split("\n")) {
      const entry = logEntry(line);
      if (!entry || (entry.level ?? 0) < 40) continue;
      const key = `${entry.event}: ${(entry.err?.message ?? "").replace(/\d+/g, "N").slice(0, 80)}`;
      counts[key] = (counts[key] ?? 0) + 1;
    }
    digest[file] = Object.fromEntries(
      Object.entries(counts)
        .sort(([, a], [, b]) => b - a)
        .slice(0, 6),
    );
  }
  return digest;
}

/** A pino line, or nothing for any other output (a stack trace, a line the process was still writing). */
function logEntry(line: string): { level?: number; event?: string; err?: { message?: string } } | undefined {
  try {
    return line.startsWith("{") ? JSON.parse(line) : undefined;
  } catch {
    return undefined;
  }
}

/** Law 3's and BullMQ's scripts are multi-key: every key the system wrote must hash to the queue prefix's one slot. */
async function expectEveryKeyInTheQueueSlot(redis: ReplicatedRedis): Promise<void> {
  const stray: string[] = [];
  let seen = 0;
  for (const server of redis.servers.filter((s) => s.running)) {
    for (const key of await server.keys()) {
      seen++;
      if (!key.startsWith(QUEUE_PREFIX)) stray.push(`${server.port}: ${key}`);
    }
  }
  expect(seen).toBeGreaterThan(0);
  expect(stray).toEqual([]);
}
