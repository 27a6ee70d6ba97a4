-- AlterTable
ALTER TABLE "contacts" ADD COLUMN "opted_out_at" TIMESTAMPTZ(3);

-- AlterTable
ALTER TABLE "conversations" ADD COLUMN "paused_until" TIMESTAMPTZ(3),
ADD COLUMN "paused_by" TEXT;

-- AlterTable
ALTER TABLE "replies" ADD COLUMN "kind" TEXT NOT NULL DEFAULT 'ai',
ADD COLUMN "cache_read_tokens" INTEGER,
ADD COLUMN "cache_creation_tokens" INTEGER;
