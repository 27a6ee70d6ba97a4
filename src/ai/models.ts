/**
 * The Claude models this project knows: what each costs, the shortest prefix its prompt cache
 * keeps, how it counts tokens, and what a request to it must or may say about thinking. The
 * one table: pricing.ts costs usage from it, cache-breakpoints.ts places breakpoints by it,
 * and the fake Messages API (sim/anthropic/) caches by it.
 *
 * Checked 2026-12-02, from the stored copies of Anthropic's pages:
 * - prices: https://platform.claude.com/docs/en/about-claude/pricing ("Model pricing",
 *   "Long context pricing") and each model's page, e.g.
 *   https://platform.claude.com/docs/en/models/haiku-5-5/overview (Haiku 5.5's two bands);
 *   Sonnet 5.5's cache reads were cut from $0.20 to $0.10 on 2026-10-07;
 * - minimums: https://platform.claude.com/docs/en/build-with-claude/prompt-caching#cache-limitations
 *   ("512 tokens for ... Claude Opus 5.5, ... Claude Sonnet 5.5, ... and Claude Haiku 5.5";
 *   1,024 for Sonnet 4.6 and 4.5; 4,096 for Opus 4.6, Opus 4.5 and Haiku 4.5). Below its
 *   minimum a breakpoint caches nothing, and Anthropic says so with no error;
 * - thinking and effort: https://platform.claude.com/docs/en/models/haiku-5-5/migration-guide,
 *   https://platform.claude.com/docs/en/build-with-claude/thinking-troubleshooting,
 *   https://platform.claude.com/docs/en/models/sonnet-5-5/whats-new-sonnet-5-5 and the models
 *   overview's "Default effort" row.
 * A model missing here gets no cost and no minimum rather than a guess: add it here.
 */

/** USD per million tokens. */
export interface TokenPrices {
  readonly input: number;
  readonly output: number;
  /** Writing a prefix to the cache for 5 minutes (the default TTL): 1.25× input. */
  readonly cacheWrite5m: number;
  /** Writing it for an hour: 2× input. */
  readonly cacheWrite1h: number;
  /** Reading it back (0.1× input; 0.05× on Sonnet 5.5 and Opus 5.5). */
  readonly cacheRead: number;
}

export type Effort = "low" | "medium" | "high" | "xhigh" | "max";

export interface ClaudeModel {
  readonly id: string;
  readonly prices: TokenPrices;
  /**
   * A request whose prompt (input + cache reads + cache writes) is over `aboveTokens` pays
   * these prices on every one of its tokens, output included (Haiku 5.5 over 100,000 tokens).
   */
  readonly longPrompt?: { readonly aboveTokens: number; readonly prices: TokenPrices };
  /** The shortest prefix a breakpoint caches, in tokens: below it, nothing is cached or read. */
  readonly minCacheableTokens: number;
  /**
   * Characters per token, for estimates made before Anthropic counts (cache-breakpoints.ts).
   * 4 for the tokenizer before Claude 4.7; the newer one counts "approximately 30% more
   * tokens" for the same text (Haiku 5.5's overview), so about 3.
   */
  readonly charsPerToken: number;
  readonly thinking: {
    /**
     * Adaptive thinking runs when a request does not set `thinking`: the answer can begin with
     * `thinking` blocks (read content by type), and thinking tokens count toward `max_tokens`.
     */
    readonly onByDefault: boolean;
    /**
     * The `thinking.type` that turns it off, or as far off as the model goes, on a model that
     * thinks by default: "disabled" (Haiku 5.5, at effort high or below), "between_tools"
     * (Sonnet 5.5: no thinking up front, short notes between tool calls). Absent where
     * thinking cannot be turned off (Opus 5.5) or is off unless asked for (the 4.x models).
     */
    readonly off?: "disabled" | "between_tools";
    /**
     * A thinking block sent back is checked against everything before it: after any change to
     * `system`, `tools` or earlier `messages`, Anthropic answers 400. A conversation that sends
     * thinking back must stay append-only.
     */
    readonly boundToPrefix: boolean;
  };
  /** `output_config.effort` when a request sets none; absent where this project sends no effort (4.x). */
  readonly defaultEffort?: Effort;
  /** `tool_choice` `any` or a named tool is accepted (on Haiku 5.5 the answer then starts with the call, unthought). */
  readonly forcedToolChoice: boolean;
}

