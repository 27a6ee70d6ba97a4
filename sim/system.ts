import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { buildApp } from "../src/app.ts";
import { createDb, type Db, parseDatabaseUrl } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { startConfiguredWorkers } from "../src/jobs/workers.ts";
import { createLogger, type Logger } from "../src/logger.ts";
import { createMetrics } from "../src/metrics/metrics.ts";
import { closeQueues, createQueues, type Queues } from "../src/queue/queues.ts";
import type { RedisClient } from "../src/queue/redis.ts";
import { createFailFastRedis, createWorkerRedis } from "../src/queue/redis.ts";
import { loadSettings, type Settings } from "../src/settings.ts";
import { addStaff } from "../src/staff/accounts.ts";
import { OfflineClaude } from "./anthropic/offline.ts";
import { DemoShop, writeDemoNumbers } from "./business/shop.ts";
import { DEMO_GRAPH_TIMEOUT_MS, DemoRefusal, type DemoSecrets, type DemoSettings, demoEnvironment, demoSettings, freshSecrets } from "./environment.ts";
import { shopFault } from "./faults.ts";
import { OfflineTranscriber } from "./offline-transcriber.ts";
import { demoRoutes } from "./routes.ts";
import { BUSINESS, Sandbox } from "./sandbox.ts";
import { ensureServices } from "./services.ts";

/**
 * The whole system in one process, as `npm start` runs it (the real webhook, queues, workers,
 * Postgres and the staff page), with a simulated Meta as its only Graph API and, without
 * ANTHROPIC_API_KEY, the offline responder as Claude. Every start is a fresh sandbox: its
 * database schema and Redis prefix are emptied, its secrets and staff password are new.
 */

export const STAFF_EMAIL = "staff@demo.localhost";
/** The shop's tools give up after this long: the page's "slow" switch answers later. */
const DEMO_TOOL_TIMEOUT_MS = 3000;

export interface DemoSystem {
  /** e.g. http://127.0.0.1:3000 */
  url: string;
  staff: { email: string; password: string };
  claude: "offline" | "anthropic";
  config: Settings;
  sandbox: Sandbox;
  db: Db;
  /** The system's queues, for whoever waits for it to go quiet (the tests). */
  queues: Queues;
  /** A simulator has work in hand: Meta (a request, a webhook to deliver), the offline responder, transcriber or shop (a request). */
  readonly busy: boolean;
  close(): Promise<void>;
}

export interface DemoOptions {
  /** The process environment: only the demo's own few variables are read (environment.ts). */
  env: Record<string, string | undefined>;
  /** Progress lines for the terminal (default: none). */
  say?: (line: string) => void;
  logger?: Logger;
}

