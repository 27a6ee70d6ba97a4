import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { sleep } from "../bench/stats.ts";
import { systemClock } from "../src/clock.ts";
import { inboundJobId } from "../src/queue/catalog.ts";
import { createFailFastRedis, type RedisClient } from "../src/queue/redis.ts";
import { type ReplicaCount, watchReplicas } from "../src/queue/replicas.ts";
import { loadSettings } from "../src/settings.ts";
import { eventually, testEnv } from "./support/harness.ts";
import { PrivateRedis } from "./support/private-redis.ts";
import { PrivateRedisCluster } from "./support/redis-topologies.ts";
import { WebRole } from "./support/web-role.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * A webhook waits for the replicas the queues' master has (law 2), and no more: a master left
 * without one (a failover promoted its only replica) takes webhooks on its own, counted and
 * logged, unless the operator chose to refuse them (REDIS_WAIT_STRICT). How many there are is
 * read from real redis-servers: the master's own ROLE, or a Cluster's slot table.
 */

const started: { close(): unknown }[] = [];
const servers: PrivateRedis[] = [];
afterEach(async () => {
  for (const thing of started.splice(0)) await thing.close();
});
afterAll(async () => {
  await Promise.allSettled(servers.map((s) => s.destroy()));
});

async function redisServer(options: { replicaOf?: number } = {}): Promise<PrivateRedis> {
  const server = await PrivateRedis.start(options);
  servers.push(server);
  return server;
}

async function webRole(env: Record<string, string>, prefix?: string): Promise<WebRole> {
  const web = await WebRole.start(env, prefix);
  started.push(web);
  await eventually(() => web.ready, "the web role to reach Redis");
  return web;
}

function watched(client: RedisClient): ReplicaCount {
  const count = watchReplicas(client, systemClock);
  started.push({
    close: () => {
      count.close();
      client.disconnect();
    },
  });
  return count;
}

/** A fresh message's delivery, answered 200 within `ms`: the first may meet a reading still on its way (then WAIT, short, 503). */
async function acceptedWithin(web: WebRole, ms: number): Promise<void> {
  await eventually(async () => (await web.deliver(textWebhook({ text: "anyone there?" }).body)).statusCode === 200, "a delivery answered 200", ms);
}

/** Whether the master says it has a replica in sync (so a WAIT there can be acknowledged). */
async function replicated(master: PrivateRedis): Promise<boolean> {
  const client = createFailFastRedis(master.url);
  try {
    await eventually(() => client.status === "ready", "a connection to the master");
    return /slave0:.*state=online/.test(await client.info("replication"));
  } finally {
    client.disconnect();
  }
}

describe("a master with no replica, REDIS_WAIT_REPLICAS=1", () => {
  it("a webhook is answered 200 without waiting, each item counted as unreplicated, and said in one warning, not one per delivery", async () => {
    const master = await redisServer();
    const web = await webRole({ REDIS_URL: master.url, REDIS_WAIT_REPLICAS: "1" });
    await acceptedWithin(web, 5000);
    const before = await web.unreplicatedWrites();
    const { body, wamids } = textWebhook({ text: "first" }, { text: "second" });
    const answer = await web.deliver(body);
    expect(answer.statusCode).toBe(200);
    expect(await web.unreplicatedWrites()).toBe(before + 2);
    for (const wamid of wamids) expect(await web.queues.inbound.getJob(inboundJobId(wamid))).toBeDefined();
    for (let i = 0; i < 3; i++) expect((await web.deliver(textWebhook({ text: `more ${i}` }).body)).statusCode).toBe(200);
    expect(await web.unreplicatedWrites()).toBe(before + 5);
    expect(web.events("webhook.unreplicated")).toHaveLength(1);
  });

  it("with REDIS_WAIT_STRICT=true it is answered 503 until a replica holds its job, which the redelivery finds queued", async () => {
    const master = await redisServer();
    const web = await webRole({ REDIS_URL: master.url, REDIS_WAIT_REPLICAS: "1", REDIS_WAIT_STRICT: "true" });
    const { body, wamids } = textWebhook({ text: "is this kept?" });
    expect((await web.deliver(body)).statusCode).toBe(503);
    expect((await web.deliver(body)).statusCode).toBe(503);
    expect(await web.queues.inbound.getJob(inboundJobId(wamids[0]!))).toBeDefined();
    expect(await web.unreplicatedWrites()).toBe(0);

    await redisServer({ replicaOf: master.port });
    await eventually(() => replicated(master), "the new replica to sync", 15_000);
    await eventually(async () => (await web.deliver(body)).statusCode === 200, "the redelivery to be answered 200", 10_000);
    expect(await web.queues.inbound.getJobCounts("wait")).toEqual({ wait: 1 });
    expect(await web.unreplicatedWrites()).toBe(0);
  });
});

