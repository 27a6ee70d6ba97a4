import { createHash } from "node:crypto";
import { CACHE_TTL_MS, type CacheTtl, canCacheAt, estimateTokens, MAX_CACHE_BREAKPOINTS } from "../../src/ai/cache-breakpoints.ts";

/**
 * Anthropic's prompt cache, as the fake Messages API keeps it, by the rules of
 * https://platform.claude.com/docs/en/build-with-claude/prompt-caching (checked 2026-12-02):
 * - the prompt is tools, then system, then messages; a `cache_control` breakpoint (or the
 *   request's top-level one, on its last block) caches the prefix up to the block it marks,
 *   only when that prefix reaches the model's minimum (src/ai/models.ts): below it, nothing;
 * - an entry lives 5 minutes ("5m", the default) or an hour ("1h") from its last use;
 * - a later request reads the longest live entry it starts with, looked for at its
 *   breakpoints and up to 20 blocks before each;
 * - at most 4 breakpoints, and no 1-hour one after a 5-minute one: else a 400;
 * - billing: read up to the highest hit (A), 1-hour writes up to the last 1-hour breakpoint
 *   after it (B), 5-minute writes up to the last breakpoint (C), plain input after C.
 * Tokens are estimated with the one rule of src/ai/cache-breakpoints.ts, from the text a block
 * carries (images and base64 PDFs count nothing: Anthropic counts those by pixels and pages).
 */

export interface CacheableRequest {
  model: string;
  tools?: unknown;
  system?: unknown;
  messages: { role: string; content: unknown }[];
  cache_control?: unknown;
}

export interface CacheUsage {
  input_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
}

/** One block of the prompt: the hash of the prefix it ends, its characters, and its breakpoint's TTL. */
interface Position {
  prefix: string;
  chars: number;
  ttl: CacheTtl | undefined;
}

/** Entries kept at most; a long demo run forgets the expired, then everything. */
const MAX_ENTRIES = 2000;
/** How far before a breakpoint Anthropic looks for an entry to read. */
const LOOKBACK_BLOCKS = 20;

export class PromptCache {
  private readonly entries = new Map<string, { ttl: CacheTtl; expiresAt: number }>();

  constructor(private readonly now: () => number) {}

  /** Why Anthropic would refuse `request`'s breakpoints (a 400), or undefined when it would not. */
  refusal(request: CacheableRequest): string | undefined {
    const ttls = positionsOf(request).flatMap((p) => (p.ttl ? [p.ttl] : []));
    if (ttls.length > MAX_CACHE_BREAKPOINTS) return `A maximum of ${MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found ${ttls.length}.`;
    const firstShort = ttls.indexOf("5m");
    if (firstShort >= 0 && ttls.slice(firstShort).includes("1h")) return "A ttl='1h' cache_control block must not come after a ttl='5m' cache_control block.";
    return undefined;
  }

  /** The usage Anthropic reports for `request` when it answers it, reading and writing the cache. */
  account(request: CacheableRequest): CacheUsage {
    const positions = positionsOf(request);
    const breakpoints = positions.flatMap((p, i) => (p.ttl ? [i] : []));
    const now = this.now();
    const tokensTo = cumulativeTokens(request.model, positions);
    const live = (i: number) => {
      const entry = this.entries.get(positions[i]!.prefix);
      return entry && entry.expiresAt > now ? entry : undefined;
    };
    let hit = -1; // the last block of the longest prefix read back
    for (const bp of breakpoints) for (let i = bp; i >= Math.max(0, bp - LOOKBACK_BLOCKS) && i > hit; i--) if (live(i)) hit = i;
    // Using an entry refreshes it, and the entries inside the prefix it covers.
    for (let i = 0; i <= hit; i++) {
      const entry = live(i);
      if (entry) entry.expiresAt = now + CACHE_TTL_MS[entry.ttl];
    }

    const cacheable = breakpoints.filter((i) => i > hit && canCacheAt(request.model, tokensTo[i]!));
    const a = hit >= 0 ? tokensTo[hit]! : 0;
    const lastHour = cacheable.findLast((i) => positions[i]!.ttl === "1h");
    const b = lastHour === undefined ? a : tokensTo[lastHour]!;
    const last = cacheable.at(-1);
    const c = last === undefined ? a : tokensTo[last]!;
    this.forgetIfFull(now);
    for (const i of cacheable) this.write(positions[i]!.prefix, positions[i]!.ttl!, now);

    const total = tokensTo.at(-1) ?? 0;
    return {
      input_tokens: total - c,
      cache_read_input_tokens: a,
      cache_creation_input_tokens: c - a,
      cache_creation: { ephemeral_5m_input_tokens: c - b, ephemeral_1h_input_tokens: b - a },
    };
  }

