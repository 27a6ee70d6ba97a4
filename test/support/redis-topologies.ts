import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePorts } from "./ports.ts";
import { killAndWait } from "./private-redis.ts";

/**
 * Redis as operators run it, from Debian's redis-server on loopback ports: a Cluster of
 * masters with a replica each, and a master with a replica watched by three Sentinels. Every
 * server keeps an AOF (appendfsync always) and noeviction, as in production (DESIGN.md §5).
 * A test kills a master for real (SIGKILL) and waits for its replica to take over.
 */

const run = promisify(execFile);
const START_TIMEOUT_MS = 20_000;

/** redis-cli's answer to one command on one server. */
async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run("redis-cli", ["-h", "127.0.0.1", "-p", String(port), ...args], { timeout: 5000 });
  return stdout.trim();
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = START_TIMEOUT_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const PRODUCTION_LIKE = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"];

/** One redis-server (or sentinel) process of a topology. */
class Server {
  private child: ChildProcess | undefined;

  constructor(
    readonly port: number,
    private readonly args: string[],
  ) {}

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async start(): Promise<void> {
    if (this.running) return;
    const child = spawn("redis-server", this.args, { stdio: "ignore" });
    this.child = child;
    await until(`redis-server on port ${this.port}`, async () => {
      if (child.exitCode !== null) throw new Error(`redis-server on port ${this.port} exited at start-up`);
      return (await cli(this.port, "PING")) === "PONG" ? true : undefined;
    });
  }

  /** Every key this server holds. */
  async keys(): Promise<string[]> {
    const { stdout } = await run("redis-cli", ["-h", "127.0.0.1", "-p", String(this.port), "--scan"], { timeout: 10_000, maxBuffer: 64 * 1024 * 1024 });
    return stdout.split("\n").filter((key) => key !== "");
  }

  /** The replicas connected to it now, as it counts them (INFO replication's connected_slaves). */
  async connectedReplicas(): Promise<number> {
    const match = /connected_slaves:(\d+)/.exec(await cli(this.port, "INFO", "replication"));
    if (!match) throw new Error(`redis-server on port ${this.port} did not say how many replicas it has`);
    return Number(match[1]);
  }

  /** SIGSTOP freezes it (it keeps its sockets and answers nothing); SIGCONT thaws it. */
  signal(signal: "SIGSTOP" | "SIGCONT"): void {
    if (this.running) this.child!.kill(signal);
  }

  /** SIGKILL: no shutdown, no final save; what the AOF holds is what survives. */
  async kill(): Promise<void> {
    if (this.running) await killAndWait(this.child!);
  }
}

/** What a test does with either topology. */
export interface ReplicatedRedis {
  /** Its data servers, masters and replicas (not the Sentinels). */
  readonly servers: readonly Server[];
  /** The variables that point the system at it. */
  readonly env: Record<string, string>;
  /** The master that holds `key` (in a cluster, its slot's; a hash tag such as "{wa}" names the slot of every queue key). */
  masterOf(key: string): Promise<Server>;
  /** The replica of that master. */
  replicaOf(master: Server): Promise<Server>;
  /** After `from` was killed: resolves with the replica that took over `key`. */
  failedOver(key: string, from: Server): Promise<Server>;
  destroy(): Promise<void>;
}

export function startReplicatedRedis(kind: "cluster" | "sentinel"): Promise<ReplicatedRedis> {
  return kind === "cluster" ? PrivateRedisCluster.start() : PrivateRedisSentinels.start();
}

/** A Redis Cluster: `masters` masters with one replica each, all slots assigned. */
export class PrivateRedisCluster implements ReplicatedRedis {
  private constructor(
    private readonly dir: string,
    readonly servers: Server[],
  ) {}

