-- Issue 20, law 14: staff are told of new dead letters and handoffs, batched (src/notify/).
CREATE TABLE "staff_notifications" (
    "id" UUID NOT NULL,
    "channels" TEXT[],
    "webhook_sent_at" TIMESTAMPTZ(3),
    "email_sent_at" TIMESTAMPTZ(3),
    "delivered_at" TIMESTAMPTZ(3),
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "last_error" TEXT,
    "created_at" TIMESTAMPTZ(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "staff_notifications_pkey" PRIMARY KEY ("id")
);

CREATE INDEX "staff_notifications_delivered_at_created_at_idx" ON "staff_notifications"("delivered_at", "created_at");

CREATE TABLE "staff_notified_items" (
    "dead_letter_id" UUID NOT NULL,
    "notification_id" UUID,

    CONSTRAINT "staff_notified_items_pkey" PRIMARY KEY ("dead_letter_id")
);

CREATE INDEX "staff_notified_items_notification_id_idx" ON "staff_notified_items"("notification_id");

ALTER TABLE "staff_notified_items" ADD CONSTRAINT "staff_notified_items_dead_letter_id_fkey" FOREIGN KEY ("dead_letter_id") REFERENCES "dead_letters"("id") ON DELETE RESTRICT ON UPDATE CASCADE;

ALTER TABLE "staff_notified_items" ADD CONSTRAINT "staff_notified_items_notification_id_fkey" FOREIGN KEY ("notification_id") REFERENCES "staff_notifications"("id") ON DELETE SET NULL ON UPDATE CASCADE;

-- What was open before this release was never announced and is not announced now: staff
-- already see it on the page; the first notification lists only what is new.
INSERT INTO "staff_notified_items" ("dead_letter_id") SELECT "id" FROM "dead_letters";
