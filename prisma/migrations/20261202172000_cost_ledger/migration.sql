-- Issue 20: every reply's cost known. What Claude's calls for a reply cost, priced when they
-- answered (src/ai/pricing.ts, MODEL_PRICES_FILE); null when the model had no price.
ALTER TABLE "replies" ADD COLUMN "claude_cost_usd" DOUBLE PRECISION;

-- What Meta's status webhooks say a sent message costs (its `pricing` object), recorded once
-- by the first status that carries it, with the recipient's market and, by META_RATES_FILE,
-- the amount (null: billed but not priced by the card).
ALTER TABLE "outbound_messages" ADD COLUMN "pricing_category" TEXT,
ADD COLUMN "pricing_type" TEXT,
ADD COLUMN "pricing_model" TEXT,
ADD COLUMN "billable" BOOLEAN,
ADD COLUMN "market" TEXT,
ADD COLUMN "meta_amount" DOUBLE PRECISION,
ADD COLUMN "priced_at" TIMESTAMPTZ(3);

-- The ledger reads by day: replies by when they were made, parts by when Meta took them.
CREATE INDEX "replies_created_at_idx" ON "replies"("created_at");
CREATE INDEX "outbound_messages_accepted_at_idx" ON "outbound_messages"("accepted_at");
