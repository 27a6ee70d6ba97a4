import { readFileSync } from "node:fs";
import { type Env, envSchema } from "./env.ts";
import { loadNumbers, type NumberSettings, type ServedNumbers } from "./numbers.ts";
import { type RedisTarget, redisTarget } from "./redis.ts";

/**
 * The one place that reads the environment's shape, into plain data: `readConfig(env)`, called
 * through src/settings.ts by the entry point only; everything else receives the frozen
 * `Config`. The variables and their parsers are in env.ts and values.ts; the business numbers'
 * file in numbers.ts; Redis's topology in redis.ts. The files whose meaning belongs to another
 * module (a tools file, the price lists) are named here and read by their owners.
 */

/**
 * Meta's terms (since January 2026) allow an assistant that serves the business's own
 * customers, not a general-purpose one: the prompt keeps Claude to the business's matters and
 * sends what it cannot answer from the documents and tools to a person. Since October 2026
 * Meta bills every message of a reply (a reply over 4096 characters is several): the prompt
 * asks for answers that fit one.
 */
const DEFAULT_SYSTEM_PROMPT =
  "You are the WhatsApp assistant of one business, answering its own customers about its products, " +
  "orders, bookings and policies. Answer from the business's documents and tools; when they do not say, " +
  "do not guess: call handoff_to_human with the reason. Also hand off when the customer asks for a person " +
  "or is upset. Politely decline requests that have nothing to do with the business (general questions, " +
  "writing, coding, homework). Reply briefly, in the language the customer wrote in, as plain text: " +
  "WhatsApp shows no Markdown headings or tables. Keep every answer short enough to fit in one WhatsApp " +
  "message (a few short paragraphs at most): each extra message is billed to the business.";

