import type { CallUsage } from "../ai/claude.ts";
import type { ContentBlockJson } from "../ai/request.ts";
import { type Db, Prisma } from "../db/client.ts";
import { execute, queryRows } from "../db/sql.ts";
import { openToolUnknownItem } from "./dead-letters.ts";
import type { Lease } from "./fence.ts";

type Tx = Prisma.TransactionClient;

/**
 * A reply that takes several Claude calls (a tool loop, issue 19): each call's answer is a
 * step, and each business action it asks for a tool call. README.md in this folder has the
 * whole machine.
 *
 *   (recordStep) step n stored, with a tool call `requested` for each tool_use it holds
 *   requested ─startToolCall (lease holder)─▶ requested, attempts + 1   (it may go out from now on)
 *   requested ─finishToolCall─▶ done | failed                           (its answer stored: never asked again)
 *   requested ─leaveToolCallUnknown─▶ unknown, with an open item        (no sure answer in time: a person checks)
 *
 * Steps and tool calls belong to the reply's round: a regenerate starts the next round
 * (reopenForResend), whose loop is new, with new tool calls, new keys and its own clock; the
 * rounds before stay as the record of what was done.
 *
 * A step is a fact, paid for: it is stored whichever run receives it, as storeDraft stores a
 * draft, and a second answer for the same step (a run that raced) is dropped in favour of the
 * first. A tool call may go out again only while it is `requested`, with the same
 * Idempotency-Key: the business sees that key at most as often as runs died on it.
 */

/** One stored Claude call of a reply. */
export interface StoredStep {
  step: number;
  /** Claude's content blocks as they came. */
  content: ContentBlockJson[];
  stopReason: string;
  /** The tool calls it asked for, in the order it asked. */
  toolCalls: StoredToolCall[];
  /** What this call cost (each step is one paid call). */
  usage: CallUsage;
  createdAt: Date;
}

export interface StoredToolCall {
  id: string;
  name: string;
  input: unknown;
  state: ToolCallState;
  idempotencyKey: string;
  attempts: number;
  answer: string | null;
  isError: boolean | null;
}

export type ToolCallState = "requested" | "done" | "failed" | "unknown";

/** What a finished tool call answered, for Claude to read. */
export interface ToolCallAnswer {
  answer: string;
  isError: boolean;
  status?: number | undefined;
  request?: { method: string; url: string } | undefined;
}

type StepJson = { step: number; content: ContentBlockJson[]; stopReason: string; createdAt: string; usage: CallUsage; toolCalls: StoredToolCall[] | null };
const stepOf = (s: StepJson): StoredStep => ({ ...s, createdAt: new Date(s.createdAt), toolCalls: s.toolCalls ?? [] });

const STEP_JSON = `jsonb_build_object('step', s.step, 'content', s.content, 'stopReason', s.stop_reason, 'createdAt', s.created_at,
  'usage', jsonb_build_object('model', s.model, 'inputTokens', s.input_tokens, 'outputTokens', s.output_tokens,
    'cacheReadTokens', s.cache_read_tokens, 'cacheCreationTokens', s.cache_creation_tokens, 'cacheCreation1hTokens', s.cache_creation_1h_tokens),
  'toolCalls', (SELECT jsonb_agg(jsonb_build_object('id', t.id, 'name', t.name, 'input', t.input, 'state', t.state,
     'idempotencyKey', t.idempotency_key, 'attempts', t.attempts, 'answer', t.answer, 'isError', t.is_error) ORDER BY t.requested_at, t.id)
   FROM tool_calls t WHERE t.reply_id = s.reply_id AND t.round = s.round AND t.step = s.step))`;

/** The stored steps of the reply's round with their tool calls, oldest first: where a resumed run carries on. */
export async function readSteps(db: Db, replyId: string): Promise<StoredStep[]> {
  const rows = await db.$queryRawUnsafe<{ step: StepJson }[]>(
    `SELECT ${STEP_JSON} AS step FROM claude_steps s JOIN replies r ON r.id = s.reply_id AND r.round = s.round
     WHERE s.reply_id = $1::uuid ORDER BY s.step`,
    replyId,
  );
  return rows.map((r) => stepOf(r.step));
}

/**
 * Claude's answer for step `step` of a reply still generating, stored with a tool call
 * `requested` for each tool_use block, in one statement, before any of them runs; the
 * reply's generation deadline is released (the armed call has answered). When the
 * step was stored already (another run got there first), that one is returned and this answer
 * is dropped. Undefined when the reply is no longer generating.
 */
