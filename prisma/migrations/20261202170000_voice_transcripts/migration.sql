-- A voice note's words (issue 20): stored once, never asked of the transcriber again.
ALTER TABLE "inbound_messages" ADD COLUMN "transcript" TEXT;
