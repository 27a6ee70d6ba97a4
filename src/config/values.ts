import { isIP } from "node:net";
import { z } from "zod";

/**
 * How one environment variable's text becomes a value: each parser names its variable in the
 * message it reports, so start-up can list every bad variable at once (src/config/env.ts).
 */

export const required = (name: string) =>
  z
    .string({ error: `${name} is required` })
    .trim()
    .min(1, { error: `${name} is required` });

/** An integer in [min, max]; undefined when unset, for a default that depends on other variables. */
export const optionalInt = (name: string, min: number, max: number) =>
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

export const int = (name: string, fallback: number, min: number, max: number) => optionalInt(name, min, max).transform((value) => value ?? fallback);

/**
 * A URL as it may be shown in an error: whatever precedes its last "@" is credentials
 * (`redis://:password@host`), and start-up errors land in terminals and log collectors.
 * Works on strings that do not parse, which are the ones we echo.
 */
export function redactUrl(raw: string): string {
  return raw.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[\s\S]*@/i, "$1***@");
}

export const url = (name: string, fallback: string) =>
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
export const optionalHttpUrl = (name: string) =>
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
export const otlpHeaders = z
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
export const hostPorts = (name: string) =>
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
export const trustProxy = z
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
export const keywords = (fallback: string) =>
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
export const sayOrNothing = (fallback: string) =>
  z
    .string()
    .optional()
    .transform((value) => (value ?? fallback).trim());

/**
 * An http(s) URL that may carry a credential in its path or query (a Slack or Teams incoming
 * webhook's token): undefined when unset; a bad one is named, never echoed.
 */
export const optionalSecretHttpUrl = (name: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      const raw = value?.trim() ?? "";
      if (raw === "") return undefined;
      if (!URL.canParse(raw) || !/^https?:$/.test(new URL(raw).protocol)) {
        ctx.addIssue({ code: "custom", message: `${name} must be an http:// or https:// URL (its value is not shown: it may hold a token)` });
        return z.NEVER;
      }
      return raw;
    });

/** SMTP_URL: nodemailer's `smtp://user:password@host:port` or `smtps://…`; never echoed (its password). */
export const optionalSmtpUrl = (name: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      const raw = value?.trim() ?? "";
      if (raw === "") return undefined;
      if (!URL.canParse(raw) || !/^smtps?:$/.test(new URL(raw).protocol) || new URL(raw).hostname === "") {
        ctx.addIssue({ code: "custom", message: `${name} must be an smtp:// or smtps:// URL with a host (its value is not shown: it may hold a password)` });
        return z.NEVER;
      }
      return raw;
    });

/** One plain address: no display names, nothing a header could be smuggled through. */
const EMAIL_ADDRESS = /^[^\s@<>,;"]+@[^\s@<>,;"]+\.[^\s@<>,;"]+$/;

/** Comma-separated e-mail addresses; empty or unset is none. Bad entries are named. */
export const emailList = (name: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx): string[] => {
      const entries = (value ?? "")
        .split(",")
        .map((e) => e.trim())
        .filter(Boolean);
      const bad = entries.filter((entry) => !EMAIL_ADDRESS.test(entry));
      if (bad.length > 0) {
        ctx.addIssue({
          code: "custom",
          message: `${name} must be e-mail addresses separated by commas; not an address: ${bad.map((b) => `"${b}"`).join(", ")}`,
        });
        return z.NEVER;
      }
      return entries;
    });

/**
 * The text-search configurations Postgres has built in (`SELECT cfgname FROM pg_ts_config` on
 * Postgres 15): 'simple' lower-cases words and stems none; each language's stems its words
 * ('english' reads "returns" as "return") and drops its common ones.
 */
export const BUILT_IN_TEXT_SEARCH_CONFIGURATIONS: readonly string[] = [
  "simple",
  "arabic",
  "armenian",
  "basque",
  "catalan",
  "danish",
  "dutch",
  "english",
  "finnish",
  "french",
  "german",
  "greek",
  "hindi",
  "hungarian",
  "indonesian",
  "irish",
  "italian",
  "lithuanian",
  "nepali",
  "norwegian",
  "portuguese",
  "romanian",
  "russian",
  "serbian",
  "spanish",
  "swedish",
  "tamil",
  "turkish",
  "yiddish",
];

/** A configuration of one's own (CREATE TEXT SEARCH CONFIGURATION), named with its schema: Postgres checks it exists when it is used. */
const QUALIFIED_CONFIGURATION = /^[a-z_][a-z0-9_$]*\.[a-z_][a-z0-9_$]*$/;

/**
 * Postgres's text-search configuration, by name: one Postgres has built in (checked here, so a
 * misspelt language stops start-up rather than every search), or a schema-qualified one of the
 * database's own. Names are case-insensitive, as Postgres's unquoted names are.
 */
export const textSearchConfiguration = (name: string, fallback: string) =>
  z
    .string()
    .optional()
    .transform((value, ctx) => {
      const raw = value?.trim().toLowerCase() || fallback;
      if (BUILT_IN_TEXT_SEARCH_CONFIGURATIONS.includes(raw) || QUALIFIED_CONFIGURATION.test(raw)) return raw;
      ctx.addIssue({
        code: "custom",
        message: `${name} must be a Postgres text-search configuration (${BUILT_IN_TEXT_SEARCH_CONFIGURATIONS.join(", ")}) or one of the database's own named with its schema (myschema.myconfig), got "${value}"`,
      });
      return z.NEVER;
    });

/** WhatsApp's limit for a reply button's title (WHATSAPP.md, interactive messages). */
export const BUTTON_TITLE_MAX = 20;

/**
 * CSAT_BUTTONS: the three reply buttons' titles, good, okay and bad in that order, separated by
 * "|" (a title may hold a comma); each at most 20 characters, as WhatsApp requires.
 */
export const csatButtons = z
  .string()
  .optional()
  .transform((value, ctx) => {
    if (value === undefined || value.trim() === "") return ["👍 Good", "😐 Okay", "👎 Bad"] as const;
    const titles = value.split("|").map((t) => t.trim());
    if (titles.length !== 3 || titles.some((t) => t === "")) {
      ctx.addIssue({ code: "custom", message: `CSAT_BUTTONS must be three titles separated by "|" (good|okay|bad), got ${titles.length}` });
      return z.NEVER;
    }
    // Characters as the customer sees them: an emoji is one, whatever its UTF-16 length.
    const long = titles.find((t) => [...t].length > BUTTON_TITLE_MAX);
    if (long !== undefined) {
      ctx.addIssue({
        code: "custom",
        message: `CSAT_BUTTONS: each title must be at most ${BUTTON_TITLE_MAX} characters (WhatsApp's limit), "${long}" is longer`,
      });
      return z.NEVER;
    }
    return titles as [string, string, string];
  });