export async function startDemo(options: DemoOptions): Promise<DemoSystem> {
  const say = options.say ?? (() => undefined);
  demoSettings(options.env); // refuses before anything starts
  const secrets = freshSecrets();
  const cleanups: Cleanup[] = [];
  const defer = (cleanup: Cleanup) => {
    cleanups.push(cleanup);
  };
  const close = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  };
  try {
    const sandbox = await startSandbox(secrets, defer);
    const settings = demoSettings(options.env, sandbox.url);
    const offline = settings.anthropic ? undefined : await startOfflineClaude(sandbox, defer);
    const transcriber = settings.transcribe ? undefined : await startOfflineTranscriber(sandbox, defer);
    const shop = await startShop(sandbox, defer);
    const config = await backendSettings(settings, secrets, { sandbox, shop, offline, transcriber }, defer);
    const logger = options.logger ?? createLogger({ level: config.logLevel });

    await ensureServices({ databaseUrl: config.databaseUrl, redisUrl: settings.redisUrl }, say);
    const { redis, workerRedis, db, queues } = await openFreshStores(config, logger, defer);
    const metrics = createMetrics();
    const password = randomBytes(12).toString("base64url");
    await addStaff(db, STAFF_EMAIL, password);

    const claude = settings.anthropic ? "anthropic" : "offline";
    const app = buildApp({ config, logger, redis, queues, db, metrics });
    app.register(demoRoutes({ sandbox, db, claude, staffEmail: STAFF_EMAIL }));
    const workers = startConfiguredWorkers(config, { db, logger, metrics, connection: workerRedis });
    defer(() => workers.close(config.shutdownTimeoutMs));
    await listen(app, settings.port);
    defer(() => app.close()); // closed first: no webhook is taken while the workers stop
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    sandbox.deliverTo(`${url}/webhook`);
    return {
      url,
      staff: { email: STAFF_EMAIL, password },
      claude,
      config,
      sandbox,
      db,
      queues,
      get busy() {
        return sandbox.busy || shop.busy || (offline?.busy ?? false) || (transcriber?.busy ?? false);
      },
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}

/** Stops one thing the demo started; run in reverse order of starting, so later parts stop before what they use. */
type Cleanup = () => Promise<unknown>;
/** Each step registers its cleanup as soon as its part is up, so a failure further on still stops it. */
type Defer = (cleanup: Cleanup) => void;

/** The simulated Meta, with two customers to write as at once: one by phone number, one by username with the number hidden. */
async function startSandbox(secrets: DemoSecrets, defer: Defer): Promise<Sandbox> {
  const sandbox = await new Sandbox({ appSecret: secrets.appSecret, accessToken: secrets.accessToken, graphTimeoutMs: DEMO_GRAPH_TIMEOUT_MS }).start();
  defer(() => sandbox.close());
  sandbox.addCustomer({ name: "Ana Souza", phone: "447700900123" });
  sandbox.addCustomer({ name: "Lena", username: "lena", userId: "US.13491208655302741918" });
  return sandbox;
}

/** Claude without ANTHROPIC_API_KEY: the page's faults make it fail, and its log shows what it was asked. */
async function startOfflineClaude(sandbox: Sandbox, defer: Defer): Promise<OfflineClaude> {
  const offline = new OfflineClaude(
    () => sandbox.faults.claude ?? undefined,
    (call) =>
      sandbox.log.add({
        kind: "claude",
        text: `Claude (the offline responder) asked about “${call.asked}” → ${call.answer}${call.did ? `: ${call.did}` : ""}`,
        ok: call.answer === 200,
      }),
    (error) => sandbox.log.add({ kind: "claude", text: `Offline responder error: ${String(error)}`, ok: false }),
  );
  await offline.start();
  defer(() => offline.stop());
  return offline;
}

/** Transcription without TRANSCRIBE_BASE_URL: a voice note "says" the words the page gave it. */
async function startOfflineTranscriber(sandbox: Sandbox, defer: Defer): Promise<OfflineTranscriber> {
  const transcriber = new OfflineTranscriber(
    (request, words) =>
      sandbox.log.add({
        kind: "transcriber",
        text: `The offline transcriber heard ${request.file?.name} (${request.file?.type}) say “${words}”`,
        ok: true,
      }),
    (error) => sandbox.log.add({ kind: "transcriber", text: `Offline transcriber error: ${String(error)}`, ok: false }),
  );
  await transcriber.start();
  defer(() => transcriber.stop());
  return transcriber;
}

/**
 * The sample shop the tools call. It remembers the Idempotency-Keys it was sent: the page's "slow"
 * fault delays only a key's first request, so the tool's repeat is answered from what was done.
 */
async function startShop(sandbox: Sandbox, defer: Defer): Promise<DemoShop> {
  const shop = await new DemoShop((error) => sandbox.log.add({ kind: "business", text: `Demo shop error: ${String(error)}`, ok: false })).start();
  defer(() => shop.stop());
  const keysSeen = new Set<string | undefined>();
  shop.fault = (request) => {
    const firstOfKey = !keysSeen.has(request.idempotencyKey);
    keysSeen.add(request.idempotencyKey);
    return sandbox.faults.shop ? shopFault(sandbox.faults.shop, DEMO_TOOL_TIMEOUT_MS, firstOfKey) : undefined;
  };
  shop.observe = (request, status) =>
    sandbox.log.add({
      kind: "business",
      text: `The shop's API: ${request.method} ${request.path} (Idempotency-Key ${request.idempotencyKey?.slice(0, 12) ?? "none"}…) → ${status ?? "no answer"}`,
      ok: status !== undefined && status < 400,
    });
  return shop;
}

/** The backend's settings, read by loadSettings as `npm start` reads them, pointed at the simulators. */
async function backendSettings(
  settings: DemoSettings,
  secrets: DemoSecrets,
  simulators: { sandbox: Sandbox; shop: DemoShop; offline?: OfflineClaude; transcriber?: OfflineTranscriber },
  defer: Defer,
): Promise<Settings> {
  const { sandbox, shop, offline, transcriber } = simulators;
  // The business's phone numbers file lives in a temporary folder of this run.
  const files = await mkdtemp(join(tmpdir(), "wa-demo-"));
  defer(() => rm(files, { recursive: true, force: true }));
  const numbersFile = await writeDemoNumbers(files, BUSINESS.phoneNumberId, shop.url, DEMO_TOOL_TIMEOUT_MS);
  return loadSettings(
    demoEnvironment(settings, secrets, { graph: sandbox.url, offlineClaude: offline?.url ?? "", offlineTranscriber: transcriber?.url ?? "" }, numbersFile),
  );
}

/** Redis, Postgres and the queues, held for this demo alone and emptied before anything uses them. */
async function openFreshStores(
  config: Settings,
  logger: Logger,
  defer: Defer,
): Promise<{ redis: RedisClient; workerRedis: RedisClient; db: Db; queues: Queues }> {
  // The workers' connection waits for Redis to be ready; the web's fails fast (law 2) and connects meanwhile.
  const workerRedis = createWorkerRedis(config.redis);
  workerRedis.on("error", (error) => logger.warn({ event: "redis.error", role: "worker", err: error }, "worker's redis connection error"));
  defer(() => workerRedis.quit());
  const redis = createFailFastRedis(config.redis);
  redis.on("error", (error) => logger.warn({ event: "redis.error", err: error }, "redis connection error"));
  defer(() => redis.quit());
  defer(await holdSandbox(config));
  await resetSandbox(config, workerRedis);
  await migrate(config.databaseUrl);
  const db = createDb(config.databaseUrl, { poolSize: config.databasePoolSize });
  defer(() => db.$disconnect());
  const queues = createQueues(redis, { prefix: config.queuePrefix, attempts: config.jobs.attempts }, (error) =>
    logger.warn({ event: "queue.error", err: error }, "queue connection error"),
  );
  defer(() => closeQueues(queues));
  return { redis, workerRedis, db, queues };
}

/** The preferred port, else any free one: a second demo, or npm start on 3000, must not stop this one. */
async function listen(app: ReturnType<typeof buildApp>, port: number): Promise<void> {
  try {
    await app.listen({ port, host: "127.0.0.1" });
  } catch (error) {
    if ((error as { code?: string }).code !== "EADDRINUSE" || port === 0) throw error;
    await app.listen({ port: 0, host: "127.0.0.1" });
  }
}

/**
 * One demo per schema: a second `npm run demo` would empty the first one's database under it.
 * A session-level advisory lock, held on a connection of its own until the demo closes.
 */
async function holdSandbox(config: Settings): Promise<() => Promise<void>> {
  const { connectionString, schema } = parseDatabaseUrl(config.databaseUrl);
  const client = new pg.Client({ connectionString });
  await client.connect();
  const { rows } = await client.query<{ held: boolean }>("SELECT pg_try_advisory_lock(hashtext($1)) AS held", [`npm run demo: ${schema ?? "public"}`]);
  if (!rows[0]?.held) {
    await client.end();
    throw new DemoRefusal(
      `another npm run demo is running on schema "${schema}" of this database; stop it first, or give this one its own (DEMO_DATABASE_URL=…?schema=demo2, DEMO_QUEUE_PREFIX={demo2})`,
    );
  }
  client.on("error", () => undefined); // the lock goes with the connection; nothing to do about it mid-demo
  return () => client.end();
}

/** A fresh sandbox each run: the simulated phones start empty, so must the database and the queues. */
async function resetSandbox(config: Settings, redis: RedisClient): Promise<void> {
  const { connectionString, schema } = parseDatabaseUrl(config.databaseUrl);
  if (schema && schema !== "public") {
    const client = new pg.Client({ connectionString });
    await client.connect();
    try {
      await client.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
    } finally {
      await client.end();
    }
  }
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "MATCH", `${config.queuePrefix}*`, "COUNT", 500);
    if (keys.length) await redis.del(...keys);
    cursor = next;
  } while (cursor !== "0");
}
