import { readFileSync } from "node:fs";
import { type Env, envSchema } from "./env.ts";
import { loadNumbers, type NumberSettings } from "./numbers.ts";
import { type RedisTarget, redisTarget } from "./redis.ts";

/**
 * The one place that reads the environment's shape. `loadConfig(process.env)` is called by
 * the entry point only; everything else receives the frozen `Config`. The variables and their
 * parsers are in env.ts and values.ts; the business numbers' file in numbers.ts; Redis's
 * topology in redis.ts.
 */

const DEFAULT_SYSTEM_PROMPT =
  "You are the WhatsApp assistant of a business. Answer the customer's latest messages " +
  "helpfully, briefly and in the language they wrote in. Plain text only: WhatsApp shows no Markdown headings or tables.";

export interface Config {
  readonly port: number;
  readonly host: string;
  /**
   * Which proxies' X-Forwarded-For names the client (request.ip, which the sign-in limits
   * count by): none, all, the nearest n hops, or these addresses and CIDRs.
   */
  readonly trustProxy: boolean | number | readonly string[];
  /**
   * Prometheus scrapes `/metrics` on a listener of its own (port 0: none), in every role, so
   * the webhook's public port need not serve it; there it answers only with the token's bearer.
   */
  readonly metrics: { readonly port: number; readonly host: string; readonly token: string | undefined };
  readonly whatsapp: {
    readonly verifyToken: string;
    readonly appSecret: string;
    readonly accessToken: string;
    readonly graphBaseUrl: string;
    readonly graphVersion: string;
    readonly graphTimeoutMs: number;
    /** After a send whose answer never came, how long to wait for a status webhook to confirm it before sending again. */
    readonly sendReconcileWaitMs: number;
  };
  readonly anthropic: {
    readonly apiKey: string;
    readonly baseUrl: string;
    readonly model: string;
    readonly maxTokens: number;
    readonly timeoutMs: number;
    readonly systemPrompt: string;
    readonly historyMessages: number;
    readonly historyTokenBudget: number;
  };
  /** Settings of individual business numbers; a number not listed uses the defaults. */
  readonly numbers: ReadonlyMap<string, NumberSettings>;
  readonly redis: RedisTarget;
  /**
   * Replicas that must hold a webhook's job before it is answered 200 (REDIS_WAIT_REPLICAS:
   * 1 for a cluster or sentinel set, 0 for one server, whose AOF is its copy), of those the
   * master has; `strict` (REDIS_WAIT_STRICT): all of them, so a master with fewer refuses.
   */
  readonly redisWait: { readonly replicas: number; readonly timeoutMs: number; readonly strict: boolean };
  readonly queuePrefix: string;
  readonly databaseUrl: string;
  readonly databasePoolSize: number;
  readonly adminToken: string;
  /** Session cookies only over HTTPS; turn off for plain-HTTP development. */
  readonly adminSecureCookies: boolean;
  readonly logLevel: string;
  readonly jobs: {
    readonly replyDebounceMs: number;
    readonly replyConcurrency: number;
    readonly inboundConcurrency: number;
    readonly attempts: number;
    readonly retryBaseDelayMs: number;
    readonly retryMaxDelayMs: number;
    /** How long a job's lock lives without renewal: a dead worker's job runs again after this. */
    readonly lockMs: number;
  };
  /** The reconciler's sweep: how often, and how old unanswered work must be before it acts (src/jobs/reconcile.ts). */
  readonly reconcile: { readonly intervalMs: number; readonly afterMs: number };
  /** How the bot treats what is not a plain question (see src/messages/). */
  readonly conversation: {
    readonly mediaReply: string;
    readonly documentReply: string;
    /** The largest image or PDF passed to Claude (Meta's image limit and Claude's are both 5 MB). */
    readonly mediaMaxBytes: number;
    readonly fallbackReply: string;
    /** Said when a customer opens the chat without writing; empty = no reply. */
    readonly welcomeReply: string;
    readonly optOutKeywords: readonly string[];
    readonly optInKeywords: readonly string[];
    readonly optOutReply: string;
    readonly optInReply: string;
    readonly handoffKeywords: readonly string[];
    readonly handoffReply: string;
    /** A person wrote from the WhatsApp Business app: the bot stays out of that conversation this long (0 = it does not). */
    readonly humanReplyPauseMinutes: number;
  };
  readonly shutdownTimeoutMs: number;
  /**
   * OpenTelemetry traces, exported as OTLP/HTTP JSON to `tracesUrl`; undefined (the default)
   * when no OTLP endpoint is set: then no SDK starts and nothing is sent anywhere.
   */
  readonly tracing: { readonly tracesUrl: string; readonly headers: Readonly<Record<string, string>>; readonly serviceName: string | undefined } | undefined;
}

/**
 * The OTLP traces URL, as the OpenTelemetry spec resolves it: the signal's own endpoint as it
 * is, else the base endpoint with `v1/traces` appended.
 */
