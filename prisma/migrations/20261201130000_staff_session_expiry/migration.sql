-- Expired staff sessions are deleted at each sign-in (src/staff/accounts.ts): found by this
-- index, whatever the table holds.
-- CreateIndex
CREATE INDEX "staff_sessions_expires_at_idx" ON "staff_sessions"("expires_at");
