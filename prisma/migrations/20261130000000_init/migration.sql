-- CreateEnum
CREATE TYPE "reply_state" AS ENUM ('generating', 'ready', 'sent', 'dead');

-- CreateEnum
CREATE TYPE "send_state" AS ENUM ('pending', 'sending', 'accepted');

-- CreateEnum
CREATE TYPE "dead_letter_state" AS ENUM ('open', 'resent', 'discarded');

-- CreateTable
CREATE TABLE "contacts" (
    "id" UUID NOT NULL,
    "wa_id" TEXT NOT NULL,
    "name" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "contacts_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "conversations" (
    "id" UUID NOT NULL,
    "phone_number_id" TEXT NOT NULL,
    "contact_id" UUID NOT NULL,
    "last_inbound_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "conversations_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "inbound_messages" (
    "id" UUID NOT NULL,
    "wamid" TEXT NOT NULL,
    "conversation_id" UUID NOT NULL,
    "type" TEXT NOT NULL,
    "text" TEXT,
    "sent_at" TIMESTAMPTZ(3) NOT NULL,
    "payload" JSONB NOT NULL,
    "reply_id" UUID,
    "skip_reason" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "inbound_messages_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "replies" (
    "id" UUID NOT NULL,
    "conversation_id" UUID NOT NULL,
    "state" "reply_state" NOT NULL DEFAULT 'generating',
    "text" TEXT,
    "model" TEXT,
    "input_tokens" INTEGER,
    "output_tokens" INTEGER,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,
    "sent_at" TIMESTAMPTZ(3),

    CONSTRAINT "replies_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "outbound_messages" (
    "id" UUID NOT NULL,
    "reply_id" UUID NOT NULL,
    "seq" INTEGER NOT NULL,
    "text" TEXT NOT NULL,
    "send_state" "send_state" NOT NULL DEFAULT 'pending',
    "wamid" TEXT,
    "status" TEXT,
    "status_rank" INTEGER NOT NULL DEFAULT 0,
    "status_at" TIMESTAMPTZ(3),
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "accepted_at" TIMESTAMPTZ(3),

    CONSTRAINT "outbound_messages_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "dead_letters" (
    "id" UUID NOT NULL,
    "conversation_id" UUID NOT NULL,
    "reply_id" UUID,
    "dedup_key" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "code" TEXT,
    "reason" TEXT NOT NULL,
    "detail" JSONB,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "state" "dead_letter_state" NOT NULL DEFAULT 'open',
    "acted_by" TEXT,
    "acted_at" TIMESTAMPTZ(3),
    "note" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updated_at" TIMESTAMPTZ(3) NOT NULL,

    CONSTRAINT "dead_letters_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE UNIQUE INDEX "contacts_wa_id_key" ON "contacts"("wa_id");

-- CreateIndex
CREATE UNIQUE INDEX "conversations_phone_number_id_contact_id_key" ON "conversations"("phone_number_id", "contact_id");

-- CreateIndex
CREATE UNIQUE INDEX "inbound_messages_wamid_key" ON "inbound_messages"("wamid");

-- CreateIndex
CREATE INDEX "inbound_messages_conversation_id_sent_at_idx" ON "inbound_messages"("conversation_id", "sent_at");

-- CreateIndex
CREATE INDEX "replies_conversation_id_state_idx" ON "replies"("conversation_id", "state");

-- CreateIndex
CREATE UNIQUE INDEX "outbound_messages_wamid_key" ON "outbound_messages"("wamid");

-- CreateIndex
CREATE UNIQUE INDEX "outbound_messages_reply_id_seq_key" ON "outbound_messages"("reply_id", "seq");

-- CreateIndex
CREATE UNIQUE INDEX "dead_letters_dedup_key_key" ON "dead_letters"("dedup_key");

-- CreateIndex
CREATE INDEX "dead_letters_state_created_at_idx" ON "dead_letters"("state", "created_at");

-- AddForeignKey
ALTER TABLE "conversations" ADD CONSTRAINT "conversations_contact_id_fkey" FOREIGN KEY ("contact_id") REFERENCES "contacts"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "inbound_messages" ADD CONSTRAINT "inbound_messages_conversation_id_fkey" FOREIGN KEY ("conversation_id") REFERENCES "conversations"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "inbound_messages" ADD CONSTRAINT "inbound_messages_reply_id_fkey" FOREIGN KEY ("reply_id") REFERENCES "replies"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "replies" ADD CONSTRAINT "replies_conversation_id_fkey" FOREIGN KEY ("conversation_id") REFERENCES "conversations"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "outbound_messages" ADD CONSTRAINT "outbound_messages_reply_id_fkey" FOREIGN KEY ("reply_id") REFERENCES "replies"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "dead_letters" ADD CONSTRAINT "dead_letters_conversation_id_fkey" FOREIGN KEY ("conversation_id") REFERENCES "conversations"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

-- AddForeignKey
ALTER TABLE "dead_letters" ADD CONSTRAINT "dead_letters_reply_id_fkey" FOREIGN KEY ("reply_id") REFERENCES "replies"("id") ON DELETE SET NULL ON UPDATE CASCADE;
