-- Opt-out belongs to the customer's conversation with one business number, not to the person
-- across every number; the reply job decides it in message order (DESIGN.md law 8).
ALTER TABLE "conversations" ADD COLUMN "opted_out_at" TIMESTAMPTZ(3),
ADD COLUMN "reply_fence" BIGINT NOT NULL DEFAULT 0;
UPDATE "conversations" c SET "opted_out_at" = ct."opted_out_at" FROM "contacts" ct WHERE c."contact_id" = ct."id";
ALTER TABLE "contacts" DROP COLUMN "opted_out_at";

-- What a message asks of the bot, stored with it; what the bot does is decided at reply time.
ALTER TABLE "inbound_messages" ADD COLUMN "canned_text" TEXT,
ADD COLUMN "control" TEXT,
ADD COLUMN "arrival" BIGINT;

-- A maybe-sent part a person chose not to wait for: kept, so a late status still finds it (law 5).
ALTER TYPE "send_state" ADD VALUE 'unconfirmed';
ALTER TABLE "outbound_messages" ADD COLUMN "send_attempt" INTEGER NOT NULL DEFAULT 0,
ADD COLUMN "resend_after" TIMESTAMPTZ(3);
UPDATE "outbound_messages" SET "resend_after" = CURRENT_TIMESTAMP WHERE "send_state" = 'sending';

-- One open dead letter per reply: later duplicates of an open item are closed into the first.
UPDATE "dead_letters" d
SET "state" = 'discarded', "acted_by" = 'system', "acted_at" = CURRENT_TIMESTAMP,
    "note" = 'merged into the earlier open item of the same reply'
WHERE d."state" = 'open' AND d."reply_id" IS NOT NULL AND EXISTS (
  SELECT 1 FROM "dead_letters" o
  WHERE o."reply_id" = d."reply_id" AND o."state" = 'open' AND (o."created_at", o."id") < (d."created_at", d."id")
);
CREATE UNIQUE INDEX "dead_letters_open_reply_key" ON "dead_letters"("reply_id") WHERE "state" = 'open';

-- The reply path and the reconciler look these up.
CREATE INDEX "inbound_messages_reply_id_idx" ON "inbound_messages"("reply_id");
CREATE INDEX "inbound_messages_unanswered_idx" ON "inbound_messages"("created_at") WHERE "reply_id" IS NULL AND "skip_reason" IS NULL;
CREATE INDEX "dead_letters_conversation_id_idx" ON "dead_letters"("conversation_id");
