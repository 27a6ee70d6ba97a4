-- Issue 33.3: ask the customer how it went (CSAT). One row per ask: scheduled when the bot has
-- answered (pending, due CSAT_AFTER_SECONDS later), then sent (its reply of kind "csat"),
-- cancelled (the customer wrote first) or skipped (opted out, paused, an open item, asked
-- recently, the window closed), with the reason. The customer's tap is its rating.
CREATE TABLE "csat_asks" (
    "id" UUID NOT NULL,
    "conversation_id" UUID NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'pending',
    "answered_at" TIMESTAMPTZ(3) NOT NULL,
    "due_at" TIMESTAMPTZ(3) NOT NULL,
    "reason" TEXT,
    "reply_id" UUID,
    "asked_at" TIMESTAMPTZ(3),
    "rating" TEXT,
    "rated_at" TIMESTAMPTZ(3),
    "thanked" BOOLEAN NOT NULL DEFAULT false,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "csat_asks_pkey" PRIMARY KEY ("id"),
    CONSTRAINT "csat_asks_conversation_id_fkey" FOREIGN KEY ("conversation_id") REFERENCES "conversations"("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "csat_asks_reply_id_fkey" FOREIGN KEY ("reply_id") REFERENCES "replies"("id") ON DELETE SET NULL ON UPDATE CASCADE,
    CONSTRAINT "csat_asks_state_check" CHECK ("state" IN ('pending', 'sent', 'cancelled', 'skipped')),
    CONSTRAINT "csat_asks_rating_check" CHECK ("rating" IS NULL OR "rating" IN ('good', 'okay', 'bad'))
);
CREATE INDEX "csat_asks_conversation_id_asked_at_idx" ON "csat_asks"("conversation_id", "asked_at");
CREATE INDEX "csat_asks_asked_at_idx" ON "csat_asks"("asked_at");
CREATE INDEX "csat_asks_rated_at_idx" ON "csat_asks"("rated_at");
CREATE INDEX "csat_asks_state_due_at_idx" ON "csat_asks"("state", "due_at");
-- At most one ask waits per conversation: the bot answering again moves it.
CREATE UNIQUE INDEX "csat_asks_one_pending" ON "csat_asks"("conversation_id") WHERE "state" = 'pending';

-- An interactive message (reply buttons) a part goes out as: Graph's `interactive` object.
ALTER TABLE "outbound_messages" ADD COLUMN "interactive" JSONB;
