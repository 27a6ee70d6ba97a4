import { randomBytes } from "node:crypto";
import type { FastifyInstance } from "fastify";
import pino from "pino";
import { buildApp } from "../../src/app.ts";
import { createDb, type Db } from "../../src/db/client.ts";
import { createMetrics, type Metrics } from "../../src/metrics/metrics.ts";
import { closeQueues, createQueues, type Queues } from "../../src/queue/queues.ts";
import { createFailFastRedis, type RedisClient } from "../../src/queue/redis.ts";
import { loadSettings } from "../../src/settings.ts";
import { signMetaBody } from "../../src/webhook/signature.ts";
import { TEST_APP_SECRET, testEnv } from "./harness.ts";
import { sampleValue } from "./prometheus-text.ts";

/**
 * The web role in the test's own process, as src/main.ts builds it, on the Redis `env` names,
 * with no worker: what a webhook is answered, and what the role counted and logged.
 */
type LogLine = { level: number; event?: string; [field: string]: unknown };

export class WebRole {
  private constructor(
    readonly app: FastifyInstance,
    readonly redis: RedisClient,
    readonly queues: Queues,
    readonly prefix: string,
    readonly metrics: Metrics,
    /** Its warnings and errors, as pino wrote them. */
    readonly logged: LogLine[],
    private readonly db: Db,
  ) {}

  /** `prefix`: the queues' key prefix (default one of its own; two roles given one share the queues). */
  static async start(env: Record<string, string>, prefix = `{t-web-${randomBytes(4).toString("hex")}}`): Promise<WebRole> {
    const config = loadSettings(testEnv({ ...env, QUEUE_PREFIX: prefix }));
    const redis = createFailFastRedis(config.redis);
    redis.on("error", () => undefined);
    const queues = createQueues(redis, { prefix, attempts: config.jobs.attempts });
    const db = createDb(config.databaseUrl, { poolSize: 1 });
    const metrics = createMetrics();
    const logged: LogLine[] = [];
    const logger = pino({ level: "warn" }, { write: (line: string) => void logged.push(JSON.parse(line)) });
    const app = buildApp({ config, logger, redis, queues, db, metrics });
    await app.ready();
    return new WebRole(app, redis, queues, prefix, metrics, logged, db);
  }

  get ready(): boolean {
    return this.redis.status === "ready";
  }

  deliver(body: string) {
    return this.app.inject({
      method: "POST",
      url: "/webhook",
      payload: body,
      headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(Buffer.from(body), TEST_APP_SECRET) },
    });
  }

  /** wa_redis_unreplicated_writes_total, as /metrics shows it. */
  async unreplicatedWrites(): Promise<number> {
    return sampleValue(await this.metrics.registry.metrics(), "wa_redis_unreplicated_writes_total") ?? Number.NaN;
  }

  /** Its log lines with this event. */
  events(event: string): LogLine[] {
    return this.logged.filter((line) => line.event === event);
  }

  async close(): Promise<void> {
    await this.app.close();
    await closeQueues(this.queues);
    this.redis.disconnect();
    await this.db.$disconnect();
  }
}
