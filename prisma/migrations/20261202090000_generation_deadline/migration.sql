-- Law 4 across a takeover: while a reply's Claude call may still answer, a run that takes the
-- conversation over waits until this deadline instead of paying for a second call.
ALTER TABLE "replies" ADD COLUMN "generation_deadline" TIMESTAMPTZ(3);
