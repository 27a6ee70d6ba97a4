-- Issue 33.1: every conversation, newest activity first, and found by the customer or by words
-- either side wrote (GET /admin/conversations), fast at 100 000 conversations.
--
-- The list's order: when the conversation last moved (a customer's message reached us, or Meta
-- took one of ours), kept on the conversation by the statements that store those facts
-- (src/state/inbound.ts, parts.ts, replies.ts), so the first page is an index scan.
ALTER TABLE "conversations" ADD COLUMN "last_message_at" TIMESTAMPTZ(3);

UPDATE "conversations" c SET "last_message_at" = COALESCE(GREATEST(
  (SELECT max(m.created_at) FROM inbound_messages m WHERE m.conversation_id = c.id),
  (SELECT max(p.accepted_at) FROM outbound_messages p JOIN replies r ON r.id = p.reply_id WHERE r.conversation_id = c.id)
), c.created_at);

ALTER TABLE "conversations" ALTER COLUMN "last_message_at" SET DEFAULT CURRENT_TIMESTAMP, ALTER COLUMN "last_message_at" SET NOT NULL;

-- Read backwards for the list (newest first, the id breaking ties): keyset paging.
CREATE INDEX "conversations_last_message_at_id_idx" ON "conversations"("last_message_at", "id");

-- A customer found by the search below leads to their conversations: by contact, not scanning them all.
CREATE INDEX "conversations_contact_id_idx" ON "conversations"("contact_id");

-- Words either side wrote, by Postgres full-text search. An expression index must name one
-- text-search configuration: this one names 'simple', KNOWLEDGE_LANGUAGE's default, and the
-- search (src/conversations/list.ts) writes the same expression with the configured language,
-- so under 'simple' it is this index's. Under another language the search is as correct and
-- reads every message: add the same two indexes with that configuration in place of 'simple'
-- (docs/staff-api.md). Stored vectors instead would be written by every statement that writes
-- a message's or a reply's words, and be stale for the old rows once the language changed.
CREATE INDEX "inbound_messages_words_idx" ON "inbound_messages"
  USING gin (to_tsvector('simple'::regconfig, COALESCE("text", '') || ' ' || COALESCE("transcript", '')));
CREATE INDEX "replies_words_idx" ON "replies" USING gin (to_tsvector('simple'::regconfig, COALESCE("text", '')));

-- Any part of the customer's phone, BSUID, @username or name (ILIKE '%…%'): trigram indexes.
-- pg_trgm ships with Postgres and is a trusted extension (a database owner may create it). It
-- lives in one schema of the database, whichever a first migration put it in, so its operator
-- class is named by that schema.
CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
DO $$
DECLARE
  ops text := (SELECT quote_ident(n.nspname) || '.gin_trgm_ops' FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm');
BEGIN
  EXECUTE format('CREATE INDEX "contacts_found_by_idx" ON "contacts" USING gin ("wa_id" %1$s, "user_id" %1$s, "parent_user_id" %1$s, "username" %1$s, "name" %1$s)', ops);
END $$;
