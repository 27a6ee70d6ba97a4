import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { dirname, resolve } from "node:path";
import { z } from "zod";

/**
 * The one place that reads the environment's shape. `loadConfig(process.env)` is called by
 * the entry point only; everything else receives the frozen `Config`.
 */

const DEFAULT_SYSTEM_PROMPT =
  "You are the WhatsApp assistant of a business. Answer the customer's latest messages " +
  "helpfully, briefly and in the language they wrote in. Plain text only: WhatsApp shows no Markdown headings or tables.";

const required = (name: string) =>
  z
    .string({ error: `${name} is required` })
    .trim()
    .min(1, { error: `${name} is required` });

/** An integer in [min, max]; undefined when unset, for a default that depends on other variables. */
const optionalInt = (name: string, min: number, max: number) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      if (value === undefined || value.trim() === "") return undefined;
      const parsed = Number(value);
      if (!Number.isInteger(parsed) || parsed < min || parsed > max) {
        ctx.addIssue({ code: "custom", message: `${name} must be an integer from ${min} to ${max}, got "${value}"` });
        return z.NEVER;
      }
      return parsed;
    });

const int = (name: string, fallback: number, min: number, max: number) => optionalInt(name, min, max).transform((value) => value ?? fallback);

/**
 * A URL as it may be shown in an error: whatever precedes its last "@" is credentials
 * (`redis://:password@host`), and start-up errors land in terminals and log collectors.
 * Works on strings that do not parse, which are the ones we echo.
 */
function redactUrl(raw: string): string {
  return raw.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[\s\S]*@/i, "$1***@");
}

const url = (name: string, fallback: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      const raw = value === undefined || value.trim() === "" ? fallback : value.trim();
      try {
        return new URL(raw).toString().replace(/\/$/, "");
      } catch {
        ctx.addIssue({ code: "custom", message: `${name} must be a URL, got "${redactUrl(raw)}"` });
        return z.NEVER;
      }
    });

/** An http(s) URL, or undefined when unset: the OTLP endpoints, which turn tracing on by being set. */
const optionalHttpUrl = (name: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      const raw = value?.trim() ?? "";
      if (raw === "") return undefined;
      let parsed: URL | undefined;
      try {
        parsed = new URL(raw);
      } catch {
        // reported below
      }
      if (!parsed || !/^https?:$/.test(parsed.protocol)) {
        ctx.addIssue({ code: "custom", message: `${name} must be an http:// or https:// URL, got "${redactUrl(raw)}"` });
        return z.NEVER;
      }
      return parsed.toString();
    });

/** OTEL_EXPORTER_OTLP_HEADERS: `key=value,key=value` (values URL-encoded, as the OpenTelemetry spec says). */
const otlpHeaders = z
  .string()
  .optional()
  .transform((value, ctx): Record<string, string> => {
    const headers: Record<string, string> = {};
    for (const entry of (value ?? "")
      .split(",")
      .map((e) => e.trim())
      .filter(Boolean)) {
      const at = entry.indexOf("=");
      const key = at < 0 ? "" : entry.slice(0, at).trim();
      let decoded: string | undefined;
      try {
        decoded = decodeURIComponent(entry.slice(at + 1).trim());
      } catch {
        // reported below
      }
      if (at < 1 || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key) || decoded === undefined) {
        // The value may be a credential: only the key is shown.
        ctx.addIssue({
          code: "custom",
          message: `OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs separated by commas; bad entry for "${key || "(no key)"}"`,
        });
        return z.NEVER;
      }
      headers[key] = decoded;
    }
    return headers;
  });

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** `host:port,host:port,…` (IPv6 in brackets: `[::1]:6379`); empty or unset is no list. */
const hostPorts = (name: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx): HostPort[] | undefined => {
      if (value === undefined || value.trim() === "") return undefined;
      const nodes: HostPort[] = [];
      for (const entry of value.split(",").map((e) => e.trim())) {
        const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(entry);
        const port = Number(match?.[3]);
        if (!match || port < 1 || port > 65_535) {
          ctx.addIssue({ code: "custom", message: `${name} must be host:port pairs separated by commas, got "${entry}"` });
          return z.NEVER;
        }
        nodes.push({ host: match[1] ?? match[2]!, port });
      }
      return nodes;
    });

