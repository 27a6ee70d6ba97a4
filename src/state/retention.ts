import type { Db } from "../db/client.ts";

/**
 * Customers' words kept no longer than RETENTION (issue 35.3): what is older than `cutoff` is
 * emptied, the rows kept (counts, costs and ratings stay), in batches of `batch` rows so no
 * statement holds many rows for long; none takes a conversation's fence. Never forgotten: an
 * unanswered message or an unfinished reply (nothing is lost, law 1), nor anything of a
 * conversation with an open item (staff still need it), until it is closed. A sweep run twice,
 * or by two workers at once, empties each row once.
 */

const NO_OPEN_ITEM = (conversation: string) => `NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.conversation_id = ${conversation} AND d.state = 'open')`;

/** Each kind's statement: $1 the cutoff, $2 the batch; it answers the rows it emptied. */
const FORGET: Record<string, string> = {
  messages: `
    UPDATE inbound_messages SET text = NULL, transcript = NULL, payload = jsonb_build_object('type', type), refers_to = NULL
    WHERE id IN (
      SELECT m.id FROM inbound_messages m
      WHERE m.created_at < $1 AND NOT (m.reply_id IS NULL AND m.skip_reason IS NULL)
        AND (m.text IS NOT NULL OR m.transcript IS NOT NULL OR m.payload <> jsonb_build_object('type', m.type))
        AND ${NO_OPEN_ITEM("m.conversation_id")}
      LIMIT $2)`,
  replies: `
    UPDATE replies SET text = NULL, citations = NULL
    WHERE id IN (
      SELECT r.id FROM replies r
      WHERE r.created_at < $1 AND r.state IN ('sent', 'dead') AND (r.text IS NOT NULL OR r.citations IS NOT NULL)
        AND ${NO_OPEN_ITEM("r.conversation_id")}
      LIMIT $2)`,
  parts: `
    UPDATE outbound_messages SET text = '', template_parameters = NULL
    WHERE id IN (
      SELECT p.id FROM outbound_messages p JOIN replies r ON r.id = p.reply_id
      WHERE p.created_at < $1 AND r.state IN ('sent', 'dead') AND (p.text <> '' OR p.template_parameters IS NOT NULL)
        AND ${NO_OPEN_ITEM("r.conversation_id")}
      LIMIT $2)`,
  steps: `
    UPDATE claude_steps SET content = '[]'::jsonb
    WHERE (reply_id, round, step) IN (
      SELECT s.reply_id, s.round, s.step FROM claude_steps s JOIN replies r ON r.id = s.reply_id
      WHERE s.created_at < $1 AND r.state IN ('sent', 'dead') AND s.content <> '[]'::jsonb
        AND ${NO_OPEN_ITEM("r.conversation_id")}
      LIMIT $2)`,
  toolCalls: `
    UPDATE tool_calls SET input = '{}'::jsonb, answer = NULL, request = NULL
    WHERE id IN (
      SELECT t.id FROM tool_calls t JOIN replies r ON r.id = t.reply_id
      WHERE t.requested_at < $1 AND t.state <> 'requested' AND (t.input <> '{}'::jsonb OR t.answer IS NOT NULL OR t.request IS NOT NULL)
        AND ${NO_OPEN_ITEM("r.conversation_id")}
      LIMIT $2)`,
  items: `
    UPDATE dead_letters SET detail = NULL, note = NULL
    WHERE id IN (
      SELECT d.id FROM dead_letters d
      WHERE d.created_at < $1 AND d.state <> 'open' AND (d.detail IS NOT NULL OR d.note IS NOT NULL)
      LIMIT $2)`,
  itemHistory: `
    UPDATE dead_letter_actions SET detail = NULL
    WHERE id IN (
      SELECT a.id FROM dead_letter_actions a JOIN dead_letters d ON d.id = a.dead_letter_id
      WHERE a.created_at < $1 AND d.state <> 'open' AND a.detail IS NOT NULL
      LIMIT $2)`,
};

export const RETENTION_KINDS = Object.keys(FORGET);

/** Empties what is older than `cutoff`, every kind, batch after batch until none is left; the rows emptied, by kind. */
export async function forgetOlderThan(db: Db, cutoff: Date, batch: number): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const [kind, statement] of Object.entries(FORGET)) {
    counts[kind] = 0;
    for (;;) {
      const emptied = await db.$executeRawUnsafe(statement, cutoff, batch);
      counts[kind] += emptied;
      if (emptied < batch) break;
    }
  }
  return counts;
}