export interface Config {
  readonly port: number;
  readonly host: string;
  /**
   * Which proxies' X-Forwarded-For names the client (request.ip, which the sign-in limits
   * count by): none, all, the nearest n hops, or these addresses and CIDRs.
   */
  readonly trustProxy: boolean | number | readonly string[];
  /**
   * The web listener's clocks: a request, headers and body, must arrive within
   * `requestTimeoutMs` or its connection is closed; an idle keep-alive connection is closed
   * after `keepAliveTimeoutMs`.
   */
  readonly http: { readonly requestTimeoutMs: number; readonly keepAliveTimeoutMs: number };
  /**
   * Prometheus scrapes `/metrics` on a listener of its own, in every role, so the webhook's
   * public port need not serve it; there it answers only with the token's bearer. With a
   * token, the listener asks for it too. On loopback unless METRICS_HOST opens it.
   */
  readonly metrics: { readonly listen: MetricsListen; readonly host: string; readonly token: string | undefined };
  readonly whatsapp: {
    readonly verifyToken: string;
    readonly appSecret: string;
    readonly accessToken: string;
    readonly graphBaseUrl: string;
    readonly graphVersion: string;
    readonly graphTimeoutMs: number;
    /** After a send whose answer never came, how long to wait for a status webhook to confirm it before sending again. */
    readonly sendReconcileWaitMs: number;
    /** The WhatsApp Business Account whose approved templates staff may send (WHATSAPP_BUSINESS_ACCOUNT_ID); undefined: none. */
    readonly businessAccountId: string | undefined;
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
    /** EVAL_JUDGE_MODEL: the model `npm run eval` grades rubrics with. */
    readonly judgeModel: string;
  };
  /**
   * The cost ledger's price files (issue 20), read at start-up by src/settings.ts: Claude
   * models' prices over the built-in table (MODEL_PRICES_FILE); Meta's rate card
   * (META_RATES_FILE), without which billed messages are counted, not priced.
   */
  readonly priceFiles: { readonly modelPrices: string | undefined; readonly metaRates: string | undefined };
  /** A business's own files, given to Claude as cited documents (each number's `knowledgeDir`). */
  readonly knowledge: {
    /** Up to this many tokens, a number's knowledge goes to Claude whole; above it, the passages Postgres's full-text search finds. */
    readonly tokenBudget: number;
    /** A knowledgeDir's caps: start-up refuses one past them, and a running process keeps its last reading within them. */
    readonly limits: { readonly maxFiles: number; readonly maxBytes: number };
  };
  /**
   * Postgres's text-search configuration (KNOWLEDGE_LANGUAGE, default 'simple') for the
   * system's full-text searches: knowledge passages (src/knowledge/) are indexed and searched
   * with it. One setting for every search, so each reads the business's language alike.
   */
  readonly searchLanguage: string;
  /** The business's own HTTP endpoints, run as Claude's client tools (each number's `toolsFile`; src/tools/). */
  readonly tools: {
    /** Tool calls one reply may make. */
    readonly maxSteps: number;
    /** How long all tool calls of one reply may take together. */
    readonly maxMs: number;
    /** A tool's answer is cut to this many bytes before Claude reads it. */
    readonly answerMaxBytes: number;
  };
  /** Settings of individual business numbers (PHONE_NUMBERS_FILE); without the file, none, and every number uses the defaults. */
  readonly numbers: ReadonlyMap<string, NumberSettings>;
  /** The numbers answered: PHONE_NUMBERS_FILE's, or every one when it is not set. */
  readonly servedNumbers: ServedNumbers;
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
  /** Law 14: where staff are told of new dead letters and handoffs, batched (src/notify/); off when neither channel is set. */
  readonly staffNotify: StaffNotifySettings;
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
  /** RETENTION: customers' words older than `afterMs` are forgotten, swept every `sweepMs`; undefined keeps everything. */
  readonly retention: { readonly afterMs: number; readonly sweepMs: number } | undefined;
  /** How the bot treats what is not a plain question (see src/messages/). */
  readonly conversation: {
    readonly mediaReply: string;
    readonly documentReply: string;
    /** The largest image or PDF passed to Claude (Meta's image limit and Claude's are both 5 MB). */
    readonly mediaMaxBytes: number;
    /** Audio is heard through the transcriber (TRANSCRIBE_BASE_URL); false: it gets mediaReply. */
    readonly transcribeVoiceNotes: boolean;
    readonly fallbackReply: string;
    /** Said when a customer opens the chat without writing; empty = no reply. */
    readonly welcomeReply: string;
    readonly optOutKeywords: readonly string[];
    readonly optInKeywords: readonly string[];
    readonly optOutReply: string;
    readonly optInReply: string;
    readonly handoffKeywords: readonly string[];
    readonly handoffReply: string;
    /** Said once per new dead letter while the customer can be written to (law 14); empty = nothing. */
    readonly holdingReply: string;
    /** A person wrote from the WhatsApp Business app: the bot stays out of that conversation this long (0 = it does not). */
    readonly humanReplyPauseMinutes: number;
    /** Asking the customer how it went (issue 33.3, src/jobs/csat.ts); undefined when CSAT_AFTER_SECONDS is unset: never asked. */
    readonly csat: CsatSettings | undefined;
  };
  /** The voice notes' transcriber (src/ai/transcriber.ts); undefined when TRANSCRIBE_BASE_URL is unset. */
  readonly transcription: { readonly baseUrl: string; readonly apiKey: string | undefined; readonly model: string } | undefined;
  readonly shutdownTimeoutMs: number;
  /**
   * OpenTelemetry traces, exported as OTLP/HTTP JSON to `tracesUrl`; undefined (the default)
   * when no OTLP endpoint is set: then no SDK starts and nothing is sent anywhere.
   */
  readonly tracing: { readonly tracesUrl: string; readonly headers: Readonly<Record<string, string>>; readonly serviceName: string | undefined } | undefined;
}

export interface StaffNotifySettings {
  /** A JSON `{"text": …}` post (Slack, Google Chat and Teams incoming webhooks take it). */
  readonly webhookUrl: string | undefined;
  readonly email: { readonly smtpUrl: string; readonly to: readonly string[]; readonly from: string } | undefined;
  /** At most one notification per this many milliseconds. */
  readonly batchMs: number;
  /** Where the staff page is, for links (`${publicBaseUrl}/admin#/item/<id>`); set whenever a channel is. */
  readonly publicBaseUrl: string;
}

