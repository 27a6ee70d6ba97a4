import pg from "pg";
import type { DemoShop } from "../sim/business/shop.ts";
import { billedOf, type LedgerReading } from "../test/support/ledger-reading.ts";
import type { ChaosSystem } from "./system.ts";

/**
 * What happened to every message the customers wrote, read from the private Postgres once the
 * system has settled, against what the simulated Meta saw (the sends it took) and what Claude
 * was asked. The definitions are the ones the chaos table promises:
 *   answered       the message's reply reached the customer: Meta took a send of one of its
 *                  parts (biz_opaque_callback_data), or the reply row says `sent`
 *   dead-lettered  not answered, and its reply is `dead` with an open dead letter
 *   skipped        deliberately not answered (skip_reason)
 *   lost           everything else, including messages never stored at all
 * With the shop's tools, what the business saw too: each Idempotency-Key's requests, the
 * bookings it made, and the tool calls Postgres holds.
 */

export interface Tally {
  sentIn: number;
  answered: number;
  deadLettered: number;
  skipped: number;
  lost: number;
  /** Why the lost ones are lost. */
  lostBecause: { neverStored: number; neverBound: number; replyState: Record<string, number> };
  claudeCalls: number;
  /** Claude's answers stored as steps (a tool use): each needed one call besides its reply's answer. */
  claudeSteps: number;
  /** AI replies that reached the customer or became an open dead letter: the Claude calls' denominator. */
  aiRepliesDone: number;
  sendsTaken: number;
  /** Distinct reply parts Meta took at least once. */
  partsTaken: number;
  /** Messages that reached the customer although an open dead letter tells staff they did not. */
  answeredYetDeadLettered: number;
  /** Replies still generating/ready, and parts of live replies not accepted: work someone may still do. */
  unfinished: number;
  business?: BusinessTally;
  ledger: LedgerReading;
}

export interface BusinessTally {
  /** Distinct Idempotency-Keys the shop was called with. */
  keys: number;
  /** The most requests the shop saw with one key, and how many keys it saw more than once. */
  maxSightings: number;
  repeatedKeys: number;
  /** What the shop did (one booking per key, by its own bookkeeping), and the keys it was asked to book with. */
  bookings: number;
  bookingKeys: number;
  /** Tool-call rows, and those whose answer is not stored (state still "requested"). */
  toolCalls: number;
  toolCallsUnanswered: number;
  /** Left `unknown`: the business never answered for sure, a person checks (not a goal missed, but told). */
  toolCallsUnknown: number;
}

interface MessageRow {
  wamid: string;
  reply_id: string | null;
  skip_reason: string | null;
}

interface ReplyRow {
  id: string;
  state: string;
  kind: string;
  open_letter: boolean;
}

interface PartRow {
  id: string;
  reply_id: string;
  send_state: string;
}

/** What Postgres holds at the end of a run, read on a connection of the tally's own. */
interface StoredRows {
  messages: MessageRow[];
  replies: ReplyRow[];
  parts: PartRow[];
  claudeSteps: number;
  toolCalls: { state: string }[];
  ledgerRows: { state: string; n: string; tokens: string | null }[];
}

