-- Issue 32.8: a part sent again (law 5's window) may reach the customer twice, and Meta bills
-- each copy. The part keeps one wamid; the other copy's pricing, from its own status webhooks,
-- is recorded here, once per wamid, and counted by the cost ledger beside the parts.
CREATE TABLE "outbound_copies" (
    "wamid" TEXT NOT NULL,
    "part_id" UUID NOT NULL,
    "pricing_category" TEXT NOT NULL,
    "pricing_type" TEXT,
    "pricing_model" TEXT,
    "billable" BOOLEAN NOT NULL,
    "market" TEXT NOT NULL,
    "meta_amount" DOUBLE PRECISION,
    "priced_at" TIMESTAMPTZ(3) NOT NULL,
    CONSTRAINT "outbound_copies_pkey" PRIMARY KEY ("wamid"),
    CONSTRAINT "outbound_copies_part_id_fkey" FOREIGN KEY ("part_id") REFERENCES "outbound_messages"("id") ON DELETE RESTRICT ON UPDATE CASCADE
);
CREATE INDEX "outbound_copies_part_id_idx" ON "outbound_copies"("part_id");
CREATE INDEX "outbound_copies_priced_at_idx" ON "outbound_copies"("priced_at");
