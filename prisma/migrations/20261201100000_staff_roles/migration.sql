-- CreateEnum
CREATE TYPE "staff_role" AS ENUM ('staff', 'operator');

-- AlterTable
ALTER TABLE "staff_members" ADD COLUMN "role" "staff_role" NOT NULL DEFAULT 'staff';
