-- An erase's clean-up of Redis, kept until it is done: the strings that find the customer's
-- jobs and the staff API's stored answers quoting them, written in the erase's own transaction
-- and emptied once Redis holds none of them. A process that stops between the commit and the
-- clean-up leaves them here, and the reconciler finishes the erase.
ALTER TABLE "data_requests" ADD COLUMN "redis_needles" TEXT[] NOT NULL DEFAULT ARRAY[]::TEXT[];