function tracesUrl(e: Pick<Env, "OTEL_EXPORTER_OTLP_ENDPOINT" | "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" | "OTEL_SDK_DISABLED">): string | undefined {
  if (e.OTEL_SDK_DISABLED) return undefined;
  if (e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (e.OTEL_EXPORTER_OTLP_ENDPOINT) return `${e.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, "")}/v1/traces`;
  return undefined;
}

/** Every problem with the environment at once, each naming its variable. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "ConfigError";
  }
}

export function loadConfig(env: Record<string, string | undefined>): Config {
  const parsed = envSchema.safeParse(env);
  const problems = parsed.success
    ? []
    : parsed.error.issues.map((issue) => {
        const name = String(issue.path[0] ?? "environment");
        return issue.message.includes(name) ? issue.message : `${name}: ${issue.message}`;
      });

  let systemPrompt = DEFAULT_SYSTEM_PROMPT;
  if (env.SYSTEM_PROMPT_FILE) {
    try {
      systemPrompt = readFileSync(env.SYSTEM_PROMPT_FILE, "utf8").trim();
    } catch (error) {
      problems.push(`SYSTEM_PROMPT_FILE cannot be read: ${(error as Error).message}`);
    }
  } else if (env.SYSTEM_PROMPT?.trim()) {
    systemPrompt = env.SYSTEM_PROMPT.trim();
  }

  const numbers = env.PHONE_NUMBERS_FILE ? loadNumbers(env.PHONE_NUMBERS_FILE, problems) : new Map<string, NumberSettings>();

  if (parsed.success && parsed.data.METRICS_PORT !== 0 && parsed.data.METRICS_PORT === parsed.data.PORT) {
    problems.push(`METRICS_PORT must differ from PORT (both ${parsed.data.PORT}): metrics have a listener of their own; 0 turns it off`);
  }

  const redis = parsed.success ? redisTarget(parsed.data, problems) : undefined;

  if (problems.length > 0 || !parsed.success || !redis) throw new ConfigError(problems);
  const e = parsed.data;
  const traces = tracesUrl(e);
  return Object.freeze({
    port: e.PORT,
    host: e.HOST,
    trustProxy: e.TRUST_PROXY,
    metrics: { port: e.METRICS_PORT, host: e.METRICS_HOST || e.HOST, token: e.METRICS_TOKEN },
    whatsapp: {
      verifyToken: e.WHATSAPP_VERIFY_TOKEN,
      appSecret: e.WHATSAPP_APP_SECRET,
      accessToken: e.WHATSAPP_ACCESS_TOKEN,
      graphBaseUrl: e.GRAPH_API_BASE_URL,
      graphVersion: e.GRAPH_API_VERSION,
      graphTimeoutMs: e.GRAPH_TIMEOUT_MS,
      sendReconcileWaitMs: e.SEND_RECONCILE_WAIT_MS,
    },
    anthropic: {
      apiKey: e.ANTHROPIC_API_KEY,
      baseUrl: e.ANTHROPIC_BASE_URL,
      model: e.ANTHROPIC_MODEL,
      maxTokens: e.ANTHROPIC_MAX_TOKENS,
      timeoutMs: e.ANTHROPIC_TIMEOUT_MS,
      systemPrompt,
      historyMessages: e.HISTORY_MESSAGES,
      historyTokenBudget: e.HISTORY_TOKEN_BUDGET,
    },
    numbers,
    redis,
    redisWait: { replicas: e.REDIS_WAIT_REPLICAS ?? (redis.kind === "single" ? 0 : 1), timeoutMs: e.REDIS_WAIT_TIMEOUT_MS, strict: e.REDIS_WAIT_STRICT },
    queuePrefix: e.QUEUE_PREFIX,
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    adminToken: e.ADMIN_TOKEN,
    adminSecureCookies: e.ADMIN_SECURE_COOKIES,
    logLevel: e.LOG_LEVEL,
    jobs: {
      replyDebounceMs: e.REPLY_DEBOUNCE_MS,
      replyConcurrency: e.REPLY_CONCURRENCY,
      inboundConcurrency: e.INBOUND_CONCURRENCY,
      attempts: e.JOB_ATTEMPTS,
      retryBaseDelayMs: e.RETRY_BASE_DELAY_MS,
      retryMaxDelayMs: e.RETRY_MAX_DELAY_MS,
      lockMs: e.JOB_LOCK_MS,
    },
    reconcile: { intervalMs: e.RECONCILE_INTERVAL_MS, afterMs: e.RECONCILE_AFTER_MS },
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    tracing: traces === undefined ? undefined : { tracesUrl: traces, headers: e.OTEL_EXPORTER_OTLP_HEADERS, serviceName: e.OTEL_SERVICE_NAME },
    conversation: {
      mediaReply: e.MEDIA_REPLY,
      documentReply: e.DOCUMENT_REPLY,
      mediaMaxBytes: e.MEDIA_MAX_BYTES,
      fallbackReply: e.FALLBACK_REPLY,
      welcomeReply: e.WELCOME_REPLY,
      optOutKeywords: e.OPT_OUT_KEYWORDS,
      optInKeywords: e.OPT_IN_KEYWORDS,
      optOutReply: e.OPT_OUT_REPLY,
      optInReply: e.OPT_IN_REPLY,
      handoffKeywords: e.HANDOFF_KEYWORDS,
      handoffReply: e.HANDOFF_REPLY,
      humanReplyPauseMinutes: e.HUMAN_REPLY_PAUSE_MINUTES,
    },
  });
}
