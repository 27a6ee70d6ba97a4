import pg from "pg";
import { describe, expect, it } from "vitest";
import { eventually, TEST_DATABASE_URL } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * An edit (WHATSAPP.md §11) landing between the reply job's read of the unanswered messages and
 * its bind of them to a reply: Claude must read the edited words, not the ones read before.
 * The interleaving is made with the database's own locks: the test holds the message's row
 * lock, so the reply job takes the conversation and reads the message, then waits at its bind;
 * meanwhile the edit's change is made under that lock, and the lock is let go.
 */

const harness = harnessPerTest();

describe("an edit between the reply's read and its bind", () => {
  it("is not lost: the bind sees the words changed, plans again, and Claude reads the edited words", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.queues.reply.pause();
    const { body, wamids } = textWebhook({ text: "I need 3 chairs" });
    await h.deliver(body);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), "the message to be stored");

    const editor = new pg.Client({ connectionString: TEST_DATABASE_URL });
    const watcher = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await Promise.all([editor.connect(), watcher.connect()]);
    try {
      await editor.query(`SET search_path TO ${pg.escapeIdentifier(h.schema)}`);
      await editor.query("BEGIN");
      await editor.query("SELECT id FROM inbound_messages WHERE wamid = $1 FOR UPDATE", [wamids[0]]);

      await h.queues.reply.resume();
      // The reply job has read "3 chairs" and now waits for the row at its bind.
      await eventually(async () => {
        const { rows } = await watcher.query<{ waiting: number }>(
          "SELECT count(*)::int AS waiting FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%answerable%'",
        );
        return rows[0]!.waiting > 0;
      }, "the reply job to wait at its bind");
      await editor.query("UPDATE inbound_messages SET text = 'I need 4 chairs' WHERE wamid = $1 AND reply_id IS NULL", [wamids[0]]);
      await editor.query("COMMIT");
    } finally {
      await Promise.all([editor.end(), watcher.end()]);
    }

    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the answer");
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain("I need 4 chairs");
    expect(h.claude.userText(0)).not.toContain("3 chairs");
  });
});
