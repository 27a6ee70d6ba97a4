import { afterAll, afterEach, beforeAll, describe, it } from "vitest";
import { sleep } from "../bench/stats.ts";
import { loadConfig } from "../src/config/config.ts";
import { createFailFastRedis, type RedisClient } from "../src/queue/redis.ts";
import { type ReplicaCount, watchReplicas } from "../src/queue/replicas.ts";
import { eventually, testEnv } from "./support/harness.ts";
import { PrivateRedis } from "./support/private-redis.ts";
import { PrivateRedisCluster } from "./support/redis-topologies.ts";

/**
 * How many replicas the queues' master has, read from real redis-servers without a round trip
 * per webhook: the master's own ROLE, or a Cluster's slot table.
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

function watched(client: RedisClient): ReplicaCount {
  const count = watchReplicas(client);
  started.push({
    close: () => {
      count.close();
      client.disconnect();
    },
  });
  return count;
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
});

describe("a Redis Cluster (the client's slot table)", () => {
  let cluster: PrivateRedisCluster;
  beforeAll(async () => {
    cluster = await PrivateRedisCluster.start();
  }, 60_000);
  afterAll(async () => cluster?.destroy());

  it("counts the replica of the key's master; none once that master is lost and its replica promoted; one when the old master is back as its replica", async () => {
    const key = "{t-replicas}";
    const client = createFailFastRedis(loadConfig(testEnv(cluster.env)).redis);
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
