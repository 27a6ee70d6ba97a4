-- Issue 35.2: a contact erased on request keeps its row (its conversations' counts and costs
-- stay, without any link to the person), emptied of every identifier, and is gone to every
-- route from then on.
ALTER TABLE "contacts" ADD COLUMN "erased_at" TIMESTAMPTZ(3);
-- An erased contact is known by nothing any more: only a live one must have a phone or a BSUID.
ALTER TABLE "contacts" DROP CONSTRAINT "contacts_identified";
ALTER TABLE "contacts" ADD CONSTRAINT "contacts_identified" CHECK ("wa_id" IS NOT NULL OR "user_id" IS NOT NULL OR "erased_at" IS NOT NULL);
