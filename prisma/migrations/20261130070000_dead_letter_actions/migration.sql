-- CreateTable
CREATE TABLE "dead_letter_actions" (
    "id" UUID NOT NULL,
    "dead_letter_id" UUID NOT NULL,
    "actor" TEXT NOT NULL,
    "action" TEXT NOT NULL,
    "detail" JSONB,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "dead_letter_actions_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "dead_letter_actions_dead_letter_id_created_at_idx" ON "dead_letter_actions"("dead_letter_id", "created_at");

-- AddForeignKey
ALTER TABLE "dead_letter_actions" ADD CONSTRAINT "dead_letter_actions_dead_letter_id_fkey" FOREIGN KEY ("dead_letter_id") REFERENCES "dead_letters"("id") ON DELETE RESTRICT ON UPDATE CASCADE;
