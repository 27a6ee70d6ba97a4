import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sleep } from "../bench/stats.ts";
import { DemoShop, shopToolsFile } from "../sim/business/shop.ts";
import { WebhookDeliverer } from "../sim/meta/deliverer.ts";
import { MetaGraph } from "../sim/meta/graph.ts";
import type { RedisTarget } from "../src/config/redis.ts";
import { loadSettings } from "../src/settings.ts";
import { signMetaBody } from "../src/webhook/signature.ts";
import { FakeAnthropic } from "../test/support/fake-anthropic.ts";
import { freePorts } from "../test/support/ports.ts";
import { PrivatePostgres } from "../test/support/private-postgres.ts";
import { PrivateRedis } from "../test/support/private-redis.ts";
import { type ReplicatedRedis, startReplicatedRedis } from "../test/support/redis-topologies.ts";
import { PHONE_NUMBER_ID } from "../test/support/webhook-bodies.ts";
import { Customers } from "./customers.ts";
import { RoleProcess } from "./processes.ts";

/**
 * One scenario's world: a private Postgres and a private Redis (AOF on, as in production: one
 * server, a Cluster or a Sentinel-watched master), the simulated Meta (webhook deliverer,
 * Graph API, customers) and Claude, and the system's real processes: `webs` web processes
 * behind the deliverer (it takes turns, as a load balancer would) and `workers` workers.
 * Everything is created fresh and destroyed by close(), which is safe to call at any point,
 * more than once.
 */

const APP_SECRET = "chaos-app-secret";
const ACCESS_TOKEN = "chaos-access-token";
export const QUEUE_PREFIX = "{chaos}";
const START_TIMEOUT_MS = 60_000;
const WARM_UP_CUSTOMERS = 4;
/** How long a business action may take before the tool call gives up on it. */
const SHOP_TOOL_TIMEOUT_MS = 2000;

export interface SystemSettings {
  /** Directory name of this scenario's logs. */
  slug: string;
  logRoot: string;
  workers: number;
  /** Web processes (default 1). */
  webs?: number;
  /** How Redis runs (default one server). */
  redis?: "single" | "cluster" | "sentinel";
  /** The scenario's variables, over the common ones. */
  env: Record<string, string>;
  claudeLatencyMs: number;
  /** Share of customer messages Meta delivers twice. */
  duplicateRate: number;
  /** The business number gets the demo shop's tools (sim/business/shop.ts), served by `shop`. */
  shop?: boolean;
  seed: number;
}

const live = new Set<ChaosSystem>();

/** For Ctrl-C and fatal errors: tear down every system still standing. */
export async function closeAllSystems(): Promise<void> {
  await Promise.allSettled([...live].map((system) => system.close()));
}

export class ChaosSystem {
  pg: PrivatePostgres | undefined;
  /** The Redis of a "single" system. */
  redis: PrivateRedis | undefined;
  /** The Redis of a "cluster" or "sentinel" system. */
  replicated: ReplicatedRedis | undefined;
  readonly claude = new FakeAnthropic();
  /** The business's own endpoints, when the settings ask for them; each request's `authorization` names the process that made it (`Bearer w1`). */
  shop: DemoShop | undefined;
  /** The PHONE_NUMBERS_FILE giving the number the shop's tools. */
  private numbersFile: string | undefined;
  readonly deliverer: WebhookDeliverer;
  readonly graph: MetaGraph;
  readonly customers: Customers;
  readonly random: () => number;
  readonly logDir: string;
  /** Every process started, dead or alive, in order. */
  readonly processes: RoleProcess[] = [];
  /** Claude requests not yet answered, by the base path of the process that made them. */
  readonly claudeInFlight = new Map<string, number>();
  /** When Claude last answered each process. */
  readonly claudeAnsweredAt = new Map<string, number>();
  lastClaudeAt = 0;
  /** Claude requests made during the warm-up, which the scenario does not count. */
  private claudeCallsBefore = 0;
  private workerCount = 0;
  private closed: Promise<void> | undefined;