/** The pricing page's columns, in its order: base input, 5m cache writes, 1h cache writes, cache hits, output. */
const perMillion = (input: number, cacheWrite5m: number, cacheWrite1h: number, cacheRead: number, output: number): TokenPrices => ({
  input,
  cacheWrite5m,
  cacheWrite1h,
  cacheRead,
  output,
});

const OLD_TOKENIZER = 4;
const NEW_TOKENIZER = 3;

/** Off unless asked for: what the 4.x models do with a request that does not mention thinking. */
const THINKING_OFF_BY_DEFAULT = { onByDefault: false, boundToPrefix: false } as const;

const TABLE: ClaudeModel[] = [
  {
    id: "claude-haiku-5-5",
    prices: perMillion(0.1, 0.125, 0.2, 0.01, 0.5),
    longPrompt: { aboveTokens: 100_000, prices: perMillion(0.5, 0.625, 1, 0.05, 2.5) },
    minCacheableTokens: 512,
    charsPerToken: NEW_TOKENIZER,
    thinking: { onByDefault: true, off: "disabled", boundToPrefix: true },
    defaultEffort: "medium",
    forcedToolChoice: true,
  },
  {
    id: "claude-haiku-4-5",
    prices: perMillion(1, 1.25, 2, 0.1, 5),
    minCacheableTokens: 4096,
    charsPerToken: OLD_TOKENIZER,
    thinking: THINKING_OFF_BY_DEFAULT,
    forcedToolChoice: true,
  },
  {
    id: "claude-sonnet-5-5",
    prices: perMillion(2, 2.5, 4, 0.1, 10),
    minCacheableTokens: 512,
    charsPerToken: NEW_TOKENIZER,
    thinking: { onByDefault: true, off: "between_tools", boundToPrefix: true },
    defaultEffort: "high",
    forcedToolChoice: false,
  },
  {
    id: "claude-sonnet-4-6",
    prices: perMillion(3, 3.75, 6, 0.3, 15),
    minCacheableTokens: 1024,
    charsPerToken: OLD_TOKENIZER,
    thinking: THINKING_OFF_BY_DEFAULT,
    forcedToolChoice: true,
  },
  {
    id: "claude-sonnet-4-5",
    prices: perMillion(3, 3.75, 6, 0.3, 15),
    minCacheableTokens: 1024,
    charsPerToken: OLD_TOKENIZER,
    thinking: THINKING_OFF_BY_DEFAULT,
    forcedToolChoice: true,
  },
  {
    id: "claude-opus-5-5",
    prices: perMillion(4, 5, 8, 0.2, 20),
    minCacheableTokens: 512,
    charsPerToken: NEW_TOKENIZER,
    thinking: { onByDefault: true, boundToPrefix: true },
    defaultEffort: "medium",
    forcedToolChoice: false,
  },
  {
    id: "claude-opus-4-6",
    prices: perMillion(5, 6.25, 10, 0.5, 25),
    minCacheableTokens: 4096,
    charsPerToken: OLD_TOKENIZER,
    thinking: THINKING_OFF_BY_DEFAULT,
    forcedToolChoice: true,
  },
  {
    id: "claude-opus-4-5",
    prices: perMillion(5, 6.25, 10, 0.5, 25),
    minCacheableTokens: 4096,
    charsPerToken: OLD_TOKENIZER,
    thinking: THINKING_OFF_BY_DEFAULT,
    forcedToolChoice: true,
  },
];

const MODELS = new Map(TABLE.map((model) => [model.id, model]));

/** Anthropic answers with the dated id ("claude-haiku-4-5-20251001") of the alias asked for. */
const DATED = /-\d{8}$/;

/** The model with this id or dated id, or undefined for one the table does not know. */
export function claudeModel(id: string): ClaudeModel | undefined {
  return MODELS.get(id.replace(DATED, ""));
}

/** Every model in the table, for documentation and tests. */
export const knownModels = (): readonly ClaudeModel[] => TABLE;
