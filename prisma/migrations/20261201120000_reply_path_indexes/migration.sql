-- The reply path reads a conversation's recent messages by storage time (history, the quote),
-- its unanswered messages (every reply job run), and its newest sent replies (history): each
-- through an index of its own, so a reply costs the same whatever the table holds (issue 10).
CREATE INDEX "inbound_messages_conversation_id_created_at_idx" ON "inbound_messages"("conversation_id", "created_at");
CREATE INDEX "inbound_messages_waiting_idx" ON "inbound_messages"("conversation_id") WHERE "reply_id" IS NULL AND "skip_reason" IS NULL;
CREATE INDEX "replies_sent_idx" ON "replies"("conversation_id", "sent_at" DESC NULLS LAST) WHERE "state" = 'sent';

-- A deletion now finds its message by wamid (src/messages/store.ts): nothing reads refers_to by index.
DROP INDEX "inbound_messages_refers_to_idx";
