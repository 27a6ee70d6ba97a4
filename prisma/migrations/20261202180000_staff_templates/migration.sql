-- Issue 21: staff send an approved template of their choosing. The part carries the template's
-- language and body parameters, so it is sent by the part machinery of law 5 like any other.
-- Null language: the business number's windowClosedTemplate, as before.
ALTER TABLE "outbound_messages" ADD COLUMN "template_language" TEXT;
ALTER TABLE "outbound_messages" ADD COLUMN "template_parameters" JSONB;