/**
 * Where Redis is, as operators run it: one server (REDIS_URL; `rediss://` for TLS), a Cluster
 * (seed nodes) or a master watched by Sentinels. Credentials and TLS of a cluster or sentinel
 * set come from their own variables, since there is no single URL to carry them.
 */
export type RedisTarget =
  | { readonly kind: "single"; readonly url: string; readonly tls?: RedisTls | undefined }
  | ({ readonly kind: "cluster"; readonly nodes: readonly HostPort[] } & RedisAuth)
  | ({ readonly kind: "sentinel"; readonly sentinels: readonly HostPort[]; readonly name: string; readonly sentinelPassword?: string | undefined } & RedisAuth);

export interface RedisAuth {
  readonly username?: string | undefined;
  readonly password?: string | undefined;
  readonly tls?: RedisTls | undefined;
}

/** TLS to Redis: on, with the CA bundle that signed the servers' certificates when it is not a public one. */
export interface RedisTls {
  readonly ca?: string | undefined;
}

/** proxy-addr's names for address ranges, which Fastify's trustProxy accepts beside addresses and CIDRs. */
const PROXY_RANGE_NAMES = new Set(["loopback", "linklocal", "uniquelocal"]);

function isAddressOrRange(entry: string): boolean {
  if (PROXY_RANGE_NAMES.has(entry)) return true;
  const [address = "", bits, ...rest] = entry.split("/");
  const family = isIP(address);
  if (family === 0 || rest.length > 0) return false;
  if (bits === undefined) return true;
  if (family === 4 && isIP(bits) === 4) return true; // 10.0.0.0/255.0.0.0
  return /^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128);
}

/**
 * Whose X-Forwarded-For to believe: nobody (the default: a client could write any address
 * there), everyone, the nearest n hops, or the listed proxies (addresses, CIDRs).
 */
const trustProxy = z
  .string()
  .optional()
  .transform((value, ctx): boolean | number | string[] => {
    const raw = value?.trim() ?? "";
    if (raw === "" || raw === "false" || raw === "0") return false;
    if (raw === "true") return true;
    if (/^\d+$/.test(raw)) return Number(raw);
    const entries = raw.split(",").map((entry) => entry.trim());
    const bad = entries.filter((entry) => !isAddressOrRange(entry));
    if (bad.length > 0) {
      ctx.addIssue({
        code: "custom",
        message: `TRUST_PROXY must be "true", "false", a number of hops or a comma-separated list of addresses and CIDRs; not an address: ${bad.map((b) => `"${b}"`).join(", ")}`,
      });
      return z.NEVER;
    }
    return entries;
  });

/** A comma-separated list, matched case-insensitively against a whole message. */
const keywords = (fallback: string) =>
  z
    .string()
    .optional()
    .transform((value) =>
      (value ?? fallback)
        .split(",")
        .map((k) => k.trim().toLocaleLowerCase())
        .filter(Boolean),
    );

/** Free text; set it empty to say nothing. */
const sayOrNothing = (fallback: string) =>
  z
    .string()
    .optional()
    .transform((value) => (value ?? fallback).trim());

