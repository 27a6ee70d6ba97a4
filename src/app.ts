import Fastify, { type FastifyBaseLogger, type FastifyInstance } from "fastify";
import { adminRoutes } from "./admin/admin.ts";
import type { LiveQueueSettings } from "./admin/routes/live.ts";
import { ClaudeClient } from "./ai/claude.ts";
import { type Clock, systemClock } from "./clock.ts";
import type { Db } from "./db/client.ts";
import { Playground } from "./eval/playground.ts";
import { healthRoutes } from "./http/health.ts";
import type { Logger } from "./logger.ts";
import { type Metrics, type MetricsSnapshot, metricsRoutes } from "./metrics/metrics.ts";
import type { Queues } from "./queue/queues.ts";
import type { RedisClient } from "./queue/redis.ts";
import type { Settings } from "./settings.ts";
import { businessActions } from "./tools/actions.ts";
import type { Tracing } from "./tracing/tracing.ts";
import { WebhookLogController, webhookRoutes } from "./webhook/routes.ts";
import { GraphClient } from "./whatsapp/graph-client.ts";
import { TemplateCatalog } from "./whatsapp/templates.ts";

export interface AppDeps {
  config: Pick<
    Settings,
    | "whatsapp"
    | "servedNumbers"
    | "adminToken"
    | "adminSecureCookies"
    | "queuePrefix"
    | "trustProxy"
    | "http"
    | "metrics"
    | "redisWait"
    | "costs"
    | "numbers"
    | "knowledge"
    | "searchLanguage"
    | "anthropic"
    | "tools"
    | "businessTools"
    | "conversation"
  >;
  logger: Logger;
  redis: RedisClient;
  queues: Queues;
  db: Db;
  metrics: Metrics;
  /** Metrics of other processes to serve beside ours (the `all` role's worker child). */
  otherProcesses?: () => Promise<MetricsSnapshot[]>;
  /** Traces on (main.ts started the SDK); absent, nothing is traced. */
  tracing?: Tracing | undefined;
  /** How long a webhook waits for a reconnecting Redis (default REDIS_READY_GRACE_MS). */
  redisGraceMs?: number | undefined;
  /** The clock main.ts made (a test may hand in its own); the system's by default. */
  clock?: Clock | undefined;
  /** The staff live queue's clocks and bounds (a test shortens them); its own defaults by default. */
  liveQueue?: LiveQueueSettings | undefined;
}

/** The web role as a value: tests call this and use inject(); only main.ts listens. */
export function buildApp(deps: AppDeps): FastifyInstance {
  const clock = deps.clock ?? systemClock;
  const app = Fastify({
    // pino's Logger is a FastifyBaseLogger; the cast keeps FastifyInstance's default generics.
    loggerInstance: deps.logger as FastifyBaseLogger,
    // Law 11: the process never crashes on input; unknown errors answer a generic 500.
    return503OnClosing: true,
    // Behind a load balancer (DESIGN.md §5) the socket's address is the balancer's; request.ip
    // must be the client's, or the sign-in limits would count every person as one.
    trustProxy: fastifyTrustProxy(deps.config.trustProxy),
    // Meta's deliveries log one line each, with their status and time, not Fastify's two more.
    logController: new WebhookLogController(),
    ...listenerTimeouts(deps.config.http),
  });

  app.setErrorHandler((error: Error & { statusCode?: number }, request, reply) => {
    if (request.raw.destroyed && !request.raw.complete) {
      // The connection closed before the request arrived whole: the client hung up, or ran out
      // of HTTP_REQUEST_TIMEOUT_MS (Fastify answered it 408). Not a malformed request: say so.
      request.log.info({ event: "http.request_cut_off", message: error.message }, "the request broke off before it arrived whole; nothing was done");
      return reply.code(408).send({ error: "request not received in full" });
    }
    const status = error.statusCode && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 500;
    if (status >= 500) request.log.error({ event: "http.error", err: error }, "request failed");
    else request.log.info({ event: "http.client_error", status, message: error.message }, "bad request");
    return reply.code(status).send({ error: status >= 500 ? "internal error" : error.message });
  });

  app.register(healthRoutes({ redis: deps.redis, db: deps.db }));
  // The webhook's port faces the internet: metrics (queue depths, error rates) are served here
  // only to METRICS_TOKEN's bearer; without it, not at all (buildMetricsApp serves them).
  const metricsToken = deps.config.metrics.token;
  if (metricsToken) {
    app.register(
      metricsRoutes({ metrics: deps.metrics, queues: deps.queues, db: deps.db, bearerToken: metricsToken, otherProcesses: deps.otherProcesses, clock }),
    );
  }
  app.register(
    webhookRoutes({
      redis: deps.redis,
      queues: deps.queues,
      verifyToken: deps.config.whatsapp.verifyToken,
      appSecret: deps.config.whatsapp.appSecret,
      servedNumbers: deps.config.servedNumbers,
      metrics: deps.metrics,
      durability: deps.config.redisWait,
      tracer: deps.tracing?.tracer,
      clock,
      redisGraceMs: deps.redisGraceMs,
    }),
  );
  app.register(
    adminRoutes({
      db: deps.db,
      queues: deps.queues,
      adminToken: deps.config.adminToken,
      redis: deps.redis,
      keyPrefix: deps.config.queuePrefix,
      secureCookies: deps.config.adminSecureCookies,
      costs: deps.config.costs,
      knowledge: { dirs: knowledgeDirs(deps.config.numbers), limits: deps.config.knowledge.limits },
      searchLanguage: deps.config.searchLanguage,
      templates: templateCatalog(deps.config.whatsapp, clock),
      clock,
      liveQueue: deps.liveQueue,
      playground: playgroundOf(deps, clock),
      identityKey: deps.config.whatsapp.appSecret,
    }),
  );
  return app;
}

