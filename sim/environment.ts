import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { DEMO_BUSINESS_ACCOUNT_ID } from "./meta/graph.ts";

/**
 * The demo's environment, composed here rather than read from `.env` or the shell: fresh
 * secrets every run, the simulated Meta as the only Graph API, the offline responder as
 * Claude unless ANTHROPIC_API_KEY is set, the local Postgres (schema `demo`) and Redis
 * (prefix `{demo}`). Production settings cannot leak in, because none is read; the one that
 * would be dangerous to ignore silently, GRAPH_API_BASE_URL, makes the demo refuse to start.
 */

export const DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/postgres?schema=demo";
export const DEFAULT_REDIS_URL = "redis://127.0.0.1:6379";
export const DEFAULT_QUEUE_PREFIX = "{demo}";
export const DEFAULT_PORT = 3000;
/** The backend's GRAPH_TIMEOUT_MS in the demo, short so a fault shows in seconds; the sandbox's "timeout" answers just after it. */
export const DEMO_GRAPH_TIMEOUT_MS = 3000;

/** The demo stops here, saying why; nothing has been touched yet. */
export class DemoRefusal extends Error {
  override readonly name = "DemoRefusal";
}

/** The few variables the demo reads, all optional. */
export interface DemoSettings {
  databaseUrl: string;
  redisUrl: string;
  queuePrefix: string;
  /** Preferred port; a free one is taken when it is busy. */
  port: number;
  /** Real Claude, when a key is given. */
  anthropic: { apiKey: string; baseUrl: string | undefined; model: string | undefined } | undefined;
  /** A real transcriber for voice notes, when TRANSCRIBE_BASE_URL is given; else the offline one. */
  transcribe: { baseUrl: string; apiKey: string | undefined; model: string | undefined } | undefined;
  logLevel: string;
}

/** Variables of a real deployment that the demo leaves alone: worth saying so when they are set. */
const NOT_READ = ["DATABASE_URL", "REDIS_URL", "WHATSAPP_ACCESS_TOKEN", "WHATSAPP_APP_SECRET", "WHATSAPP_VERIFY_TOKEN", "ADMIN_TOKEN", "PORT"];

/**
 * Reads DEMO_PORT, DEMO_DATABASE_URL, DEMO_REDIS_URL, DEMO_QUEUE_PREFIX, ANTHROPIC_API_KEY (with
 * ANTHROPIC_BASE_URL and ANTHROPIC_MODEL), TRANSCRIBE_BASE_URL (with TRANSCRIBE_API_KEY and
 * TRANSCRIBE_MODEL) and LOG_LEVEL; refuses GRAPH_API_BASE_URL unless it
 * is the simulator's own address.
 */
export function demoSettings(env: Record<string, string | undefined>, simulatorUrl?: string): DemoSettings {
  refuseForeignGraph(env, simulatorUrl);
  const databaseUrl = withSchema(env.DEMO_DATABASE_URL?.trim() || DEFAULT_DATABASE_URL);
  const schema = new URL(databaseUrl).searchParams.get("schema");
  if (schema === "public")
    throw new DemoRefusal(
      'DEMO_DATABASE_URL names the schema "public": the demo resets its schema at every start, so give it one of its own (e.g. ?schema=demo).',
    );
  const port = env.DEMO_PORT?.trim() ? Number(env.DEMO_PORT) : DEFAULT_PORT;
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new DemoRefusal(`DEMO_PORT must be a port number (0 for any free one), got "${env.DEMO_PORT}"`);
  const prefix = env.DEMO_QUEUE_PREFIX?.trim() || DEFAULT_QUEUE_PREFIX;
  const apiKey = env.ANTHROPIC_API_KEY?.trim();
  const transcribeUrl = env.TRANSCRIBE_BASE_URL?.trim();
  return {
    databaseUrl,
    redisUrl: env.DEMO_REDIS_URL?.trim() || DEFAULT_REDIS_URL,
    queuePrefix: prefix,
    port,
    anthropic: apiKey ? { apiKey, baseUrl: env.ANTHROPIC_BASE_URL?.trim() || undefined, model: env.ANTHROPIC_MODEL?.trim() || undefined } : undefined,
    transcribe: transcribeUrl
      ? { baseUrl: transcribeUrl, apiKey: env.TRANSCRIBE_API_KEY?.trim() || undefined, model: env.TRANSCRIBE_MODEL?.trim() || undefined }
      : undefined,
    logLevel: env.LOG_LEVEL?.trim() || "warn",
  };
}

/**
 * The demo never talks to Meta: a GRAPH_API_BASE_URL in the environment means someone expects
 * a real (or another) Graph API, so the demo stops rather than quietly ignoring it.
 */
