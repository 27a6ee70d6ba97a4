-- Issue 32.3: a regenerate asks Claude afresh. A reply's tool loop is numbered by round: a
-- regenerate starts the next, with its own steps, tool calls (new Idempotency-Keys) and clock;
-- the earlier rounds stay as history of what was done.
ALTER TABLE "replies" ADD COLUMN "round" INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "claude_steps" ADD COLUMN "round" INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "claude_steps" DROP CONSTRAINT "claude_steps_pkey";
ALTER TABLE "claude_steps" ADD CONSTRAINT "claude_steps_pkey" PRIMARY KEY ("reply_id", "round", "step");
ALTER TABLE "tool_calls" ADD COLUMN "round" INTEGER NOT NULL DEFAULT 0;
