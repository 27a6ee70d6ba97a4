import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";
import { type Harness, startHarness, TEST_ADMIN_TOKEN } from "../test/support/harness.ts";
import { seedHistory } from "../test/support/seed-history.ts";
import { fmt, median, table } from "./stats.ts";

/**
 * Issue 33.1: GET /admin/conversations at 100 000 conversations against the same requests on an
 * empty database, through the app (inject: routing, validation, SQL, JSON), medians of `runs`.
 * The history is seedHistory's (generate_series); every message says "are you open today?", so
 * `q=open` finds every conversation: the worst case, shown beside the target's.
 */

export interface ConversationsSettings {
  conversations: number;
  messages: number;
  runs: number;
}

export const conversationsSettings = (quick: boolean): ConversationsSettings =>
  quick ? { conversations: 5_000, messages: 15_000, runs: 5 } : { conversations: 100_000, messages: 300_000, runs: 25 };

const REQUESTS = [
  { name: "first page (50, newest activity)", url: "/admin/conversations", target: true },
  { name: "q: a word one customer wrote", url: "/admin/conversations?q=4242", target: true },
  { name: "q: part of a name", url: "/admin/conversations?q=customer%204242", target: true },
  { name: "q: part of a phone", url: "/admin/conversations?q=9990004", target: false },
  { name: "q: a word in every message (worst case)", url: "/admin/conversations?q=open", target: false },
  { name: "second page (cursor)", url: "", target: false },
] as const;

export interface ConversationsResult {
  settings: ConversationsSettings;
  seededMs: number;
  rows: { name: string; emptyMs: number; fullMs: number; found: number; target: boolean }[];
}

async function measure(h: Harness, url: string, runs: number): Promise<{ ms: number; found: number; cursor: string | null }> {
  const headers = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
  const times: number[] = [];
  let found = 0;
  let cursor: string | null = null;
  for (let i = 0; i < runs + 2; i++) {
    const started = performance.now();
    const response = await h.app.inject({ method: "GET", url, headers });
    const ms = performance.now() - started;
    if (response.statusCode !== 200) throw new Error(`${url}: ${response.statusCode} ${response.body}`);
    const body = response.json() as { items: unknown[]; nextCursor: string | null };
    found = body.items.length;
    cursor = body.nextCursor;
    if (i >= 2) times.push(ms); // the first two warm the plan cache and the pages
  }
  return { ms: median(times), found, cursor };
}

async function measureAll(h: Harness, runs: number) {
  const out: { ms: number; found: number }[] = [];
  let cursor: string | null = null;
  for (const request of REQUESTS) {
    const url = request.url || `/admin/conversations?cursor=${cursor ?? ""}`;
    if (!request.url && !cursor) {
      out.push({ ms: Number.NaN, found: 0 });
      continue;
    }
    const result = await measure(h, url, runs);
    if (request.url === "/admin/conversations") cursor = result.cursor;
    out.push(result);
  }
  return out;
}

export async function runConversationsBench(settings: ConversationsSettings): Promise<ConversationsResult> {
  const empty = await startHarness({ workers: 0 });
  let emptyTimes: { ms: number; found: number }[];
  try {
    emptyTimes = await measureAll(empty, settings.runs);
  } finally {
    await empty.close();
  }
  const full = await startHarness({ workers: 0 });
  try {
    const seeded = await seedHistory(full.config.databaseUrl, { messages: settings.messages, conversations: settings.conversations });
    const fullTimes = await measureAll(full, settings.runs);
    return {
      settings,
      seededMs: seeded.ms,
      rows: REQUESTS.map((request, i) => ({
        name: request.name,
        emptyMs: emptyTimes[i]!.ms,
        fullMs: fullTimes[i]!.ms,
        found: fullTimes[i]!.found,
        target: request.target,
      })),
    };
  } finally {
    await full.close();
  }
}

export function formatConversations(result: ConversationsResult): string {
  const { settings } = result;
  return [
    `${fmt(settings.conversations)} conversations, ${fmt(settings.messages)} messages seeded in ${fmt(result.seededMs / 1000, 1)} s; medians of ${settings.runs} requests each`,
    "",
    table(
      ["request", "empty ms", `${fmt(settings.conversations)} ms`, "ratio", "items"],
      result.rows.map((row) => [
        row.name,
        fmt(row.emptyMs, 1),
        fmt(row.fullMs, 1),
        Number.isNaN(row.emptyMs) ? "-" : `${fmt(row.fullMs / row.emptyMs, 1)}x`,
        String(row.found),
      ]),
    ),
  ].join("\n");
}

/** Issue 33.1's target: the first page and a search under 100 ms at 100 000 conversations. */
export function conversationsTarget(result: ConversationsResult) {
  const measured = result.rows.filter((row) => row.target);
  const worst = Math.max(...measured.map((row) => row.fullMs));
  return {
    target: `33.1 GET /admin/conversations, first page and q, at ${fmt(result.settings.conversations)} conversations (slowest median)`,
    goal: "< 100 ms",
    figure: `${fmt(worst, 1)} ms`,
    met: worst < 100,
    baseline: "-",
  };
}

// Alone: `npx tsx bench/conversations.ts` (BENCH_QUICK=1 for a short check); `npm run bench` runs it as benchmark 9.
if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const result = await runConversationsBench(conversationsSettings(process.env.BENCH_QUICK === "1"));
  console.log(formatConversations(result));
  const line = conversationsTarget(result);
  console.log(`\n${line.target}: ${line.figure} (goal ${line.goal})${line.met ? "" : " NOT MET"}`);
}
