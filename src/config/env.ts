import { z } from "zod";
import {
  csatButtons,
  emailList,
  hostPorts,
  int,
  keywords,
  optionalHttpUrl,
  optionalInt,
  optionalSecretHttpUrl,
  optionalSmtpUrl,
  otlpHeaders,
  required,
  sayOrNothing,
  textSearchConfiguration,
  trustProxy,
  url,
} from "./values.ts";

/** Every variable the process reads, with its parser and default (src/config/values.ts). */
export const envSchema = z.object({
  PORT: int("PORT", 3000, 0, 65535),
  HOST: z.string().optional().default("0.0.0.0"),
  TRUST_PROXY: trustProxy,
  // Meta's bodies are at most 3 MB (WHATSAPP.md §4): seconds of headroom at any sane bandwidth.
  HTTP_REQUEST_TIMEOUT_MS: int("HTTP_REQUEST_TIMEOUT_MS", 10_000, 1000, 300_000),
  // Fastify's default: above the 60 s idle timeout of common load balancers, so none of them
  // sends a request down a connection we are closing.
  HTTP_KEEP_ALIVE_TIMEOUT_MS: int("HTTP_KEEP_ALIVE_TIMEOUT_MS", 72_000, 1000, 3_600_000),
  // Unset: the first free port of DEFAULT_METRICS_PORTS (config.ts), so roles on one host do not collide.
  METRICS_PORT: optionalInt("METRICS_PORT", 0, 65535),
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
  // The WhatsApp Business Account whose approved templates staff may send (optional; digits, as Meta's ids are).
  WHATSAPP_BUSINESS_ACCOUNT_ID: z
    .string()
    .trim()
    .optional()
    .transform((v) => v || undefined)
    .refine((v) => v === undefined || /^\d{1,30}$/.test(v), { error: "WHATSAPP_BUSINESS_ACCOUNT_ID must be digits (the WABA id from WhatsApp Manager)" }),
  GRAPH_TIMEOUT_MS: int("GRAPH_TIMEOUT_MS", 15_000, 100, 120_000),
  SEND_RECONCILE_WAIT_MS: int("SEND_RECONCILE_WAIT_MS", 15_000, 0, 3_600_000),
  ANTHROPIC_API_KEY: required("ANTHROPIC_API_KEY"),
  ANTHROPIC_BASE_URL: url("ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
  // The current Haiku-class model (released 2026-10-07); src/ai/models.ts has its prices and cache minimum.
  ANTHROPIC_MODEL: z.string().optional().default("claude-haiku-5-5"),
  ANTHROPIC_MAX_TOKENS: int("ANTHROPIC_MAX_TOKENS", 1024, 1, 64_000),
  ANTHROPIC_TIMEOUT_MS: int("ANTHROPIC_TIMEOUT_MS", 60_000, 100, 600_000),
  // `npm run eval`'s judge of rubrics (src/eval/judge.ts); unset: ANTHROPIC_MODEL.
  EVAL_JUDGE_MODEL: z
    .string()
    .trim()
    .optional()
    .transform((v) => v || undefined),
  // The cost ledger's prices (src/ai/prices-file.ts, src/costs/rates-file.ts): Claude's beyond src/ai/models.ts, Meta's rate card.
  MODEL_PRICES_FILE: z.string().trim().optional(),
  META_RATES_FILE: z.string().trim().optional(),
  SYSTEM_PROMPT: z.string().optional(),
  SYSTEM_PROMPT_FILE: z.string().optional(),
  PHONE_NUMBERS_FILE: z.string().optional(),
  HISTORY_MESSAGES: int("HISTORY_MESSAGES", 20, 0, 200),
  HISTORY_TOKEN_BUDGET: int("HISTORY_TOKEN_BUDGET", 4000, 0, 150_000),
  // Claude's context is 200k tokens; beside history and the answer, this much knowledge fits whole.
  KNOWLEDGE_TOKEN_BUDGET: int("KNOWLEDGE_TOKEN_BUDGET", 30_000, 0, 150_000),
  // Postgres's text-search configuration for full-text search (knowledge passages): 'simple'
  // stems no language's words, so it serves customers writing in any.
  KNOWLEDGE_LANGUAGE: textSearchConfiguration("KNOWLEDGE_LANGUAGE", "simple"),
  // A knowledgeDir's caps (src/knowledge/walk.ts): every byte of it is held in each worker's memory and indexed.
  KNOWLEDGE_MAX_FILES: int("KNOWLEDGE_MAX_FILES", 2_000, 1, 1_000_000),
  KNOWLEDGE_MAX_BYTES: int("KNOWLEDGE_MAX_BYTES", 50 * 1024 * 1024, 1024, 4 * 1024 * 1024 * 1024),
  TOOL_MAX_STEPS: int("TOOL_MAX_STEPS", 5, 1, 50),
  // All tool calls of one reply together: the customer waits for them.
  TOOL_MAX_MS: int("TOOL_MAX_MS", 30_000, 1000, 600_000),
  // Every byte of a tool's answer is read by Claude at each later step of the reply: it costs.
  TOOL_ANSWER_MAX_BYTES: int("TOOL_ANSWER_MAX_BYTES", 16 * 1024, 256, 1024 * 1024),
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
  REDIS_WAIT_STRICT: z
    .enum(["true", "false"], { error: 'REDIS_WAIT_STRICT must be "true" or "false"' })
    .optional()
    .transform((v) => v === "true"),
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
  // Law 14: staff are told of new dead letters and handoffs (src/notify/), by webhook and/or e-mail.
  STAFF_NOTIFY_WEBHOOK_URL: optionalSecretHttpUrl("STAFF_NOTIFY_WEBHOOK_URL"),
  SMTP_URL: optionalSmtpUrl("SMTP_URL"),
  STAFF_NOTIFY_EMAIL: emailList("STAFF_NOTIFY_EMAIL"),
  STAFF_NOTIFY_EMAIL_FROM: emailList("STAFF_NOTIFY_EMAIL_FROM").refine((v) => v.length <= 1, { error: "STAFF_NOTIFY_EMAIL_FROM must be one address" }),
  STAFF_NOTIFY_BATCH_MS: int("STAFF_NOTIFY_BATCH_MS", 60_000, 100, 86_400_000),
  PUBLIC_BASE_URL: optionalHttpUrl("PUBLIC_BASE_URL"),
  LOG_LEVEL: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).optional().default("info"),
  REPLY_DEBOUNCE_MS: int("REPLY_DEBOUNCE_MS", 1500, 0, 60_000),
  REPLY_CONCURRENCY: int("REPLY_CONCURRENCY", 50, 1, 1000),
  INBOUND_CONCURRENCY: int("INBOUND_CONCURRENCY", 4, 1, 1000),
  JOB_ATTEMPTS: int("JOB_ATTEMPTS", 8, 1, 100),
  RETRY_BASE_DELAY_MS: int("RETRY_BASE_DELAY_MS", 2000, 1, 3_600_000),
  RETRY_MAX_DELAY_MS: int("RETRY_MAX_DELAY_MS", 300_000, 1, 86_400_000),
  JOB_LOCK_MS: int("JOB_LOCK_MS", 30_000, 500, 600_000),
  RECONCILE_INTERVAL_MS: int("RECONCILE_INTERVAL_MS", 60_000, 100, 86_400_000),
  // How long customers' words are kept (issue 35.3): "30d", "12h", "90s"; unset keeps everything.
  RETENTION: z
    .string()
    .trim()
    .optional()
    .transform((v) => v || undefined)
    .refine((v) => v === undefined || /^[1-9]\d{0,5}[smhd]$/.test(v), { error: 'RETENTION must be a duration like "30d", "12h" or "90s"' }),
  RETENTION_SWEEP_SECONDS: int("RETENTION_SWEEP_SECONDS", 3600, 1, 86_400),
  RECONCILE_AFTER_MS: int("RECONCILE_AFTER_MS", 120_000, 0, 7 * 86_400_000),
  SHUTDOWN_TIMEOUT_MS: int("SHUTDOWN_TIMEOUT_MS", 25_000, 0, 600_000),
  MEDIA_REPLY: sayOrNothing("Thanks! I can read text, images and PDFs, but not voice notes or videos. Could you write your question?"),
  DOCUMENT_REPLY: sayOrNothing("I can read PDFs and images, but not this kind of file. Could you send it as a PDF, or write the question?"),
  MEDIA_MAX_BYTES: int("MEDIA_MAX_BYTES", 5 * 1024 * 1024, 1024, 32 * 1024 * 1024),
  // Voice notes, through any OpenAI-compatible /v1/audio/transcriptions (OpenAI, Groq, speaches, LocalAI); unset: MEDIA_REPLY.
  TRANSCRIBE_BASE_URL: optionalHttpUrl("TRANSCRIBE_BASE_URL").refine((v) => v === undefined || !/\/v1\/?$/.test(v), {
    error: "TRANSCRIBE_BASE_URL must not end in /v1: /v1/audio/transcriptions is added to it",
  }),
  TRANSCRIBE_API_KEY: z
    .string()
    .trim()
    .optional()
    .transform((v) => v || undefined),
  TRANSCRIBE_MODEL: z.string().trim().optional().default("whisper-1"),
  FALLBACK_REPLY: sayOrNothing("Sorry, I can't open this kind of message. Could you write it as text?"),
  WELCOME_REPLY: sayOrNothing(""),
  OPT_OUT_KEYWORDS: keywords("stop,unsubscribe,parar,sair,baja,cancelar"),
  OPT_IN_KEYWORDS: keywords("start,unstop,iniciar,voltar,alta"),
  OPT_OUT_REPLY: sayOrNothing("You won't get more automatic replies. Send START to turn them back on."),
  OPT_IN_REPLY: sayOrNothing("Welcome back! Automatic replies are on again."),
  HANDOFF_KEYWORDS: keywords("human,agent,person,humano,atendente,agente,persona"),
  HANDOFF_REPLY: sayOrNothing("Got it: a person from our team will answer you here."),
  HOLDING_REPLY: sayOrNothing("Thanks for your message. A person from our team will get back to you here shortly."),
  // Ask the customer how it went (issue 33.3): unset, never asked.
  CSAT_AFTER_SECONDS: optionalInt("CSAT_AFTER_SECONDS", 1, 7 * 24 * 60 * 60),
  CSAT_EVERY_DAYS: int("CSAT_EVERY_DAYS", 7, 0, 365),
  CSAT_QUESTION: z
    .string()
    .optional()
    .transform((v) => (v ?? "").trim() || "How did we do?")
    .refine((v) => v.length <= 1024, { error: "CSAT_QUESTION must be at most 1024 characters (WhatsApp's limit for an interactive message's body)" }),
  CSAT_BUTTONS: csatButtons,
  CSAT_THANKS: sayOrNothing("Thank you!"),
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

/** Every variable the configuration reads, for keeping .env.example in step. */
export const ENV_VARIABLES: readonly string[] = Object.keys(envSchema.shape);

export type Env = z.output<typeof envSchema>;