/**
 * Where the metrics listener goes. Several roles on one host each need a port of their own
 * with nothing set but PORT (DESIGN.md §5): unset, METRICS_PORT means the first free port of
 * DEFAULT_METRICS_PORTS (a scraper finds each process there, or by its `metrics.listening` log
 * line); set, exactly that port or a start-up failure naming it; 0, no listener.
 */
export type MetricsListen =
  | { readonly kind: "off" }
  | { readonly kind: "fixed"; readonly port: number }
  | { readonly kind: "first_free"; readonly ports: readonly number[] };

/** 9464 is the Prometheus exporters' port; 32 processes of ours fit on one host. */
export const DEFAULT_METRICS_PORTS = { first: 9464, last: 9495 } as const;

function metricsListen(metricsPort: number | undefined, webPort: number): MetricsListen {
  if (metricsPort === 0) return { kind: "off" };
  if (metricsPort !== undefined) return { kind: "fixed", port: metricsPort };
  const ports: number[] = [];
  // PORT inside the range is the web's, not a neighbour's: skipped, not tried.
  for (let port = DEFAULT_METRICS_PORTS.first; port <= DEFAULT_METRICS_PORTS.last; port++) if (port !== webPort) ports.push(port);
  return { kind: "first_free", ports };
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

/** Staff notifications need both halves of e-mail, and links to the staff page for any channel. */
function staffNotifyProblems(e: Env, problems: string[]): void {
  if (e.SMTP_URL && e.STAFF_NOTIFY_EMAIL.length === 0) problems.push("STAFF_NOTIFY_EMAIL is required with SMTP_URL: the addresses staff are told at");
  if (!e.SMTP_URL && e.STAFF_NOTIFY_EMAIL.length > 0) problems.push("SMTP_URL is required with STAFF_NOTIFY_EMAIL: the server the e-mail is sent through");
  if ((e.STAFF_NOTIFY_WEBHOOK_URL || e.SMTP_URL || e.STAFF_NOTIFY_EMAIL.length > 0) && !e.PUBLIC_BASE_URL)
    problems.push("PUBLIC_BASE_URL is required when staff are notified (STAFF_NOTIFY_WEBHOOK_URL, SMTP_URL): the notifications link to the staff page");
}

/** Every problem with the environment at once, each naming its variable. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "ConfigError";
  }
}

/**
 * The environment as a Config, or undefined when it cannot be one: every problem found is
 * pushed to `problems`, each naming its variable. src/settings.ts adds what the files it names
 * compile to, and reports all of them at once.
 */
export function readConfig(env: Record<string, string | undefined>, problems: string[]): Config | undefined {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const name = String(issue.path[0] ?? "environment");
      problems.push(issue.message.includes(name) ? issue.message : `${name}: ${issue.message}`);
    }
  }
  const systemPrompt = readSystemPrompt(env, problems);
  const numbers = env.PHONE_NUMBERS_FILE ? loadNumbers(env.PHONE_NUMBERS_FILE, problems) : new Map<string, NumberSettings>();
  if (!parsed.success) return undefined;
  const e = parsed.data;
  if (e.METRICS_PORT !== undefined && e.METRICS_PORT !== 0 && e.METRICS_PORT === e.PORT) {
    problems.push(`METRICS_PORT must differ from PORT (both ${e.PORT}): metrics have a listener of their own; 0 turns it off`);
  }
  const redis = redisTarget(e, problems);
  staffNotifyProblems(e, problems);
  if (problems.length > 0 || !redis) return undefined;
  return Object.freeze({
    ...listeners(e),
    whatsapp: whatsappOf(e),
    anthropic: { ...anthropicOf(e), systemPrompt },
    priceFiles: { modelPrices: e.MODEL_PRICES_FILE || undefined, metaRates: e.META_RATES_FILE || undefined },
    knowledge: { tokenBudget: e.KNOWLEDGE_TOKEN_BUDGET, limits: { maxFiles: e.KNOWLEDGE_MAX_FILES, maxBytes: e.KNOWLEDGE_MAX_BYTES } },
    searchLanguage: e.KNOWLEDGE_LANGUAGE,
    tools: { maxSteps: e.TOOL_MAX_STEPS, maxMs: e.TOOL_MAX_MS, answerMaxBytes: e.TOOL_ANSWER_MAX_BYTES },
    numbers,
    servedNumbers: env.PHONE_NUMBERS_FILE ? new Set(numbers.keys()) : "every",
    redis,
    redisWait: { replicas: e.REDIS_WAIT_REPLICAS ?? (redis.kind === "single" ? 0 : 1), timeoutMs: e.REDIS_WAIT_TIMEOUT_MS, strict: e.REDIS_WAIT_STRICT },
    queuePrefix: e.QUEUE_PREFIX,
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    adminToken: e.ADMIN_TOKEN,
    adminSecureCookies: e.ADMIN_SECURE_COOKIES,
    staffNotify: staffNotifyOf(e),
    logLevel: e.LOG_LEVEL,
    jobs: jobsOf(e),
    reconcile: { intervalMs: e.RECONCILE_INTERVAL_MS, afterMs: e.RECONCILE_AFTER_MS },
    retention: e.RETENTION ? { afterMs: durationMs(e.RETENTION), sweepMs: e.RETENTION_SWEEP_SECONDS * 1000 } : undefined,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    transcription:
      e.TRANSCRIBE_BASE_URL === undefined ? undefined : { baseUrl: e.TRANSCRIBE_BASE_URL, apiKey: e.TRANSCRIBE_API_KEY, model: e.TRANSCRIBE_MODEL },
    tracing: tracingOf(e),
    conversation: conversationOf(e),
  });
}