export function refuseForeignGraph(env: Record<string, string | undefined>, simulatorUrl?: string): void {
  const given = env.GRAPH_API_BASE_URL?.trim();
  if (!given) return;
  if (simulatorUrl && given.replace(/\/+$/, "") === simulatorUrl.replace(/\/+$/, "")) return;
  throw new DemoRefusal(
    `npm run demo talks only to its own simulated Meta, but GRAPH_API_BASE_URL is set to "${given.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^/]*@/i, "$1***@")}". ` +
      "Unset it to run the demo (it reads no .env and needs no keys), or use npm start for a real deployment.",
  );
}

/** Production variables set in this environment, which the demo does not read. */
export function ignoredVariables(env: Record<string, string | undefined>): string[] {
  return NOT_READ.filter((name) => env[name]?.trim());
}

/** Fresh secrets of this run: the simulated Meta signs with the app secret, the backend checks it. */
export interface DemoSecrets {
  appSecret: string;
  verifyToken: string;
  accessToken: string;
  adminToken: string;
  /** The offline responder's API key (the Claude client sends one; nobody checks it). */
  offlineApiKey: string;
}

export function freshSecrets(): DemoSecrets {
  const secret = () => randomBytes(24).toString("base64url");
  return { appSecret: secret(), verifyToken: secret(), accessToken: secret(), adminToken: secret(), offlineApiKey: `offline-demo-${secret()}` };
}

/** The backend's environment for the demo, to be read by loadSettings like any other. */
export function demoEnvironment(
  settings: DemoSettings,
  secrets: DemoSecrets,
  urls: { graph: string; offlineClaude: string; offlineTranscriber: string },
  phoneNumbersFile: string,
): Record<string, string> {
  const claude = settings.anthropic;
  return {
    HOST: "127.0.0.1",
    PORT: String(settings.port),
    METRICS_PORT: "0",
    WHATSAPP_VERIFY_TOKEN: secrets.verifyToken,
    WHATSAPP_APP_SECRET: secrets.appSecret,
    WHATSAPP_ACCESS_TOKEN: secrets.accessToken,
    GRAPH_API_BASE_URL: urls.graph,
    // Its approved templates, for staff to send past the 24-hour window (the simulated Meta lists them).
    WHATSAPP_BUSINESS_ACCOUNT_ID: DEMO_BUSINESS_ACCOUNT_ID,
    // Short, so a fault shows in seconds rather than minutes.
    GRAPH_TIMEOUT_MS: String(DEMO_GRAPH_TIMEOUT_MS),
    SEND_RECONCILE_WAIT_MS: "3000",
    JOB_ATTEMPTS: "3",
    RETRY_BASE_DELAY_MS: "500",
    RETRY_MAX_DELAY_MS: "4000",
    REPLY_DEBOUNCE_MS: "400",
    SHUTDOWN_TIMEOUT_MS: "5000",
    ANTHROPIC_API_KEY: claude?.apiKey ?? secrets.offlineApiKey,
    ANTHROPIC_BASE_URL: claude ? (claude.baseUrl ?? "https://api.anthropic.com") : urls.offlineClaude,
    ...(claude?.model ? { ANTHROPIC_MODEL: claude.model } : {}),
    // Voice notes: the real transcriber when given, else the offline one (sim/offline-transcriber.ts).
    TRANSCRIBE_BASE_URL: settings.transcribe?.baseUrl ?? urls.offlineTranscriber,
    ...(settings.transcribe?.apiKey ? { TRANSCRIBE_API_KEY: settings.transcribe.apiKey } : {}),
    ...(settings.transcribe?.model ? { TRANSCRIBE_MODEL: settings.transcribe.model } : {}),
    SYSTEM_PROMPT:
      "You are the WhatsApp assistant of the Demo Shop, a made-up shoe shop in a software demo, answering its customers. " +
      "Answer only from the shop's documents and tools; when they do not say, call handoff_to_human rather than guess. " +
      "Decline requests that have nothing to do with the shop. Answer briefly and kindly, in the customer's language; plain text only.",
    // What replies cost (the staff page's Costs view), with the sample rate card.
    META_RATES_FILE: fileURLToPath(new URL("../fixtures/meta-rates.example.json", import.meta.url)),
    // The shop's knowledge files and its order and booking tools (sim/business/).
    PHONE_NUMBERS_FILE: phoneNumbersFile,
    DATABASE_URL: settings.databaseUrl,
    DATABASE_POOL_SIZE: "10",
    REDIS_URL: settings.redisUrl,
    QUEUE_PREFIX: settings.queuePrefix,
    ADMIN_TOKEN: secrets.adminToken,
    // The staff page is served over plain http://127.0.0.1.
    ADMIN_SECURE_COOKIES: "false",
    LOG_LEVEL: settings.logLevel,
  };
}

function withSchema(databaseUrl: string): string {
  let url: URL;
  try {
    url = new URL(databaseUrl);
  } catch {
    throw new DemoRefusal("DEMO_DATABASE_URL must be a postgres:// connection string");
  }
  if (!url.searchParams.get("schema")) url.searchParams.set("schema", "demo");
  return url.toString();
}
