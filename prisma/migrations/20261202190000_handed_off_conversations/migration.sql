-- Issue 21: a customer waiting for a person (a handoff, or a message to a paused bot) is an item
-- that staff answer and then give back to the bot: "resolved", beside "resent" and "discarded".
ALTER TYPE "dead_letter_state" ADD VALUE 'resolved';
