-- Issue 19: a reply may take several Claude calls (a tool loop). Each call's answer is a step,
-- stored before anything it asks for runs (law 4); each business action it asks for is a tool
-- call keyed by Claude's tool_use id, recorded before it runs (law 12).
CREATE TABLE "claude_steps" (
    "reply_id" UUID NOT NULL,
    "step" INTEGER NOT NULL,
    "content" JSONB NOT NULL,
    "stop_reason" TEXT NOT NULL,
    "model" TEXT NOT NULL,
    "input_tokens" INTEGER NOT NULL,
    "output_tokens" INTEGER NOT NULL,
    "cache_read_tokens" INTEGER NOT NULL,
    "cache_creation_tokens" INTEGER NOT NULL,
    "cache_creation_1h_tokens" INTEGER NOT NULL DEFAULT 0,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "claude_steps_pkey" PRIMARY KEY ("reply_id","step")
);

CREATE TABLE "tool_calls" (
    "id" TEXT NOT NULL,
    "reply_id" UUID NOT NULL,
    "step" INTEGER NOT NULL,
    "name" TEXT NOT NULL,
    "input" JSONB NOT NULL,
    "state" TEXT NOT NULL DEFAULT 'requested',
    "idempotency_key" TEXT NOT NULL,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "request" JSONB,
    "answer" TEXT,
    "is_error" BOOLEAN,
    "status" INTEGER,
    "requested_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "started_at" TIMESTAMPTZ(3),
    "finished_at" TIMESTAMPTZ(3),

    CONSTRAINT "tool_calls_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "tool_calls_reply_id_idx" ON "tool_calls"("reply_id");

ALTER TABLE "claude_steps" ADD CONSTRAINT "claude_steps_reply_id_fkey" FOREIGN KEY ("reply_id") REFERENCES "replies"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
ALTER TABLE "tool_calls" ADD CONSTRAINT "tool_calls_reply_id_fkey" FOREIGN KEY ("reply_id") REFERENCES "replies"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- What the reply's words rest on: the knowledge passages Claude cited, shown to staff.
ALTER TABLE "replies" ADD COLUMN "citations" JSONB;

-- Of the cache writes, those for an hour: priced 2x input where the rest are 1.25x.
ALTER TABLE "replies" ADD COLUMN "cache_creation_1h_tokens" INTEGER;