describe("a master with a replica (ROLE, read every few seconds and when a WAIT comes back short)", () => {
  let master: PrivateRedis;
  let replica: PrivateRedis;
  beforeAll(async () => {
    master = await redisServer();
    replica = await redisServer({ replicaOf: master.port });
    await eventually(() => replicated(master), "the replica to sync", 15_000);
  });

  it("counts one replica; none soon after it is killed; one again once it is back", async () => {
    const client = createFailFastRedis(master.url);
    const count = watched(client);
    await eventually(() => count.of("any", 1) === 1, "the replica to be counted");
    await replica.kill();
    await eventually(
      () => {
        count.doubt(); // as a WAIT that came back short does
        return count.of("any", 1) === 0;
      },
      "the lost replica to be forgotten",
      5000,
    );
    await replica.resume();
    await eventually(() => count.of("any", 1) === 1, "the replica back to be counted", 15_000);
  });

  it("a webhook waits for it; with it lost, webhooks are answered 200 again within seconds, counted; with it back, they wait again", async () => {
    await eventually(() => replicated(master), "the replica to sync", 15_000);
    const web = await webRole({ REDIS_URL: master.url, REDIS_WAIT_REPLICAS: "1" });
    await acceptedWithin(web, 5000);
    expect(await web.unreplicatedWrites()).toBe(0);

    await replica.kill();
    await acceptedWithin(web, 10_000);
    expect(await web.unreplicatedWrites()).toBeGreaterThan(0);

    await replica.resume();
    await eventually(
      async () => {
        const before = await web.unreplicatedWrites();
        const answered = await web.deliver(textWebhook({ text: "copied again?" }).body);
        return answered.statusCode === 200 && (await web.unreplicatedWrites()) === before;
      },
      "a delivery answered 200 once the replica holds it",
      15_000,
    );
  });
});

describe("a Redis Cluster (the client's slot table)", () => {
  let cluster: PrivateRedisCluster;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
  }, 60_000);
  afterAll(async () => cluster?.destroy());

  it("counts the replica of the key's master; none once that master is lost and its replica promoted; one when the old master is back as its replica", async () => {
    const key = "{t-replicas}";
    const client = createFailFastRedis(loadSettings(testEnv(cluster.env)).redis);
    client.on("error", () => undefined);
    const count = watched(client);
    await eventually(() => client.status === "ready", "the cluster client to be ready");
    // A fresh cluster lists a replica only once it has copied something.
    await client.set(`${key}:x`, "1");
    await eventually(() => count.of(key, 1) === 1, "the replica to be counted", 10_000);

    const lost = await cluster.masterOf(key);
    await lost.kill();
    await cluster.failedOver(key, lost);
    await eventually(
      async () => {
        count.doubt();
        await sleep(100);
        return count.of(key, 1) === 0;
      },
      "the promoted replica to be counted alone",
      10_000,
    );

    await lost.start();
    await eventually(
      async () => {
        await sleep(100);
        return count.of(key, 1) === 1;
      },
      "the old master, back as a replica, to be counted",
      20_000,
    );
  }, 60_000);
});
