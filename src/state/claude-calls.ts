import type { CallUsage } from "../ai/claude.ts";
import { estimateCostUsd, type PriceOverrides } from "../ai/pricing.ts";
import { budgetSpent } from "../costs/budget.ts";
import { type Db, Prisma } from "../db/client.ts";
import { execute } from "../db/sql.ts";
import { PermanentError, RetryableError } from "../errors.ts";

/**
 * The ledger of Claude calls (issue 32.6–7): a row per call, made before the call and settled
 * after, so every paid call is counted, also one whose answer was lost, one a regenerate
 * replaced and one that only said the prompt was too long.
 *
 *   (reserveClaudeCall) reserved, with the call's greatest cost    (it may be billed from now on)
 *   reserved | unknown ─settleClaudeCall─▶ answered, its usage as Anthropic answered
 *   reserved ─closeClaudeCall─▶ refused (Anthropic answered an error: not billed)
 *                             | unknown (no answer: it may be billed; counted at its reservation)
 *
 * A row never settled (the worker died mid-call) stays reserved, counted at its reservation:
 * the ledger may overstate a lost call, never understate one.
 */

export interface ClaudeCallPlan {
  id: string;
  phoneNumberId: string;
  /** null: a call no customer receives (the staff page's "Try it"), counted all the same. */
  replyId: string | null;
  step: number;
  model: string;
  /** The call's greatest cost in USD (src/ai/pricing.ts, greatestCostUsd); undefined for a model without a price. */
  reservedUsd: number | undefined;
  /** The number's daily budget in USD: the call is made only while the UTC day's spend is below it. */
  budgetUsd?: number | undefined;
}

export type Reserved = { ok: true } | { ok: false; refused: "budget"; spentUsd: number; day: string };

/**
 * What a number's calls of one UTC day count for: as answered, or, for a call in flight or
 * never answered, its reservation.
 */
const SPENT = `COALESCE(sum(CASE WHEN state = 'answered' THEN COALESCE(cost_usd, 0)
                               WHEN state IN ('reserved', 'unknown') THEN COALESCE(reserved_usd, 0) ELSE 0 END), 0)::float8`;

/**
 * Reserves a call. With a budget, under a lock per number, so concurrent calls check one after
 * the other and each sees the others' reservations: the day overshoots by at most one call.
 */
export async function reserveClaudeCall(db: Db, plan: ClaudeCallPlan, now: Date): Promise<Reserved> {
  const insert = (tx: Db | Prisma.TransactionClient) =>
    execute(
      tx,
      plan.replyId === null
        ? Prisma.sql`
    INSERT INTO claude_calls (id, phone_number_id, reply_id, round, step, model, reserved_usd, created_at)
    VALUES (${plan.id}::uuid, ${plan.phoneNumberId}, NULL, 0, ${plan.step}::int, ${plan.model}, ${plan.reservedUsd ?? null}::float8, ${now}::timestamptz)`
        : Prisma.sql`
    INSERT INTO claude_calls (id, phone_number_id, reply_id, round, step, model, reserved_usd, created_at)
    SELECT ${plan.id}::uuid, ${plan.phoneNumberId}, r.id, r.round, ${plan.step}::int, ${plan.model}, ${plan.reservedUsd ?? null}::float8, ${now}::timestamptz
    FROM replies r WHERE r.id = ${plan.replyId}::uuid`,
    );
  const budget = plan.budgetUsd;
  if (budget === undefined) {
    await insert(db);
    return { ok: true };
  }
  const day = now.toISOString().slice(0, 10);
  const since = new Date(`${day}T00:00:00.000Z`);
  return db.$transaction(async (tx) => {
    await tx.$executeRaw`SELECT pg_advisory_xact_lock(hashtextextended(${`claude_budget:${plan.phoneNumberId}`}, 0))`;
    const [row] = await tx.$queryRawUnsafe<{ spent: number }[]>(
      `SELECT ${SPENT} AS spent FROM claude_calls WHERE phone_number_id = $1 AND created_at >= $2::timestamptz AND created_at < $2::timestamptz + interval '1 day'`,
      plan.phoneNumberId,
      since,
    );
    const spentUsd = row?.spent ?? 0;
    if (spentUsd >= budget) return { ok: false, refused: "budget", spentUsd, day } as const;
    await insert(tx);
    return { ok: true } as const;
  });
}