  private constructor(
    private readonly settings: SystemSettings,
    private readonly webPorts: number[],
  ) {
    this.random = seededRandom(settings.seed);
    this.logDir = join(settings.logRoot, settings.slug);
    this.deliverer = new WebhookDeliverer(
      webPorts.map((port) => `http://127.0.0.1:${port}/webhook`),
      APP_SECRET,
      this.random,
    );
    this.graph = new MetaGraph((body, afterMs) => void this.deliverer.deliver(body, afterMs), ACCESS_TOKEN);
    this.customers = new Customers(this.deliverer, this.random, settings.slug.replace(/\W/g, ""), settings.duplicateRate);
    this.claude.latencyMs = settings.claudeLatencyMs;
    this.claude.onRequest = ({ path, answered }) => {
      const via = path.split("/")[1] ?? "";
      this.lastClaudeAt = Date.now();
      this.claudeInFlight.set(via, (this.claudeInFlight.get(via) ?? 0) + 1);
      void answered.then(() => {
        this.claudeInFlight.set(via, (this.claudeInFlight.get(via) ?? 1) - 1);
        this.claudeAnsweredAt.set(via, Date.now());
      });
    };
  }

  static async start(settings: SystemSettings): Promise<ChaosSystem> {
    const system = new ChaosSystem(settings, await freePorts(settings.webs ?? 1));
    live.add(system);
    try {
      await system.boot();
      return system;
    } catch (error) {
      await system.close();
      throw error;
    }
  }

  /** POST /webhook of each web process (the deliverer takes turns among them, as a load balancer would). */
  get webhookUrls(): string[] {
    return this.webPorts.map((port) => `http://127.0.0.1:${port}/webhook`);
  }

  /** One POST of `body` to `url`, signed as Meta signs it, never delivered again: its status (0 for no answer). */
  async postOnce(url: string, body: string): Promise<number> {
    const raw = Buffer.from(body, "utf8");
    const headers = { "content-type": "application/json", "x-hub-signature-256": signMetaBody(raw, APP_SECRET) };
    return fetch(url, { method: "POST", body: raw, headers, signal: AbortSignal.timeout(5000) }).then(
      async (response) => {
        await response.arrayBuffer();
        return response.status;
      },
      () => 0,
    );
  }

  /** The first web process's address. */
  get webUrl(): string {
    return `http://127.0.0.1:${this.webPorts[0]}`;
  }

  private async boot(): Promise<void> {
    await mkdir(this.logDir, { recursive: true });
    await Promise.all([this.claude.start(), this.graph.start(), this.settings.shop ? this.startShop() : undefined]);
    const redis = this.settings.redis ?? "single";
    [this.pg] = await Promise.all([
      PrivatePostgres.start(),
      redis === "single" ? PrivateRedis.start({ aof: true }).then((r) => (this.redis = r)) : undefined,
      redis === "single" ? undefined : startReplicatedRedis(redis).then((r) => (this.replicated = r)),
    ]);
    await RoleProcess.spawn("migrate", "migrate", this.env("migrate"), this.logDir).finished(START_TIMEOUT_MS);
    const webs = this.webPorts.map((port, i) => {
      const name = i === 0 ? "web" : `web-${i + 1}`;
      return this.spawn(name, "web", { ...this.env(name), PORT: String(port), HOST: "127.0.0.1" });
    });
    const workers = Array.from({ length: this.settings.workers }, () => this.startWorker());
    await Promise.all([...webs.map((web, i) => this.ready(web, this.webPorts[i]!)), ...workers]);
    await this.warmUp();
  }

  /**
   * A few conversations end to end before the scenario starts, so that it measures the fault
   * and not a cold start (first queries, connection pools, the JIT); then the count restarts.
   */
  private async warmUp(): Promise<void> {
    const waIds = Array.from({ length: WARM_UP_CUSTOMERS }, (_, i) => this.customers.warmUp(i));
    const deadline = Date.now() + START_TIMEOUT_MS;
    const answered = () => waIds.every((to) => this.graph.taken.some((send) => send.to === to));
    while (!answered() || this.deliverer.busy) {
      if (Date.now() > deadline) throw new Error(`the warm-up messages were not answered within ${START_TIMEOUT_MS} ms (logs: ${this.logDir})`);
      await sleep(50);
    }
    await sleep(500); // the last status jobs run
    this.graph.clearRecord();
    this.deliverer.resetStats();
    this.claudeCallsBefore = this.claude.requests.length;
  }

  /**
   * The demo shop, and a numbers file whose tools call it with `Authorization: Bearer
   * ${CHAOS_VIA}`: each process's own base path, so the shop knows who asked.
   */
  private async startShop(): Promise<void> {
    this.shop = await new DemoShop().start();
    const tools = join(this.logDir, "tools.json");
    await writeFile(tools, JSON.stringify(shopToolsFile(this.shop.url, { authorizationEnv: "CHAOS_VIA", timeoutMs: SHOP_TOOL_TIMEOUT_MS })));
    this.numbersFile = join(this.logDir, "numbers.json");
    await writeFile(this.numbersFile, JSON.stringify({ [PHONE_NUMBER_ID]: { toolsFile: tools } }));
  }