/** SYSTEM_PROMPT_FILE's words, else SYSTEM_PROMPT's, else the default. */
function readSystemPrompt(env: Record<string, string | undefined>, problems: string[]): string {
  if (env.SYSTEM_PROMPT_FILE) {
    try {
      return readFileSync(env.SYSTEM_PROMPT_FILE, "utf8").trim();
    } catch (error) {
      problems.push(`SYSTEM_PROMPT_FILE cannot be read: ${(error as Error).message}`);
      return DEFAULT_SYSTEM_PROMPT;
    }
  }
  return env.SYSTEM_PROMPT?.trim() || DEFAULT_SYSTEM_PROMPT;
}

function listeners(e: Env): Pick<Config, "port" | "host" | "trustProxy" | "http" | "metrics"> {
  return {
    port: e.PORT,
    host: e.HOST,
    trustProxy: e.TRUST_PROXY,
    http: { requestTimeoutMs: e.HTTP_REQUEST_TIMEOUT_MS, keepAliveTimeoutMs: e.HTTP_KEEP_ALIVE_TIMEOUT_MS },
    // Queue depths and error rates are the operator's business: private unless METRICS_HOST opens them.
    metrics: { listen: metricsListen(e.METRICS_PORT, e.PORT), host: e.METRICS_HOST || "127.0.0.1", token: e.METRICS_TOKEN },
  };
}

function whatsappOf(e: Env): Config["whatsapp"] {
  return {
    verifyToken: e.WHATSAPP_VERIFY_TOKEN,
    appSecret: e.WHATSAPP_APP_SECRET,
    accessToken: e.WHATSAPP_ACCESS_TOKEN,
    graphBaseUrl: e.GRAPH_API_BASE_URL,
    graphVersion: e.GRAPH_API_VERSION,
    graphTimeoutMs: e.GRAPH_TIMEOUT_MS,
    sendReconcileWaitMs: e.SEND_RECONCILE_WAIT_MS,
    businessAccountId: e.WHATSAPP_BUSINESS_ACCOUNT_ID,
  };
}

function anthropicOf(e: Env): Omit<Config["anthropic"], "systemPrompt"> {
  return {
    apiKey: e.ANTHROPIC_API_KEY,
    baseUrl: e.ANTHROPIC_BASE_URL,
    model: e.ANTHROPIC_MODEL,
    maxTokens: e.ANTHROPIC_MAX_TOKENS,
    timeoutMs: e.ANTHROPIC_TIMEOUT_MS,
    historyMessages: e.HISTORY_MESSAGES,
    historyTokenBudget: e.HISTORY_TOKEN_BUDGET,
    judgeModel: e.EVAL_JUDGE_MODEL ?? e.ANTHROPIC_MODEL,
  };
}

