-- A customer is known by phone, by business-scoped user id (BSUID), or both (WHATSAPP.md §9).
ALTER TABLE "contacts" ALTER COLUMN "wa_id" DROP NOT NULL,
ADD COLUMN "user_id" TEXT,
ADD COLUMN "parent_user_id" TEXT,
ADD COLUMN "username" TEXT,
ADD COLUMN "marketing_opted_out_at" TIMESTAMPTZ(3);
CREATE UNIQUE INDEX "contacts_user_id_key" ON "contacts"("user_id");
ALTER TABLE "contacts" ADD CONSTRAINT "contacts_identified" CHECK ("wa_id" IS NOT NULL OR "user_id" IS NOT NULL);

-- A deletion or an edit names the message it changes; a deleted message's words are erased.
ALTER TABLE "inbound_messages" ADD COLUMN "refers_to" TEXT,
ADD COLUMN "deleted_at" TIMESTAMPTZ(3);
CREATE INDEX "inbound_messages_refers_to_idx" ON "inbound_messages"("refers_to");
