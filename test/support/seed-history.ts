import { performance } from "node:perf_hooks";
import pg from "pg";
import { parseDatabaseUrl } from "../../src/db/client.ts";
import { PHONE_NUMBER_ID } from "./webhook-bodies.ts";

/**
 * A database that has been in production for a while, written straight into a test schema
 * with INSERT … SELECT over generate_series (seconds for 100 000 messages, not minutes):
 *
 *   - many conversations (one contact each, on the tests' business number), with a skewed
 *     spread: most have a handful of messages, some hundreds, and `longConversations` of them
 *     `longHistory` messages each (the customer who writes every day);
 *   - nearly every message answered by a sent reply, read receipts recorded on its parts, some
 *     replies in two parts; the rest unanswered-by-choice (skipped) or failed;
 *   - a failed reply in every `deadLetterEvery` is a dead letter, most of them long closed by
 *     staff (resent or discarded, with the action recorded), a few still open;
 *   - then ANALYZE, so the planner knows the tables' real sizes.
 *
 * It writes the tables of prisma/migrations directly, using only columns every version so
 * far has had and letting defaults fill the rest; a migration that adds a NOT NULL column
 * without a default must add it here too.
 */

export interface SeedOptions {
  /** Inbound messages in all (default 100 000). */
  messages?: number;
  /** Conversations (and contacts) in all (default messages / 10). */
  conversations?: number;
  /** Conversations with a long history (default 10)... */
  longConversations?: number;
  /** ...of about this many messages each (default 2 000). */
  longHistory?: number;
  /** One reply in this many failed and became a dead letter (default 20). */
  deadLetterEvery?: number;
  phoneNumberId?: string;
}

export interface SeededHistory {
  messages: number;
  conversations: number;
  replies: number;
  parts: number;
  deadLetters: number;
  /** About how many messages each long history holds. */
  longHistory: number;
  /** Phone numbers (wa_id) of the customers with a long history, to write to them again. */
  longHistoryCustomers: string[];
  /** Rows per table after seeding, by table name. */
  rows: Record<string, number>;
  ms: number;
}

/** Seeded customers' phone numbers: `1999` and seven digits, apart from any the tests and benches use. */
export const seededPhone = (conversation: number) => `1999${String(conversation).padStart(7, "0")}`;