  static async start(masters = 3): Promise<PrivateRedisCluster> {
    const dir = await mkdtemp(join(tmpdir(), "redis-cluster-"));
    const servers: Server[] = [];
    const ports = await freePorts(masters * 2 * 2);
    for (let i = 0; i < masters * 2; i++) {
      const [port, bus] = [ports[2 * i]!, ports[2 * i + 1]!];
      const data = join(dir, String(port));
      await mkdir(data);
      servers.push(
        new Server(port, [
          "--port",
          String(port),
          "--cluster-enabled",
          "yes",
          "--cluster-port",
          String(bus),
          "--cluster-config-file",
          join(data, "nodes.conf"),
          // A dead master is failed over after a second or two (production uses 15 s; the point is the same).
          "--cluster-node-timeout",
          "1000",
          // Any replica may take over, however long it was disconnected: the test kills at will.
          "--cluster-replica-validity-factor",
          "0",
          "--dir",
          data,
          ...PRODUCTION_LIKE,
        ]),
      );
    }
    const cluster = new PrivateRedisCluster(dir, servers);
    try {
      await Promise.all(servers.map((s) => s.start()));
      await run("redis-cli", ["--cluster", "create", ...servers.map((s) => `127.0.0.1:${s.port}`), "--cluster-replicas", "1", "--cluster-yes"], {
        timeout: START_TIMEOUT_MS,
      });
      await cluster.healthy();
      return cluster;
    } catch (error) {
      await cluster.destroy();
      throw error;
    }
  }

  /** REDIS_CLUSTER_NODES: every node as a seed. */
  get env(): Record<string, string> {
    return { REDIS_CLUSTER_NODES: this.servers.map((s) => `127.0.0.1:${s.port}`).join(",") };
  }