function staffNotifyOf(e: Env): StaffNotifySettings {
  return {
    webhookUrl: e.STAFF_NOTIFY_WEBHOOK_URL,
    email:
      e.SMTP_URL && e.STAFF_NOTIFY_EMAIL.length > 0
        ? { smtpUrl: e.SMTP_URL, to: e.STAFF_NOTIFY_EMAIL, from: e.STAFF_NOTIFY_EMAIL_FROM[0] ?? e.STAFF_NOTIFY_EMAIL[0]! }
        : undefined,
    batchMs: e.STAFF_NOTIFY_BATCH_MS,
    publicBaseUrl: (e.PUBLIC_BASE_URL ?? "").replace(/\/+$/, ""),
  };
}

function jobsOf(e: Env): Config["jobs"] {
  return {
    replyDebounceMs: e.REPLY_DEBOUNCE_MS,
    replyConcurrency: e.REPLY_CONCURRENCY,
    inboundConcurrency: e.INBOUND_CONCURRENCY,
    attempts: e.JOB_ATTEMPTS,
    retryBaseDelayMs: e.RETRY_BASE_DELAY_MS,
    retryMaxDelayMs: e.RETRY_MAX_DELAY_MS,
    lockMs: e.JOB_LOCK_MS,
  };
}

function tracingOf(e: Env): Config["tracing"] {
  const traces = tracesUrl(e);
  return traces === undefined ? undefined : { tracesUrl: traces, headers: e.OTEL_EXPORTER_OTLP_HEADERS, serviceName: e.OTEL_SERVICE_NAME };
}

/** How the customer is asked how it went: the quiet after the bot's answer, how often at most, the words. */
export interface CsatSettings {
  readonly afterMs: number;
  /** Not asked again within this many days of the last ask (0: every time). */
  readonly everyDays: number;
  readonly question: string;
  readonly buttons: { readonly good: string; readonly okay: string; readonly bad: string };
  /** Said once for the rating; empty = nothing. */
  readonly thanks: string;
}

function conversationOf(e: Env): Config["conversation"] {
  return {
    mediaReply: e.MEDIA_REPLY,
    documentReply: e.DOCUMENT_REPLY,
    mediaMaxBytes: e.MEDIA_MAX_BYTES,
    transcribeVoiceNotes: e.TRANSCRIBE_BASE_URL !== undefined,
    fallbackReply: e.FALLBACK_REPLY,
    welcomeReply: e.WELCOME_REPLY,
    optOutKeywords: e.OPT_OUT_KEYWORDS,
    optInKeywords: e.OPT_IN_KEYWORDS,
    optOutReply: e.OPT_OUT_REPLY,
    optInReply: e.OPT_IN_REPLY,
    handoffKeywords: e.HANDOFF_KEYWORDS,
    handoffReply: e.HANDOFF_REPLY,
    holdingReply: e.HOLDING_REPLY,
    humanReplyPauseMinutes: e.HUMAN_REPLY_PAUSE_MINUTES,
    csat:
      e.CSAT_AFTER_SECONDS === undefined
        ? undefined
        : {
            afterMs: e.CSAT_AFTER_SECONDS * 1000,
            everyDays: e.CSAT_EVERY_DAYS,
            question: e.CSAT_QUESTION,
            buttons: { good: e.CSAT_BUTTONS[0], okay: e.CSAT_BUTTONS[1], bad: e.CSAT_BUTTONS[2] },
            thanks: e.CSAT_THANKS,
          },
  };
}

const UNIT_MS = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** "30d", "12h", "90s" (env.ts checked the shape) in milliseconds. */
function durationMs(duration: string): number {
  return Number(duration.slice(0, -1)) * UNIT_MS[duration.at(-1) as keyof typeof UNIT_MS];
}