/** The staff page's "Try it": the worker's way of answering (src/eval/), with the web role's own Claude client. */
function playgroundOf(deps: AppDeps, clock: Clock): Playground {
  const { config } = deps;
  return new Playground(
    {
      db: deps.db,
      logger: deps.logger,
      clock,
      claude: new ClaudeClient({ ...config.anthropic }, deps.tracing?.provider),
      metrics: deps.metrics,
      actions: businessActions(config.businessTools, config.tools.answerMaxBytes, clock),
      businessTools: config.businessTools,
    },
    {
      numbers: config.numbers,
      tools: config.tools,
      modelPrices: config.costs.modelPrices,
      historyMessages: config.anthropic.historyMessages,
      historyTokenBudget: config.anthropic.historyTokenBudget,
      mediaMaxBytes: config.conversation.mediaMaxBytes,
      handoffReply: config.conversation.handoffReply,
      knowledge: { tokenBudget: config.knowledge.tokenBudget, limits: config.knowledge.limits, language: config.searchLanguage },
    },
  );
}

/** Each number's knowledgeDir, for the knowledge GET /admin/insights lists. */
function knowledgeDirs(numbers: Settings["numbers"]): Map<string, string> {
  return new Map([...numbers].flatMap(([id, number]) => (number.knowledgeDir ? [[id, number.knowledgeDir] as const] : [])));
}

/** The staff page's approved templates, read with the web role's own Graph client; none without WHATSAPP_BUSINESS_ACCOUNT_ID. */
function templateCatalog(whatsapp: Settings["whatsapp"], clock: Clock): TemplateCatalog | undefined {
  if (!whatsapp.businessAccountId) return undefined;
  const graph = new GraphClient({
    baseUrl: whatsapp.graphBaseUrl,
    version: whatsapp.graphVersion,
    accessToken: whatsapp.accessToken,
    timeoutMs: whatsapp.graphTimeoutMs,
  });
  return new TemplateCatalog(graph, whatsapp.businessAccountId, clock);
}

export interface MetricsAppDeps {
  logger: Logger;
  queues: Queues;
  db: Db;
  metrics: Metrics;
  /** Metrics of other processes this listener speaks for (the `all` role's worker child). */
  otherProcesses?: () => Promise<MetricsSnapshot[]>;
  /** The clock queue ages are measured with (the system's by default). */
  clock?: Clock | undefined;
  /** METRICS_TOKEN: when set, `/metrics` here answers its bearer only, as on the web port. */
  bearerToken?: string | undefined;
}

/** The metrics listener (METRICS_PORT), in every role: a worker-only process has its own counters to show. */
export function buildMetricsApp(deps: MetricsAppDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    return503OnClosing: true,
  });
  // A scrape every few seconds is not news: its request lines are below "warn"; failures to collect are still logged.
  app.register(
    metricsRoutes({
      metrics: deps.metrics,
      queues: deps.queues,
      db: deps.db,
      otherProcesses: deps.otherProcesses,
      clock: deps.clock ?? systemClock,
      bearerToken: deps.bearerToken,
    }),
    { logLevel: "warn" },
  );
  // Liveness for a process with no web port (a worker's container HEALTHCHECK asks here); it
  // tells nothing, so it asks no token.
  app.get("/healthz", { logLevel: "warn" }, async () => ({ ok: true }));
  return app;
}

/**
 * A socket silent both ways this long, mid-request, is a client that stopped reading its
 * answer: no handler of ours is silent for a minute.
 */
const SILENT_SOCKET_MS = 60_000;

/**
 * Fastify leaves a request's time unbounded (requestTimeout 0): a client could trickle a 4 MB
 * body, a byte at a time, on as many connections as it liked, before any signature is checked.
 * Node enforces the request and header clocks on a sweep (every 30 s by default): it runs often
 * enough here that a connection is cut within a quarter of its clock of running out. A request
 * cut off never reaches its handler, so it stores nothing.
 */
function listenerTimeouts(clocks: Settings["http"]) {
  const requestTimeout = clocks.requestTimeoutMs;
  return {
    requestTimeout,
    keepAliveTimeout: clocks.keepAliveTimeoutMs,
    connectionTimeout: Math.max(SILENT_SOCKET_MS, requestTimeout),
    http: {
      requestTimeout,
      // Below the whole request's: headers are a few hundred bytes, the body the rest.
      headersTimeout: Math.floor(requestTimeout / 2),
      connectionsCheckingInterval: Math.min(1000, Math.floor(requestTimeout / 4)),
    },
  };
}

/**
 * Fastify 5.12 ignores a bare hop count (it trusts nothing then), so n hops is said as a
 * function: trust the n nearest senders, which is right when every way in passes n proxies.
 */
function fastifyTrustProxy(trust: Settings["trustProxy"]): boolean | string[] | ((address: string, hop: number) => boolean) {
  if (typeof trust === "number") return (_address, hop) => hop < trust;
  return typeof trust === "boolean" ? trust : [...trust];
}
