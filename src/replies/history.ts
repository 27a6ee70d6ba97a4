import type { ChatTurn } from "../ai/request.ts";
import { PermanentError } from "../errors.ts";
import { readableMedia } from "../messages/describe.ts";
import type { HistoryRows, QuestionMessage } from "../state/history.ts";
import type { GraphClient } from "../whatsapp/graph-client.ts";

/** What Claude is shown for a reply: recent history within its limits, then the messages to answer. */

export interface HistoryDeps {
  graph: Pick<GraphClient, "downloadMedia">;
}

/** How much history Claude is shown, and the largest file a message may show it. */
export interface HistorySettings {
  historyMessages: number;
  historyTokenBudget: number;
  mediaMaxBytes: number;
}

/** Recent history (our sent replies and the user's messages) followed by the messages to answer. */
export async function conversationTurns(
  deps: HistoryDeps,
  settings: HistorySettings,
  messages: readonly QuestionMessage[],
  rows: HistoryRows,
): Promise<ChatTurn[]> {
  const { historyMessages } = settings;
  const history: ChatTurn[] = withinBudget(
    [
      ...rows.earlier.map((m) => ({ at: m.at, turn: { role: "user" as const, text: m.text } })),
      ...rows.replies.map((r) => ({ at: r.at, turn: { role: "assistant" as const, text: r.text } })),
    ]
      .sort((a, b) => a.at - b.at)
      .slice(-historyMessages)
      .map((h) => h.turn),
    settings.historyTokenBudget,
  );
  const question: ChatTurn[] = [];
  for (const m of messages) if (m.text) question.push(await withMedia(deps, settings.mediaMaxBytes, m.payload as Parameters<typeof readableMedia>[0], m.text));
  if (question.length === 0) return [];
  const last = history.at(-1);
  if (last) history[history.length - 1] = { ...last, cacheBreakpoint: true };
  return [...history, ...question];
}

/**
 * The image or PDF a message carries, fetched now (Meta's URLs last 5 minutes). A file that
 * cannot be had (too large, expired) leaves a note instead, so the customer still gets an
 * answer; a passing failure retries the job before Claude is paid.
 */
async function withMedia(deps: HistoryDeps, maxBytes: number, payload: Parameters<typeof readableMedia>[0], text: string): Promise<ChatTurn> {
  const readable = readableMedia(payload);
  if (!readable) return { role: "user", text };
  try {
    const media = await deps.graph.downloadMedia(readable.id, maxBytes);
    return { role: "user", text, media: { kind: readable.kind, ...media } };
  } catch (error) {
    if (!(error instanceof PermanentError)) throw error;
    return { role: "user", text: `${text}\n[The file could not be opened: ${error.reason}]` };
  }
}

/** Rough but safe: English averages ~4 characters a token; other scripts use fewer per token. */
const estimateTokens = (text: string) => Math.ceil(text.length / 3);

/** Keeps the newest turns that fit the budget: old context is worth less than room to answer. */
function withinBudget(turns: ChatTurn[], budget: number): ChatTurn[] {
  let used = 0;
  let first = turns.length;
  while (first > 0 && used + estimateTokens(turns[first - 1]!.text) <= budget) used += estimateTokens(turns[--first]!.text);
  return turns.slice(first);
}