/** Seeds the schema named in `databaseUrl` (`?schema=`), already migrated and empty. */
export async function seedHistory(databaseUrl: string, options: SeedOptions = {}): Promise<SeededHistory> {
  const messages = options.messages ?? 100_000;
  const conversations = options.conversations ?? Math.max(1, Math.round(messages / 10));
  const longConversations = Math.min(options.longConversations ?? 10, conversations);
  const longHistory = options.longHistory ?? 2_000;
  const deadLetterEvery = options.deadLetterEvery ?? 20;
  const phoneNumberId = options.phoneNumberId ?? PHONE_NUMBER_ID;
  const inLong = Math.min(messages, longConversations * longHistory);
  if (conversations <= longConversations && inLong < messages) throw new Error("seedHistory: no ordinary conversations left for the other messages");

  const { connectionString, schema } = parseDatabaseUrl(databaseUrl);
  if (!schema) throw new Error("seedHistory wants a DATABASE_URL with ?schema=");
  const client = new pg.Client({ connectionString, options: `-c search_path=${pg.escapeIdentifier(schema)}`, application_name: "seed-history" });
  await client.connect();
  const started = performance.now();
  try {
    await client.query("BEGIN");
    await client.query("SELECT setseed(0.42)"); // the same spread on every run
    // conversation i (1-based): contact i, on one business number.
    await client.query(
      `INSERT INTO contacts (id, wa_id, name, created_at, updated_at)
       SELECT md5('contact' || i)::uuid, '1999' || lpad(i::text, 7, '0'), 'Seeded customer ' || i, now() - interval '60 days', now()
       FROM generate_series(1, $1::int) AS i`,
      [conversations],
    );
    await client.query(
      `INSERT INTO conversations (id, phone_number_id, contact_id, last_inbound_at, created_at, updated_at)
       SELECT md5('conversation' || i)::uuid, $2, md5('contact' || i)::uuid, now() - interval '3 days', now() - interval '60 days', now()
       FROM generate_series(1, $1::int) AS i`,
      [conversations, phoneNumberId],
    );
    // Message k (oldest first, spread over 30 days up to now) is from a long conversation with
    // the long conversations' share of probability, else from an ordinary one, skewed (u²) so
    // that a few ordinary conversations have hundreds of messages and most a handful.
    await client.query(
      `CREATE TEMP TABLE seed_messages ON COMMIT DROP AS
       SELECT k,
              CASE WHEN random() < $2::float8 / $5::int THEN 1 + floor($3::int * random())::int
                   ELSE $3::int + 1 + floor(($1::int - $3::int) * power(random(), 2))::int END AS conversation,
              now() - interval '30 days' + (k * 30 * 86400.0 / $5::int) * interval '1 second' AS sent_at,
              CASE WHEN k % 97 = 0 THEN 'skipped' WHEN k % $4::int = 0 THEN 'dead' ELSE 'sent' END AS fate
       FROM generate_series(1, $5::int) AS k`,
      [conversations, inLong, longConversations, deadLetterEvery, messages],
    );
    await client.query(
      `INSERT INTO replies (id, conversation_id, state, kind, text, model, input_tokens, output_tokens, created_at, updated_at, sent_at)
       SELECT md5('reply' || k)::uuid, md5('conversation' || conversation)::uuid, fate::reply_state, 'ai',
              'Seeded answer ' || k || ': thank you for your message, we are open from nine to five.',
              'claude-haiku-4-5', 900, 20, sent_at + interval '1 second', sent_at + interval '2 seconds',
              CASE WHEN fate = 'sent' THEN sent_at + interval '2 seconds' END
       FROM seed_messages WHERE fate <> 'skipped'`,
    );
    await client.query(
      `INSERT INTO inbound_messages (id, wamid, conversation_id, type, text, sent_at, payload, reply_id, skip_reason, created_at)
       SELECT md5('message' || k)::uuid, 'wamid.SEED' || k, md5('conversation' || conversation)::uuid,
              CASE WHEN fate = 'skipped' THEN 'reaction' ELSE 'text' END,
              CASE WHEN fate = 'skipped' THEN NULL ELSE 'Seeded question ' || k || ': are you open today?' END,
              sent_at,
              CASE WHEN fate = 'skipped'
                   THEN jsonb_build_object('id', 'wamid.SEED' || k, 'type', 'reaction', 'reaction', jsonb_build_object('emoji', '👍'))
                   ELSE jsonb_build_object('id', 'wamid.SEED' || k, 'type', 'text', 'text', jsonb_build_object('body', 'Seeded question ' || k)) END,
              CASE WHEN fate = 'skipped' THEN NULL ELSE md5('reply' || k)::uuid END,
              CASE WHEN fate = 'skipped' THEN 'a reaction' END,
              sent_at
       FROM seed_messages`,
    );
    // One part per reply; one in 20 is long enough for two. A dead reply's parts were refused.
    await client.query(
      `INSERT INTO outbound_messages (id, reply_id, seq, text, send_state, wamid, status, status_rank, status_at, created_at, accepted_at)
       SELECT md5('part' || k || '.' || seq)::uuid, md5('reply' || k)::uuid, seq, 'Seeded answer ' || k || ', part ' || seq,
              CASE WHEN fate = 'sent' THEN 'accepted' ELSE 'pending' END::send_state,
              CASE WHEN fate = 'sent' THEN 'wamid.SEEDOUT' || k || '.' || seq END,
              CASE WHEN fate = 'sent' THEN (CASE WHEN k % 3 = 0 THEN 'delivered' ELSE 'read' END) END,
              CASE WHEN fate = 'sent' THEN (CASE WHEN k % 3 = 0 THEN 2 ELSE 3 END) ELSE 0 END,
              CASE WHEN fate = 'sent' THEN sent_at + interval '5 seconds' END,
              sent_at + interval '2 seconds',
              CASE WHEN fate = 'sent' THEN sent_at + interval '2 seconds' END
       FROM seed_messages CROSS JOIN LATERAL generate_series(0, CASE WHEN k % 20 = 0 THEN 1 ELSE 0 END) AS seq
       WHERE fate <> 'skipped'`,
    );
    // Staff closed most dead letters long ago; the newest few are still open.
    await client.query(
      `INSERT INTO dead_letters (id, conversation_id, reply_id, dedup_key, source, code, reason, attempts, state, acted_by, acted_at, created_at, updated_at)
       SELECT md5('dead' || k)::uuid, md5('conversation' || conversation)::uuid, md5('reply' || k)::uuid, 'seed.' || k,
              'graph', '131047', 'Message failed to send because more than 24 hours have passed since the customer last replied', 4,
              s.state::dead_letter_state,
              CASE WHEN s.state <> 'open' THEN 'staff@example.com' END,
              CASE WHEN s.state <> 'open' THEN sent_at + interval '1 hour' END,
              sent_at + interval '3 seconds', sent_at + interval '1 hour'
       FROM seed_messages
       CROSS JOIN LATERAL (SELECT CASE WHEN k > $1::int * 0.98 THEN 'open' WHEN (k / $2::int) % 2 = 0 THEN 'resent' ELSE 'discarded' END AS state) AS s
       WHERE fate = 'dead'`,
      [messages, deadLetterEvery],
    );
    await client.query(
      `INSERT INTO dead_letter_actions (id, dead_letter_id, actor, action, created_at)
       SELECT md5('action' || d.id)::uuid, d.id, d.acted_by, CASE WHEN d.state = 'resent' THEN 'resend' ELSE 'discard' END, d.acted_at
       FROM dead_letters d WHERE d.state <> 'open'`,
    );
    // Each conversation's place in the list (GET /admin/conversations): its last message either way.
    await client.query(
      `UPDATE conversations c SET last_message_at = a.at FROM (
         SELECT conversation_id, max(at) AS at FROM (
           SELECT conversation_id, created_at AS at FROM inbound_messages
           UNION ALL
           SELECT r.conversation_id, p.accepted_at FROM outbound_messages p JOIN replies r ON r.id = p.reply_id WHERE p.accepted_at IS NOT NULL
         ) x GROUP BY conversation_id
       ) a
       WHERE a.conversation_id = c.id`,
    );
    await client.query("COMMIT");
    // As autovacuum leaves a database in production: GIN indexes' pending entries merged, the
    // rows the update above replaced gone from the indexes, the planner told the real sizes.
    await client.query("VACUUM ANALYZE");
    const counted = await client.query<{ table: string; rows: string }>(
      `SELECT c.relname AS table, c.reltuples::bigint AS rows FROM pg_class c
       WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r'`,
      [schema],
    );
    const rows = Object.fromEntries(counted.rows.map((r) => [r.table, Math.max(0, Number(r.rows))]));
    return {
      messages: rows.inbound_messages ?? 0,
      conversations: rows.conversations ?? 0,
      replies: rows.replies ?? 0,
      parts: rows.outbound_messages ?? 0,
      deadLetters: rows.dead_letters ?? 0,
      longHistory,
      longHistoryCustomers: Array.from({ length: longConversations }, (_, i) => seededPhone(i + 1)),
      rows,
      ms: performance.now() - started,
    };
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
}
