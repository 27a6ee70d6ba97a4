-- Issue 32.12: KNOWLEDGE_LANGUAGE chooses the text-search configuration knowledge passages are
-- indexed and searched with: 'simple' (the default) stems no language's words; 'english' reads
-- "returns" as "return". A generated column could only name one configuration for every
-- passage, so the vector is now built by the statement that stores the passages
-- (src/knowledge/store.ts), with the configuration recorded beside it. A process with another
-- language stores its own version of the passages (src/knowledge/knowledge.ts), so a change of
-- language indexes them again rather than searching vectors built for the old one.
--
-- The configuration is kept by name (TEXT), not as a regconfig: pg_upgrade refuses a database
-- whose tables hold regconfig values, and a major-version upgrade must not wait on this table.

-- AlterTable
ALTER TABLE "knowledge_passages" ADD COLUMN "language" TEXT NOT NULL DEFAULT 'simple';

-- The passages stored so far keep their vectors, built with 'simple' as the new column says.
ALTER TABLE "knowledge_passages" ALTER COLUMN "search" DROP EXPRESSION;
