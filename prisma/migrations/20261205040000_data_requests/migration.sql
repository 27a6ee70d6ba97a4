-- Issue 35: what was done with a customer's data on request, kept without the data itself:
-- who exported or erased it, when, and (for an erase) how many rows of each kind went and the
-- identity as a keyed hash, so that a repeated request is recognised without keeping the number.
CREATE TABLE "data_requests" (
  "id" UUID NOT NULL,
  "kind" TEXT NOT NULL,
  "actor" TEXT NOT NULL,
  "contact_id" UUID,
  "identity_hash" TEXT,
  "counts" JSONB,
  "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
  CONSTRAINT "data_requests_pkey" PRIMARY KEY ("id")
);
CREATE INDEX "data_requests_contact_id_idx" ON "data_requests"("contact_id");
