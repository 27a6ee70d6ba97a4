-- AlterTable
ALTER TABLE "outbound_messages" ADD COLUMN "template" TEXT;