async function storedRows(url: string): Promise<StoredRows> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  client.on("error", () => undefined); // a crash mid-query rejects the query; nothing else to do
  await client.connect();
  try {
    const messages = (await client.query<MessageRow>("SELECT wamid, reply_id::text, skip_reason FROM inbound_messages")).rows;
    const replies = (
      await client.query<ReplyRow>(
        `SELECT r.id::text, r.state::text, r.kind,
                EXISTS (SELECT 1 FROM dead_letters d WHERE d.reply_id = r.id AND d.state = 'open') AS open_letter
           FROM replies r`,
      )
    ).rows;
    const parts = (await client.query<PartRow>("SELECT id::text, reply_id::text, send_state::text FROM outbound_messages")).rows;
    const claudeSteps = Number((await client.query<{ n: string }>("SELECT count(*) AS n FROM claude_steps")).rows[0]?.n ?? 0);
    const toolCalls = (await client.query<{ state: string }>("SELECT state FROM tool_calls")).rows;
    const ledgerRows = (
      await client.query<{ state: string; n: string; tokens: string | null }>(
        `SELECT state, count(*) AS n,
                sum(input_tokens + output_tokens + cache_read_tokens + cache_creation_tokens) AS tokens FROM claude_calls GROUP BY state`,
      )
    ).rows;
    return { messages, replies, parts, claudeSteps, toolCalls, ledgerRows };
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function tally(system: ChaosSystem): Promise<Tally> {
  if (!system.pg) throw new Error("no Postgres");
  const { messages, replies, parts, claudeSteps, toolCalls, ledgerRows } = await storedRows(system.pg.url);

  const takenParts = new Set(system.graph.taken.map((send, i) => send.partId ?? `(no biz_opaque_callback_data #${i})`));
  const repliesReached = new Set(parts.filter((p) => takenParts.has(p.id)).map((p) => p.reply_id));
  const replyById = new Map(replies.map((r) => [r.id, r]));
  const reached = (r: ReplyRow) => r.state === "sent" || repliesReached.has(r.id);
  const deadLettered = (r: ReplyRow) => r.state === "dead" && r.open_letter;

  const stored = new Map(messages.map((m) => [m.wamid, m]));
  const counted = new Set<string>();
  for (const wamid of system.customers.written.keys()) {
    const replyId = stored.get(wamid)?.reply_id;
    if (replyId) counted.add(replyId);
  }
  const result: Tally = {
    sentIn: system.customers.written.size,
    answered: 0,
    deadLettered: 0,
    skipped: 0,
    lost: 0,
    lostBecause: { neverStored: 0, neverBound: 0, replyState: {} },
    claudeCalls: system.claudeCalls,
    claudeSteps,
    aiRepliesDone: replies.filter((r) => counted.has(r.id) && r.kind === "ai" && (reached(r) || deadLettered(r))).length,
    sendsTaken: system.graph.taken.length,
    partsTaken: takenParts.size,
    answeredYetDeadLettered: 0,
    unfinished:
      replies.filter((r) => r.state === "generating" || r.state === "ready").length +
      parts.filter((p) => p.send_state !== "accepted" && replyById.get(p.reply_id)?.state !== "dead").length,
    business: system.shop ? businessTally(system.shop, toolCalls) : undefined,
    ledger: ledgerTally(system, ledgerRows),
  };
  for (const wamid of system.customers.written.keys()) {
    const message = stored.get(wamid);
    const reply = message?.reply_id ? replyById.get(message.reply_id) : undefined;
    if (!message) {
      result.lost++;
      result.lostBecause.neverStored++;
    } else if (message.skip_reason) {
      result.skipped++;
    } else if (!reply) {
      result.lost++;
      result.lostBecause.neverBound++;
    } else if (reached(reply)) {
      result.answered++;
      if (reply.open_letter) result.answeredYetDeadLettered++;
    } else if (deadLettered(reply)) {
      result.deadLettered++;
    } else {
      result.lost++;
      const state = reply.state === "dead" ? "dead, no open dead letter" : reply.state;
      result.lostBecause.replyState[state] = (result.lostBecause.replyState[state] ?? 0) + 1;
    }
  }
  return result;
}

function businessTally(shop: DemoShop, toolCalls: { state: string }[]): BusinessTally {
  const sightings = new Map<string, number>();
  for (const { idempotencyKey } of shop.requests) if (idempotencyKey) sightings.set(idempotencyKey, (sightings.get(idempotencyKey) ?? 0) + 1);
  const counts = [...sightings.values()];
  return {
    keys: sightings.size,
    maxSightings: Math.max(0, ...counts),
    repeatedKeys: counts.filter((n) => n > 1).length,
    bookings: shop.bookings.length,
    bookingKeys: new Set(shop.requests.filter((r) => r.path === "/bookings" && r.idempotencyKey).map((r) => r.idempotencyKey)).size,
    toolCalls: toolCalls.length,
    toolCallsUnanswered: toolCalls.filter((c) => c.state === "requested").length,
    toolCallsUnknown: toolCalls.filter((c) => c.state === "unknown").length,
  };
}

/** Every message answered, dead-lettered or deliberately skipped. */
export const allResolved = (t: Tally) => t.answered + t.deadLettered + t.skipped === t.sentIn;

function ledgerTally(system: ChaosSystem, rows: { state: string; n: string; tokens: string | null }[]): LedgerReading {
  const of = (...states: string[]) => rows.filter((r) => states.includes(r.state));
  return {
    answered: of("answered").reduce((n, r) => n + Number(r.n), 0),
    unsettled: of("reserved", "unknown").reduce((n, r) => n + Number(r.n), 0),
    unknown: of("unknown").reduce((n, r) => n + Number(r.n), 0),
    tokens: of("answered").reduce((n, r) => n + Number(r.tokens ?? 0), 0),
    ...billedOf(system.claude),
  };
}