  /** Claude requests since the warm-up. */
  get claudeCalls(): number {
    return this.claude.requests.length - this.claudeCallsBefore;
  }

  /** The variables of the process reaching the fakes under base path `via`. */
  env(via: string): Record<string, string> {
    if (!this.pg) throw new Error("servers not started");
    return {
      WHATSAPP_VERIFY_TOKEN: "chaos-verify-token",
      WHATSAPP_APP_SECRET: APP_SECRET,
      WHATSAPP_ACCESS_TOKEN: ACCESS_TOKEN,
      ANTHROPIC_API_KEY: "chaos-anthropic-key",
      ADMIN_TOKEN: "chaos-admin-token-0123456789",
      ADMIN_SECURE_COOKIES: "false",
      DATABASE_URL: this.pg.url,
      DATABASE_POOL_SIZE: "10",
      ...this.redisEnv(),
      QUEUE_PREFIX,
      GRAPH_API_BASE_URL: `${this.graph.url}/${via}`,
      ANTHROPIC_BASE_URL: `${this.claude.url}/${via}`,
      LOG_LEVEL: "info",
      // Several processes on one machine: none opens the metrics listener (METRICS_PORT).
      METRICS_PORT: "0",
      ...(this.numbersFile ? { PHONE_NUMBERS_FILE: this.numbersFile, CHAOS_VIA: via } : {}),
      ...this.settings.env,
    };
  }

  /** The variables that say where Redis is. */
  private redisEnv(): Record<string, string> {
    if (this.redis) return { REDIS_URL: this.redis.url };
    if (this.replicated) return this.replicated.env;
    throw new Error("Redis not started");
  }

  /** Redis as the system's processes reach it, for the runner's own look at the queues. */
  get redisTarget(): RedisTarget {
    return loadSettings(this.env("runner")).redis; // the processes' own reading of their variables
  }

  /** A new worker process, named worker-N, reaching the fakes under /wN; resolves once it runs. */
  async startWorker(): Promise<RoleProcess> {
    const n = ++this.workerCount;
    const worker = this.spawn(`worker-${n}`, "worker", this.env(`w${n}`));
    await this.ready(worker);
    return worker;
  }

  /** The process that uses base path `via` (w1 → worker-1). */
  processOf(via: string): RoleProcess | undefined {
    const name = via.startsWith("web") ? via : `worker-${via.slice(1)}`;
    return this.processes.find((p) => p.name === name);
  }

  viaOf(role: RoleProcess): string {
    return role.name.startsWith("web") ? role.name : `w${role.name.slice("worker-".length)}`;
  }

  get runningWorkers(): RoleProcess[] {
    return this.processes.filter((p) => p.name.startsWith("worker-") && p.running);
  }

  /** The moment of the last thing any party did: a webhook POST, a Graph request, a Claude request. */
  get lastActivityAt(): number {
    return Math.max(this.deliverer.lastPostAt, this.graph.lastRequestAt, this.lastClaudeAt);
  }

  close(): Promise<void> {
    this.closed ??= this.teardown();
    return this.closed;
  }

  private async teardown(): Promise<void> {
    this.deliverer.close();
    await Promise.allSettled(this.processes.map((p) => p.kill()));
    await Promise.allSettled([this.claude.stop(), this.graph.stop(), this.shop?.stop(), this.pg?.destroy(), this.redis?.destroy(), this.replicated?.destroy()]);
    live.delete(this);
  }

  private spawn(name: string, role: "web" | "worker", env: Record<string, string>): RoleProcess {
    const started = RoleProcess.spawn(name, role, env, this.logDir);
    this.processes.push(started);
    return started;
  }

  private async ready(started: RoleProcess, port?: number): Promise<void> {
    if (port === undefined) return started.waitForEvent("worker.started", START_TIMEOUT_MS);
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      const ok = await fetch(`http://127.0.0.1:${port}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return;
      if (!started.running) throw await started.stoppedBecause("exited at start-up");
      if (Date.now() > deadline) throw new Error(`${started.name} not ready within ${START_TIMEOUT_MS} ms (see ${started.logPath})`);
      await sleep(200);
    }
  }
}

/** mulberry32: the same seed picks the same duplicates and jitter, run after run. */
function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
