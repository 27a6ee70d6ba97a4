-- Issue 19: a business number's knowledge files too large to send whole to Claude are split
-- into passages and searched with Postgres full-text search (src/knowledge/).

-- CreateTable
CREATE TABLE "knowledge_versions" (
    "phone_number_id" TEXT NOT NULL,
    "version" TEXT NOT NULL,
    "passage_count" INTEGER NOT NULL,
    "indexed_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "used_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "knowledge_versions_pkey" PRIMARY KEY ("phone_number_id","version")
);

-- CreateTable
-- The 'simple' configuration lower-cases words and stems none: customers write in any
-- language, and one language's stemmer would mangle the others. The title (file path and
-- heading) weighs more than the text; its punctuation is spaced out so "returns.md" is
-- found by "returns".
CREATE TABLE "knowledge_passages" (
    "id" UUID NOT NULL,
    "phone_number_id" TEXT NOT NULL,
    "version" TEXT NOT NULL,
    "source" TEXT NOT NULL,
    "title" TEXT NOT NULL,
    "seq" INTEGER NOT NULL,
    "text" TEXT NOT NULL,
    "search" tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', regexp_replace("title", '[[:punct:]]+', ' ', 'g')), 'A')
        || setweight(to_tsvector('simple', "text"), 'B')
    ) STORED,

    CONSTRAINT "knowledge_passages_pkey" PRIMARY KEY ("id")
);

-- CreateIndex
CREATE INDEX "knowledge_versions_used_at_idx" ON "knowledge_versions"("used_at");

-- CreateIndex
CREATE UNIQUE INDEX "knowledge_passages_phone_number_id_version_seq_key" ON "knowledge_passages"("phone_number_id", "version", "seq");

-- CreateIndex
CREATE INDEX "knowledge_passages_search_idx" ON "knowledge_passages" USING GIN ("search");

-- AddForeignKey
ALTER TABLE "knowledge_passages" ADD CONSTRAINT "knowledge_passages_phone_number_id_version_fkey" FOREIGN KEY ("phone_number_id", "version") REFERENCES "knowledge_versions"("phone_number_id", "version") ON DELETE CASCADE ON UPDATE CASCADE;
