-- Issue 21: who has an item open on the staff page, and who is answering it (src/admin/presence.ts).
-- A row per person and item while their page is open; gone when they leave or go quiet.
CREATE TABLE "staff_presence" (
    "dead_letter_id" UUID NOT NULL REFERENCES "dead_letters"("id") ON DELETE CASCADE,
    "actor" TEXT NOT NULL,
    "seen_at" TIMESTAMPTZ(3) NOT NULL,
    "answering_at" TIMESTAMPTZ(3),
    CONSTRAINT "staff_presence_pkey" PRIMARY KEY ("dead_letter_id", "actor")
);
