import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.ts";
import { saysAndIsAnswered } from "./support/customer.ts";
import { everyKey, everyRow } from "./support/every-row.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { PrivatePostgres } from "./support/private-postgres.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 35.3: with RETENTION=20s and a sweep every second, what customers wrote and were told is
 * emptied once older than that, in Postgres and in the jobs Redis keeps, the rows, counts and
 * costs kept; a conversation with an open item keeps its words until the item is closed. A
 * sweep that meets no database waits for the next period.
 */

const bearer = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const EVA = { phone: "447700900555", name: "Eva Stone" };
const FIN = { phone: "447700900666", name: "Fin Gray" };
const GIA = { phone: "447700900777", name: "Gia Moss" };

let h: Harness;
beforeAll(async () => {
  h = await startHarness({
    env: { RETENTION: "20s", RETENTION_SWEEP_SECONDS: "1", REPLY_DEBOUNCE_MS: "0", JOB_ATTEMPTS: "1", HANDOFF_REPLY: "A person will answer." },
  });
  h.startWorkers();
});
afterAll(async () => h?.close());

const say = (who: { phone: string; name: string }, text: string) => saysAndIsAnswered(h, who, text);

describe("RETENTION", () => {
  it("empties the words older than it, rows, counts and costs kept; an open item's conversation waits for it to close", async () => {
    // Eva: answered, then a reply Meta refuses, discarded with a note. Fin: handed to a person, still open.
    h.claude.answer({ text: "Yes, we ship to Porto." });
    await say(EVA, "Do you ship to Porto?");
    h.claude.answer({ text: "Your parcel leaves today." });
    h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
    await say(EVA, "When does my parcel leave?");
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: EVA.phone } } } }), "Eva's item");
    await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${letter.id}/discard`,
      headers: { ...bearer, "idempotency-key": randomUUID() },
      payload: { note: "told Eva by phone" },
    });
    await say(FIN, "human");
    // To a bot paused for a person: stored, for staff, not answered.
    const { body, wamids } = textWebhook({ text: "My order never came", from: FIN.phone, name: FIN.name });
    expect((await h.deliver(body)).statusCode).toBe(200);
    await eventually(() => h.db.inboundMessage.findUnique({ where: { wamid: wamids[0] } }), "Fin's words stored");
    await untilQuiet(h);
    const evasWords = ["Do you ship to Porto?", "Yes, we ship to Porto.", "When does my parcel leave?", "Your parcel leaves today.", "told Eva by phone"];
    const finsWords = ["My order never came"];
    const insights = async () => (await h.app.inject({ method: "GET", url: "/admin/insights", headers: bearer })).json().total;
    const before = await insights();
    const rows = await everyRow(h);
    for (const word of [...evasWords, ...finsWords]) expect(rows, word).toContain(word);

    await sleep(23_000);
    await eventually(async () => !(await everyRow(h)).includes("Do you ship to Porto?"), "the sweep", 10_000);
    const after = await everyRow(h);
    for (const word of evasWords) expect(after, `a row still holds "${word}"`).not.toContain(word);
    for (const word of finsWords) expect(after, `Fin's open item lost "${word}"`).toContain(word);
    const keys = await everyKey(h);
    for (const word of evasWords) expect(keys, `a key still holds "${word}"`).not.toContain(word);
    expect(await insights()).toEqual(before);
    expect(await h.db.inboundMessage.count({ where: { conversation: { contact: { waId: EVA.phone } } } })).toBe(2);
    const swept = (await h.metrics.registry.getSingleMetricAsString("wa_retention_erased_total")).split("\n");
    expect(swept).toContainEqual(expect.stringMatching(/^wa_retention_erased_total\{kind="messages"\} [1-9]/));
  }, 60_000);
});

describe("RETENTION while Postgres is away", () => {
  it("a sweep that finds no database is logged and tried again next period; once Postgres returns, the words older than RETENTION go", async () => {
    const pg = await PrivatePostgres.start();
    const logs = logLines();
    const away = await startHarness({
      databaseUrl: pg.url,
      logger: createLogger({ level: "info", destination: logs.destination }),
      env: { RETENTION: "5s", RETENTION_SWEEP_SECONDS: "1", REPLY_DEBOUNCE_MS: "0" },
    });
    const failedSweeps = () => logs.parsed().filter((line) => line.event === "retention.sweep_failed").length;
    try {
      away.claude.answer({ text: "We open at nine." });
      await saysAndIsAnswered(away, GIA, "When do you open?");
      await pg.crash(); // before the words are 5 s old: no sweep has taken them yet
      await eventually(() => failedSweeps() >= 2, "two sweeps to fail while Postgres is away", 15_000);

      await pg.resume();
      // A sweep empties one kind of row after another: waited for whole, not for its first statement.
      const words = ["When do you open?", "We open at nine."];
      await eventually(
        async () => {
          const rows = await everyRow(away);
          return words.every((word) => !rows.includes(word));
        },
        "the first sweep after Postgres returns",
        15_000,
      );
      const rows = await everyRow(away);
      for (const word of words) expect(rows, `a row still holds "${word}"`).not.toContain(word);
      expect(await away.db.inboundMessage.count()).toBe(1); // the row kept, its words gone
    } finally {
      await pg.resume().catch(() => undefined);
      await away.close();
      await pg.destroy();
    }
  }, 60_000);
});