const envSchema = z.object({
  PORT: int("PORT", 3000, 0, 65535),
  HOST: z.string().optional().default("0.0.0.0"),
  TRUST_PROXY: trustProxy,
  METRICS_PORT: int("METRICS_PORT", 9464, 0, 65535),
  METRICS_HOST: z.string().trim().optional(),
  METRICS_TOKEN: z
    .string()
    .trim()
    .optional()
    .transform((v) => v || undefined)
    .refine((v) => v === undefined || v.length >= 16, { error: "METRICS_TOKEN must be at least 16 characters" }),
  WHATSAPP_VERIFY_TOKEN: required("WHATSAPP_VERIFY_TOKEN"),
  WHATSAPP_APP_SECRET: required("WHATSAPP_APP_SECRET"),
  WHATSAPP_ACCESS_TOKEN: required("WHATSAPP_ACCESS_TOKEN"),
  GRAPH_API_BASE_URL: url("GRAPH_API_BASE_URL", "https://graph.facebook.com"),
  GRAPH_API_VERSION: z
    .string()
    .optional()
    .default("v24.0")
    .refine((v) => /^v\d+\.\d+$/.test(v), { error: 'GRAPH_API_VERSION must look like "v24.0"' }),
  GRAPH_TIMEOUT_MS: int("GRAPH_TIMEOUT_MS", 15_000, 100, 120_000),
  SEND_RECONCILE_WAIT_MS: int("SEND_RECONCILE_WAIT_MS", 15_000, 0, 3_600_000),
  ANTHROPIC_API_KEY: required("ANTHROPIC_API_KEY"),
  ANTHROPIC_BASE_URL: url("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
  ANTHROPIC_MODEL: z.string().optional().default("claude-haiku-4-5"),
  ANTHROPIC_MAX_TOKENS: int("ANTHROPIC_MAX_TOKENS", 1024, 1, 64_000),
  ANTHROPIC_TIMEOUT_MS: int("ANTHROPIC_TIMEOUT_MS", 60_000, 100, 600_000),
  SYSTEM_PROMPT: z.string().optional(),
  SYSTEM_PROMPT_FILE: z.string().optional(),
  PHONE_NUMBERS_FILE: z.string().optional(),
  HISTORY_MESSAGES: int("HISTORY_MESSAGES", 20, 0, 200),
  HISTORY_TOKEN_BUDGET: int("HISTORY_TOKEN_BUDGET", 4000, 0, 150_000),
  REDIS_URL: url("REDIS_URL", "redis://127.0.0.1:6379").refine((v) => /^rediss?:/.test(v), {
    error: "REDIS_URL must start with redis:// or rediss://",
  }),
  REDIS_CLUSTER_NODES: hostPorts("REDIS_CLUSTER_NODES"),
  REDIS_SENTINELS: hostPorts("REDIS_SENTINELS"),
  REDIS_SENTINEL_NAME: z.string().trim().optional(),
  REDIS_USERNAME: z.string().optional(),
  REDIS_PASSWORD: z.string().optional(),
  REDIS_SENTINEL_PASSWORD: z.string().optional(),
  REDIS_TLS: z
    .enum(["true", "false"], { error: 'REDIS_TLS must be "true" or "false"' })
    .optional()
    .transform((v) => v === "true"),
  REDIS_TLS_CA: z.string().trim().optional(),
  REDIS_WAIT_REPLICAS: optionalInt("REDIS_WAIT_REPLICAS", 0, 16),
  // Below the web connection's 2 s command timeout (src/queue/redis.ts): a WAIT holds that connection.
  REDIS_WAIT_TIMEOUT_MS: int("REDIS_WAIT_TIMEOUT_MS", 500, 1, 1500),
  QUEUE_PREFIX: z
    .string()
    .optional()
    .default("{wa}")
    .refine((v) => /^\{[^{}]+\}$/.test(v), { error: 'QUEUE_PREFIX must be a Redis hash tag such as "{wa}"' }),
  DATABASE_POOL_SIZE: int("DATABASE_POOL_SIZE", 30, 1, 1000),
  DATABASE_URL: required("DATABASE_URL").refine((v) => /^postgres(ql)?:\/\//.test(v), {
    error: "DATABASE_URL must be a postgres:// connection string",
  }),
  ADMIN_TOKEN: required("ADMIN_TOKEN").refine((v) => v.length >= 16, {
    error: "ADMIN_TOKEN must be at least 16 characters",
  }),
  ADMIN_SECURE_COOKIES: z
    .enum(["true", "false"], { error: 'ADMIN_SECURE_COOKIES must be "true" or "false"' })
    .optional()
    .default("true")
    .transform((v) => v === "true"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).optional().default("info"),
  REPLY_DEBOUNCE_MS: int("REPLY_DEBOUNCE_MS", 1500, 0, 60_000),
  REPLY_CONCURRENCY: int("REPLY_CONCURRENCY", 50, 1, 1000),
  INBOUND_CONCURRENCY: int("INBOUND_CONCURRENCY", 4, 1, 1000),
  JOB_ATTEMPTS: int("JOB_ATTEMPTS", 8, 1, 100),
  RETRY_BASE_DELAY_MS: int("RETRY_BASE_DELAY_MS", 2000, 1, 3_600_000),
  RETRY_MAX_DELAY_MS: int("RETRY_MAX_DELAY_MS", 300_000, 1, 86_400_000),
  JOB_LOCK_MS: int("JOB_LOCK_MS", 30_000, 500, 600_000),
  RECONCILE_INTERVAL_MS: int("RECONCILE_INTERVAL_MS", 60_000, 100, 86_400_000),
  RECONCILE_AFTER_MS: int("RECONCILE_AFTER_MS", 120_000, 0, 7 * 86_400_000),
  SHUTDOWN_TIMEOUT_MS: int("SHUTDOWN_TIMEOUT_MS", 25_000, 0, 600_000),
  MEDIA_REPLY: sayOrNothing("Thanks! I can read text, images and PDFs, but not voice notes or videos. Could you write your question?"),
  DOCUMENT_REPLY: sayOrNothing("I can read PDFs and images, but not this kind of file. Could you send it as a PDF, or write the question?"),
  MEDIA_MAX_BYTES: int("MEDIA_MAX_BYTES", 5 * 1024 * 1024, 1024, 32 * 1024 * 1024),
  FALLBACK_REPLY: sayOrNothing("Sorry, I can't open this kind of message. Could you write it as text?"),
  WELCOME_REPLY: sayOrNothing(""),
  OPT_OUT_KEYWORDS: keywords("stop,unsubscribe,parar,sair,baja,cancelar"),
  OPT_IN_KEYWORDS: keywords("start,unstop,iniciar,voltar,alta"),
  OPT_OUT_REPLY: sayOrNothing("You won't get more automatic replies. Send START to turn them back on."),
  OPT_IN_REPLY: sayOrNothing("Welcome back! Automatic replies are on again."),
  HANDOFF_KEYWORDS: keywords("human,agent,person,humano,atendente,agente,persona"),
  HANDOFF_REPLY: sayOrNothing("Got it: a person from our team will answer you here."),
  HUMAN_REPLY_PAUSE_MINUTES: int("HUMAN_REPLY_PAUSE_MINUTES", 30, 0, 7 * 24 * 60),
  OTEL_EXPORTER_OTLP_ENDPOINT: optionalHttpUrl("OTEL_EXPORTER_OTLP_ENDPOINT"),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: optionalHttpUrl("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
  OTEL_EXPORTER_OTLP_HEADERS: otlpHeaders,
  OTEL_SERVICE_NAME: z
    .string()
    .trim()
    .optional()
    .transform((v) => v || undefined),
  OTEL_SDK_DISABLED: z
    .enum(["true", "false", ""], { error: 'OTEL_SDK_DISABLED must be "true" or "false"' })
    .optional()
    .transform((v) => v === "true"),
});

/** Per business number (`phone_number_id`): its own system prompt, and a template for when the window has closed. */
const numberSettingsSchema = z
  .object({
    systemPrompt: z.string().trim().min(1).optional(),
    systemPromptFile: z.string().min(1).optional(),
    windowClosedTemplate: z
      .object({ name: z.string().min(1), language: z.string().min(2) })
      .strict()
      .optional(),
  })
  .strict();
const numbersFileSchema = z.record(z.string(), numberSettingsSchema);

export interface NumberSettings {
  readonly systemPrompt?: string;
  readonly windowClosedTemplate?: { readonly name: string; readonly language: string };
}

function loadNumbers(path: string, problems: string[]): ReadonlyMap<string, NumberSettings> {
  const numbers = new Map<string, NumberSettings>();
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    problems.push(`PHONE_NUMBERS_FILE cannot be read as JSON: ${(error as Error).message}`);
    return numbers;
  }
  const parsed = numbersFileSchema.safeParse(raw);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) problems.push(`PHONE_NUMBERS_FILE ${issue.path.join(".") || "(root)"}: ${issue.message}`);
    return numbers;
  }
  for (const [id, settings] of Object.entries(parsed.data)) {
    if (!/^\d+$/.test(id)) {
      problems.push(`PHONE_NUMBERS_FILE ${id}: keys must be phone_number_id digits`);
      continue;
    }
    let systemPrompt = settings.systemPrompt;
    if (settings.systemPromptFile) {
      try {
        systemPrompt = readFileSync(resolve(dirname(path), settings.systemPromptFile), "utf8").trim();
      } catch (error) {
        problems.push(`PHONE_NUMBERS_FILE ${id}.systemPromptFile cannot be read: ${(error as Error).message}`);
      }
    }
    numbers.set(id, {
      ...(systemPrompt ? { systemPrompt } : {}),
      ...(settings.windowClosedTemplate ? { windowClosedTemplate: settings.windowClosedTemplate } : {}),
    });
  }
  return numbers;
}