  private write(prefix: string, ttl: CacheTtl, now: number): void {
    const entry = this.entries.get(prefix);
    const expiresAt = now + CACHE_TTL_MS[ttl];
    if (entry && entry.expiresAt > now) {
      entry.expiresAt = Math.max(entry.expiresAt, expiresAt);
      if (ttl === "1h") entry.ttl = ttl;
    } else {
      this.entries.set(prefix, { ttl, expiresAt });
    }
  }

  private forgetIfFull(now: number): void {
    if (this.entries.size < MAX_ENTRIES) return;
    for (const [prefix, entry] of this.entries) if (entry.expiresAt <= now) this.entries.delete(prefix);
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear();
  }
}

/** The prompt's blocks in Anthropic's order, each with the hash of the prefix it ends (per model: caches are). */
function positionsOf(request: CacheableRequest): Position[] {
  const blocks: { role: string; block: unknown }[] = [
    ...listOf(request.tools).map((block) => ({ role: "tools", block })),
    ...listOf(request.system).map((block) => ({ role: "system", block })),
    ...request.messages.flatMap((m) => listOf(m.content).map((block) => ({ role: m.role, block }))),
  ];
  const automatic = ttlOf(request.cache_control);
  let prefix = createHash("sha256").update(request.model).digest("hex");
  return blocks.map(({ role, block }, i) => {
    const { cache_control, ...rest } = typeof block === "object" && block !== null ? (block as Record<string, unknown>) : { text: block };
    prefix = createHash("sha256")
      .update(`${prefix}\u0000${role}\u0000${JSON.stringify(rest)}`)
      .digest("hex");
    const ttl = ttlOf(cache_control) ?? (i === blocks.length - 1 ? automatic : undefined);
    return { prefix, chars: charsOf(block), ttl };
  });
}

/** A string is one text block; a list is its blocks. */
const listOf = (content: unknown): unknown[] => (Array.isArray(content) ? content : typeof content === "string" ? [{ type: "text", text: content }] : []);

/** The TTL a `cache_control` asks for, or undefined for none (an unknown ttl is taken as the default, 5 minutes). */
function ttlOf(cacheControl: unknown): CacheTtl | undefined {
  if (typeof cacheControl !== "object" || cacheControl === null) return undefined;
  return (cacheControl as { ttl?: unknown }).ttl === "1h" ? "1h" : "5m";
}

function cumulativeTokens(model: string, positions: Position[]): number[] {
  let chars = 0;
  return positions.map((p) => {
    chars += p.chars;
    return estimateTokens(model, chars);
  });
}

const str = (value: unknown) => (typeof value === "string" ? value.length : 0);

/** The characters a block carries to the model: its text, a tool call's input, a result's content. */
function charsOf(block: unknown): number {
  if (typeof block === "string") return block.length;
  if (Array.isArray(block)) return block.reduce((n: number, b) => n + charsOf(b), 0);
  if (typeof block !== "object" || block === null) return 0;
  const b = block as Record<string, unknown>;
  switch (b.type) {
    case "text":
      return str(b.text);
    case "thinking":
      return str(b.thinking);
    case "tool_use":
      return str(b.name) + JSON.stringify(b.input ?? {}).length;
    case "tool_result":
      return charsOf(b.content);
    case "search_result":
      return str(b.source) + str(b.title) + charsOf(b.content);
    case "document": {
      const source = b.source as { type?: string; data?: unknown; content?: unknown } | undefined;
      const body = source?.type === "text" ? str(source.data) : source?.type === "content" ? charsOf(source.content) : 0;
      return str(b.title) + str(b.context) + body;
    }
    case "image":
      return 0;
    default: {
      const { cache_control: _ignored, ...rest } = b;
      return JSON.stringify(rest).length; // a tool definition, or a block this fake does not know
    }
  }
}
