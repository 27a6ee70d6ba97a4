-- Law 14: a customer whose reply is dead-lettered hears that a person will answer, once per
-- open dead letter. The holding message is a reply of its own (kind 'holding'), sent by the
-- part machinery of law 5; its dead letter points at it, made in the same transaction.
ALTER TABLE "dead_letters" ADD COLUMN "holding_reply_id" UUID REFERENCES "replies"("id");
CREATE UNIQUE INDEX "dead_letters_holding_reply_id_key" ON "dead_letters"("holding_reply_id");