/** Every variable the configuration reads, for keeping .env.example in step. */
export const ENV_VARIABLES: readonly string[] = Object.keys(envSchema.shape);

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
   * 1 for a cluster or sentinel set, 0 for one server, whose AOF is its copy).
   */
  readonly redisWait: { readonly replicas: number; readonly timeoutMs: number };
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
function tracesUrl(
  e: Pick<z.output<typeof envSchema>, "OTEL_EXPORTER_OTLP_ENDPOINT" | "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" | "OTEL_SDK_DISABLED">,
): string | undefined {
  if (e.OTEL_SDK_DISABLED) return undefined;
  if (e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return e.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (e.OTEL_EXPORTER_OTLP_ENDPOINT) return `${e.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, "")}/v1/traces`;
  return undefined;
}

type RedisVariables = Pick<
  z.output<typeof envSchema>,
  | "REDIS_URL"
  | "REDIS_CLUSTER_NODES"
  | "REDIS_SENTINELS"
  | "REDIS_SENTINEL_NAME"
  | "REDIS_USERNAME"
  | "REDIS_PASSWORD"
  | "REDIS_SENTINEL_PASSWORD"
  | "REDIS_TLS"
  | "REDIS_TLS_CA"
>;

/** The one Redis topology the variables name, or problems saying why they name none or two. */
function redisTarget(e: RedisVariables, problems: string[]): RedisTarget | undefined {
  let ca: string | undefined;
  if (e.REDIS_TLS_CA) {
    try {
      ca = readFileSync(e.REDIS_TLS_CA, "utf8");
    } catch (error) {
      problems.push(`REDIS_TLS_CA cannot be read: ${(error as Error).message}`);
    }
  }
  const tls = e.REDIS_TLS || e.REDIS_TLS_CA ? { ca } : undefined;
  const auth = { username: e.REDIS_USERNAME || undefined, password: e.REDIS_PASSWORD || undefined, tls };
  if (e.REDIS_CLUSTER_NODES && e.REDIS_SENTINELS) {
    problems.push("REDIS_CLUSTER_NODES and REDIS_SENTINELS are both set: Redis is either a Cluster or a Sentinel-watched master, set one");
    return undefined;
  }
  if (e.REDIS_CLUSTER_NODES) return { kind: "cluster", nodes: e.REDIS_CLUSTER_NODES, ...auth };
  if (e.REDIS_SENTINELS) {
    if (!e.REDIS_SENTINEL_NAME) {
      problems.push("REDIS_SENTINEL_NAME is required with REDIS_SENTINELS: the name of the master the Sentinels watch (sentinel monitor <name> …)");
      return undefined;
    }
    return { kind: "sentinel", sentinels: e.REDIS_SENTINELS, name: e.REDIS_SENTINEL_NAME, sentinelPassword: e.REDIS_SENTINEL_PASSWORD || undefined, ...auth };
  }
  if (e.REDIS_SENTINEL_NAME) problems.push("REDIS_SENTINEL_NAME is set but REDIS_SENTINELS is not: name the Sentinels (host:port,…)");
  if (e.REDIS_USERNAME || e.REDIS_PASSWORD) {
    problems.push(
      "REDIS_USERNAME and REDIS_PASSWORD are for a cluster or sentinel set; a single Redis takes them in REDIS_URL (redis://user:password@host:6379)",
    );
  }
  if (e.REDIS_TLS && !e.REDIS_URL.startsWith("rediss:"))
    problems.push("REDIS_TLS is for a cluster or sentinel set; a single Redis says TLS with rediss:// in REDIS_URL");
  return { kind: "single", url: e.REDIS_URL, tls: e.REDIS_URL.startsWith("rediss:") || ca ? { ca } : undefined };
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
    redisWait: { replicas: e.REDIS_WAIT_REPLICAS ?? (redis.kind === "single" ? 0 : 1), timeoutMs: e.REDIS_WAIT_TIMEOUT_MS },
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