/**
 * reserved | unknown → answered: the usage as Anthropic answered, priced by the model that
 * answered (null: a model without a price). Repeating it changes nothing.
 */
export async function settleClaudeCall(db: Db, id: string, usage: CallUsage, prices: PriceOverrides | undefined, now: Date): Promise<void> {
  const costUsd = estimateCostUsd(usage.model, usage, prices);
  await execute(
    db,
    Prisma.sql`
    UPDATE claude_calls SET state = 'answered', model = ${usage.model}, input_tokens = ${usage.inputTokens}::int, output_tokens = ${usage.outputTokens}::int,
      cache_read_tokens = ${usage.cacheReadTokens}::int, cache_creation_tokens = ${usage.cacheCreationTokens}::int,
      cache_creation_1h_tokens = ${usage.cacheCreation1hTokens}::int, cost_usd = ${costUsd ?? null}::float8, settled_at = ${now}::timestamptz
    WHERE id = ${id}::uuid AND state IN ('reserved', 'unknown')`,
  );
}

/** What a call that failed closes to: an error Anthropic answered (a status) is not billed; no answer at all may be. */
export function failedCallState(error: unknown): "refused" | "unknown" {
  return (error instanceof RetryableError || error instanceof PermanentError) && /^\d+$/.test(error.code ?? "") ? "refused" : "unknown";
}

/** reserved → refused (Anthropic answered with an error, which is not billed) or unknown (no answer came: it may be). */
export async function closeClaudeCall(db: Db, id: string, state: "refused" | "unknown", now: Date): Promise<void> {
  await execute(db, Prisma.sql`UPDATE claude_calls SET state = ${state}, settled_at = ${now}::timestamptz WHERE id = ${id}::uuid AND state = 'reserved'`);
}

/** What a caller adds to a counted call at each of its turns. */
export interface CountedCallHooks<T> {
  /** The budget refused the call, before it is thrown as a dead letter's error. */
  refused?: () => Promise<void>;
  /** The call failed; its row is closed after this. */
  failed?: (error: unknown) => Promise<void>;
  /** Answered; its row is settled after this. */
  answered?: (answer: T) => void;
  /** Answered and paid for, but the settle did not reach Postgres; thrown on after this. */
  unsettled?: (answer: T, error: unknown) => Promise<void>;
}

/**
 * One Claude call through the ledger: reserved before it is made (refused once the number's
 * daily budget is spent, and then not made), closed if it fails, settled with its cost once
 * answered. A customer's reply and the staff page's "Try it" both pay this way.
 */
export async function countedClaudeCall<T extends { usage: CallUsage }>(
  db: Db,
  plan: ClaudeCallPlan,
  prices: PriceOverrides | undefined,
  now: () => Date,
  call: () => Promise<T>,
  hooks: CountedCallHooks<T> = {},
): Promise<T> {
  const reserved = await reserveClaudeCall(db, plan, now());
  if (!reserved.ok) {
    await hooks.refused?.();
    throw budgetSpent(plan.budgetUsd!, reserved); // refused only under a budget
  }
  let answer: T;
  try {
    answer = await call();
  } catch (error) {
    await hooks.failed?.(error);
    await closeClaudeCall(db, plan.id, failedCallState(error), now()).catch(() => undefined); // counted at its reservation
    throw error;
  }
  hooks.answered?.(answer);
  try {
    await settleClaudeCall(db, plan.id, answer.usage, prices, now());
  } catch (error) {
    await hooks.unsettled?.(answer, error);
    throw error;
  }
  return answer;
}
