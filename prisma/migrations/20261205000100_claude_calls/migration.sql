-- Issue 32.6 and 32.7: one row per Claude call, made before the call with its greatest cost
-- (the daily budget's reservation), settled to the usage Anthropic answered with. A call
-- never answered (a timeout, a worker killed mid-call) keeps its reservation: it may be billed.
CREATE TABLE "claude_calls" (
    "id" UUID NOT NULL,
    "phone_number_id" TEXT NOT NULL,
    "reply_id" UUID REFERENCES "replies"("id"),
    "round" INTEGER NOT NULL,
    "step" INTEGER NOT NULL,
    -- reserved (made, maybe in flight), answered (usage as Anthropic answered), refused
    -- (Anthropic answered an error: not billed), unknown (no answer: it may be billed).
    "state" TEXT NOT NULL DEFAULT 'reserved',
    "model" TEXT NOT NULL,
    -- The call's greatest cost in USD (max_tokens and the prompt's size); null for a model without a price.
    "reserved_usd" DOUBLE PRECISION,
    "input_tokens" INTEGER,
    "output_tokens" INTEGER,
    "cache_read_tokens" INTEGER,
    "cache_creation_tokens" INTEGER,
    "cache_creation_1h_tokens" INTEGER,
    -- Priced as it answered; null when answered by a model without a price, or not answered.
    "cost_usd" DOUBLE PRECISION,
    "created_at" TIMESTAMPTZ(3) NOT NULL,
    "settled_at" TIMESTAMPTZ(3),
    CONSTRAINT "claude_calls_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "claude_calls_phone_number_id_created_at_idx" ON "claude_calls"("phone_number_id", "created_at");
CREATE INDEX "claude_calls_reply_id_idx" ON "claude_calls"("reply_id");

-- The calls made before the ledger, as the replies recorded them: a reply's summed usage when
-- it has a draft, else each stored step.
INSERT INTO "claude_calls" ("id", "phone_number_id", "reply_id", "round", "step", "state", "model", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_creation_tokens", "cache_creation_1h_tokens", "cost_usd", "created_at", "settled_at")
SELECT gen_random_uuid(), c."phone_number_id", r."id", 0, 0, 'answered', r."model", r."input_tokens", COALESCE(r."output_tokens", 0),
    COALESCE(r."cache_read_tokens", 0), COALESCE(r."cache_creation_tokens", 0), COALESCE(r."cache_creation_1h_tokens", 0), r."claude_cost_usd",
    r."created_at", r."created_at"
FROM "replies" r JOIN "conversations" c ON c."id" = r."conversation_id"
WHERE r."input_tokens" IS NOT NULL AND r."model" IS NOT NULL;
INSERT INTO "claude_calls" ("id", "phone_number_id", "reply_id", "round", "step", "state", "model", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_creation_tokens", "cache_creation_1h_tokens", "created_at", "settled_at")
SELECT gen_random_uuid(), c."phone_number_id", r."id", 0, s."step", 'answered', s."model", s."input_tokens", s."output_tokens",
    s."cache_read_tokens", s."cache_creation_tokens", s."cache_creation_1h_tokens", s."created_at", s."created_at"
FROM "claude_steps" s JOIN "replies" r ON r."id" = s."reply_id" JOIN "conversations" c ON c."id" = r."conversation_id"
WHERE r."input_tokens" IS NULL;