  /** Resolves once every slot is served and every running master has a replica online (synced, streaming). */
  async healthy(): Promise<void> {
    await until("the cluster to serve every slot", async () => {
      const live = this.servers.filter((s) => s.running);
      for (const server of live) if (!(await cli(server.port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return undefined;
      for (const server of live) {
        const replication = await cli(server.port, "INFO", "replication");
        if (replication.includes("role:master") && !/slave\d+:.*state=online/.test(replication)) return undefined;
      }
      return true;
    });
  }

  async masterOf(key: string): Promise<Server> {
    const live = this.servers.find((s) => s.running)!;
    const slot = Number(await cli(live.port, "CLUSTER", "KEYSLOT", key));
    const layout = await cli(live.port, "CLUSTER", "NODES");
    for (const line of layout.split("\n")) {
      const [, address, flags, , , , , , ...ranges] = line.split(" ");
      if (!flags?.includes("master") || flags.includes("fail")) continue;
      const serves = ranges.some((range) => {
        const [from, to = from] = range.split("-").map(Number);
        return slot >= from! && slot <= to!;
      });
      if (serves) return this.servers.find((s) => s.port === Number(address!.split(":")[1]!.split("@")[0]))!;
    }
    throw new Error(`no master serves slot ${slot}`);
  }

  async replicaOf(master: Server): Promise<Server> {
    const layout = await cli(master.port, "CLUSTER", "NODES");
    const id = layout
      .split("\n")
      .find((line) => line.includes("myself"))
      ?.split(" ")[0];
    const replica = layout.split("\n").find((line) => line.split(" ")[3] === id);
    const port = Number(replica?.split(" ")[1]?.split(":")[1]?.split("@")[0]);
    const server = this.servers.find((s) => s.port === port);
    if (!server) throw new Error(`no replica of ${master.port} in the cluster`);
    return server;
  }

  async failedOver(key: string, from: Server): Promise<Server> {
    return until("a replica to take over the killed master's slots", async () => {
      const now = await this.masterOf(key);
      if (now === from) return undefined;
      return (await cli(now.port, "CLUSTER", "INFO")).includes("cluster_state:ok") ? now : undefined;
    });
  }

  async destroy(): Promise<void> {
    await Promise.allSettled(this.servers.map((s) => s.kill()));
    await rm(this.dir, { recursive: true, force: true });
  }
}

export const SENTINEL_MASTER_NAME = "wa-master";

/** A master and its replica, watched by three Sentinels (quorum 2). */
export class PrivateRedisSentinels implements ReplicatedRedis {
  private constructor(
    private readonly dir: string,
    readonly servers: Server[],
    readonly sentinels: Server[],
  ) {}

  static async start(): Promise<PrivateRedisSentinels> {
    const dir = await mkdtemp(join(tmpdir(), "redis-sentinel-"));
    const ports = await freePorts(5);
    const [masterPort, replicaPort, sentinelPorts] = [ports[0]!, ports[1]!, ports.slice(2)];
    const dataServer = async (port: number, extra: string[]) => {
      const data = join(dir, String(port));
      await mkdir(data);
      return new Server(port, ["--port", String(port), "--dir", data, ...PRODUCTION_LIKE, ...extra]);
    };
    const servers = [await dataServer(masterPort, []), await dataServer(replicaPort, ["--replicaof", "127.0.0.1", String(masterPort)])];
    const sentinels: Server[] = [];
    for (const port of sentinelPorts) {
      const file = join(dir, `sentinel-${port}.conf`);
      // Sentinel rewrites its own file as it learns the topology: it must be writable.
      await writeFile(
        file,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${dir}`,
          `logfile ${dir}/s${port}.log`,
          `sentinel monitor ${SENTINEL_MASTER_NAME} 127.0.0.1 ${masterPort} 2`,
          `sentinel down-after-milliseconds ${SENTINEL_MASTER_NAME} 1000`,
          `sentinel failover-timeout ${SENTINEL_MASTER_NAME} 2000`,
          "",
        ].join("\n"),
      );
      sentinels.push(new Server(port, [file, "--sentinel"]));
    }
    const set = new PrivateRedisSentinels(dir, servers, sentinels);
    try {
      await Promise.all([...servers, ...sentinels].map((s) => s.start()));
      await set.healthy();
      return set;
    } catch (error) {
      await set.destroy();
      throw error;
    }
  }

  get env(): Record<string, string> {
    return { REDIS_SENTINELS: this.sentinels.map((s) => `127.0.0.1:${s.port}`).join(","), REDIS_SENTINEL_NAME: SENTINEL_MASTER_NAME };
  }

  /** The master the Sentinels name now (it holds every key). */
  async masterOf(): Promise<Server> {
    const [, port] = (await cli(this.sentinels[0]!.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_MASTER_NAME)).split("\n");
    const master = this.servers.find((s) => s.port === Number(port));
    if (!master) throw new Error(`the Sentinels name an unknown master (port ${port})`);
    return master;
  }

  /**
   * Resolves once the Sentinels agree on a master that has a replica in sync and a quorum to
   * fail it over, and each of them knows that replica: a Sentinel learns of replicas from the
   * master's INFO every 10 s, and promotes none it has not heard of.
   */
  async healthy(): Promise<void> {
    await until("the Sentinels to watch a replicated master", async () => {
      const master = await this.masterOf();
      if (!/slave\d+:.*state=online/.test(await cli(master.port, "INFO", "replication"))) return undefined;
      for (const sentinel of this.sentinels) {
        if (!(await cli(sentinel.port, "SENTINEL", "CKQUORUM", SENTINEL_MASTER_NAME)).startsWith("OK")) return undefined;
        const known = (await cli(sentinel.port, "SENTINEL", "REPLICAS", SENTINEL_MASTER_NAME)).split("\n");
        if (!known.some((line, i) => line === "flags" && known[i + 1] === "slave")) return undefined;
      }
      return true;
    });
  }

  async replicaOf(master: Server): Promise<Server> {
    return this.servers.find((s) => s !== master)!;
  }

  async failedOver(_key: string, from: Server): Promise<Server> {
    return until("the Sentinels to promote the replica", async () => {
      const now = await this.masterOf();
      if (now === from) return undefined;
      return (await cli(now.port, "ROLE")).startsWith("master") ? now : undefined;
    });
  }

  async destroy(): Promise<void> {
    await Promise.allSettled([...this.sentinels, ...this.servers].map((s) => s.kill()));
    await rm(this.dir, { recursive: true, force: true });
  }
}

export type { Server as RedisServer };