export async function recordStep(
  db: Db,
  replyId: string,
  step: number,
  answer: { content: ContentBlockJson[]; stopReason: string; usage: CallUsage },
  toolCalls: { id: string; name: string; input: unknown; idempotencyKey: string }[],
  now: Date,
): Promise<StoredStep | undefined> {
  const { usage } = answer;
  const [row] = await db.$queryRawUnsafe<{ step: StepJson | null; generating: boolean; inserted: boolean }[]>(
    `WITH r AS (SELECT id, round FROM replies WHERE id = $1::uuid AND state = 'generating' FOR SHARE),
     stored AS (
       INSERT INTO claude_steps (reply_id, round, step, content, stop_reason, model, input_tokens, output_tokens, cache_read_tokens,
         cache_creation_tokens, cache_creation_1h_tokens, created_at)
       SELECT r.id, r.round, $2::int, $3::jsonb, $4, $5, $6::int, $7::int, $8::int, $9::int, $12::int, $11::timestamptz FROM r
       ON CONFLICT (reply_id, round, step) DO NOTHING
       RETURNING reply_id, round, step
     ),
     -- The call that was armed for has answered: nothing of this reply is in flight any more.
     answered AS (UPDATE replies SET generation_deadline = NULL FROM stored WHERE replies.id = stored.reply_id),
     calls AS (
       INSERT INTO tool_calls (id, reply_id, round, step, name, input, idempotency_key, requested_at)
       SELECT c.id, stored.reply_id, stored.round, stored.step, c.name, c.input, c.key, $11::timestamptz
       FROM stored, jsonb_to_recordset($10::jsonb) AS c(id text, name text, input jsonb, key text)
       ON CONFLICT (id) DO NOTHING
     )
     SELECT EXISTS (SELECT 1 FROM r) AS generating, EXISTS (SELECT 1 FROM stored) AS inserted,
            (SELECT ${STEP_JSON} FROM claude_steps s JOIN r ON r.id = s.reply_id AND r.round = s.round WHERE s.step = $2::int) AS step`,
    replyId,
    step,
    JSON.stringify(answer.content),
    answer.stopReason,
    usage.model,
    usage.inputTokens,
    usage.outputTokens,
    usage.cacheReadTokens,
    usage.cacheCreationTokens,
    JSON.stringify(toolCalls.map((c) => ({ id: c.id, name: c.name, input: c.input, key: c.idempotencyKey }))),
    now,
    usage.cacheCreation1hTokens,
  );
  if (!row?.generating) return undefined;
  // The statement's snapshot predates its own insert: a step stored before it is read there...
  if (row.step) return stepOf(row.step);
  // ...and one another run stored while this statement waited for it, only after.
  if (!row.inserted) return (await readSteps(db, replyId)).find((s) => s.step === step);
  return {
    step,
    content: answer.content,
    stopReason: answer.stopReason,
    usage,
    createdAt: now,
    toolCalls: toolCalls.map((c) => ({ ...c, state: "requested", attempts: 0, answer: null, isError: null })),
  };
}

export type ToolCallStart = { ok: true; attempt: number } | { ok: false; refused: "fenced_out" | "finished" };

/**
 * requested → requested, attempts + 1: the lease holder is about to call the business's
 * endpoint (it may go out from here on). Refused to a run that no longer holds the
 * conversation, and for a call whose answer is stored.
 */
export async function startToolCall(db: Db, lease: Lease, id: string, now: Date): Promise<ToolCallStart> {
  const [row] = await queryRows<{ attempt: number | null; held: boolean }>(
    db,
    Prisma.sql`
    WITH held AS (SELECT 1 FROM conversations WHERE id = ${lease.conversationId}::uuid AND reply_fence = ${lease.fence} FOR SHARE),
    started AS (
      UPDATE tool_calls SET attempts = attempts + 1, started_at = ${now}::timestamptz
      WHERE id = ${id} AND state = 'requested' AND EXISTS (SELECT 1 FROM held)
      RETURNING attempts
    )
    SELECT (SELECT attempts FROM started) AS attempt, EXISTS (SELECT 1 FROM held) AS held`,
  );
  if (row?.attempt != null) return { ok: true, attempt: row.attempt };
  return { ok: false, refused: row?.held ? "finished" : "fenced_out" };
}

/**
 * requested → done (the endpoint answered, or refused in a way Claude should read) or failed
 * (it could not be asked at all): the answer stored, never asked for again. A fact: no lease.
 */
export async function finishToolCall(db: Db | Tx, id: string, outcome: ToolCallAnswer & { state: "done" | "failed" | "unknown" }, now: Date): Promise<boolean> {
  const finished = await execute(
    db,
    Prisma.sql`
    UPDATE tool_calls SET state = ${outcome.state}, answer = ${outcome.answer}, is_error = ${outcome.isError}, status = ${outcome.status ?? null}::int,
      request = ${outcome.request ? JSON.stringify(outcome.request) : null}::jsonb, finished_at = ${now}::timestamptz
    WHERE id = ${id} AND state = 'requested'`,
  );
  return finished === 1;
}

/**
 * requested → unknown: the business never answered for sure within the reply's time for tool
 * calls, so it may have acted. Never sent again; Claude reads `answer` (the outcome is
 * unknown, not a failure), and the conversation gets an open item (`tool_unknown`) for a person
 * to check, in the same transaction: the one is never without the other. True when this run
 * made the change (the item is new).
 */
export async function leaveToolCallUnknown(
  db: Db,
  call: { id: string; name: string; conversationId: string; replyId: string },
  outcome: ToolCallAnswer,
  now: Date,
): Promise<boolean> {
  return db.$transaction(async (tx) => {
    if (!(await finishToolCall(tx, call.id, { ...outcome, state: "unknown" }, now))) return false;
    await openToolUnknownItem(tx, call, outcome.answer, now);
    return true;
  });
}
