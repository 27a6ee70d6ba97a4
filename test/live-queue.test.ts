import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { openStream } from "./support/event-stream.ts";
import { anotherWeb, eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * The live queue (issue 21.3): `GET /admin/events` over a real socket, as a browser's
 * EventSource reads it. A new dead letter is told within seconds; a page that reconnects with
 * `Last-Event-ID` hears at once what it missed; closing the app is not held by open streams.
 */

const AUTH = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const PASSWORD = "correct horse battery staple";

describe("the live queue: GET /admin/events", () => {
  let h: Harness;
  let base: string;
  let phone = 0;

  /** A customer writes and Claude refuses (400): a new dead letter. */
  async function newDeadLetter(): Promise<string> {
    const from = `1650777${(1000 + ++phone).toString()}`;
    h.claude.answer({ status: 400 });
    expect((await h.deliver(textWebhook({ from, text: "Hello?" }).body)).statusCode).toBe(200);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: from } } } }), "the dead letter", 20_000);
    return letter.id;
  }

  beforeAll(async () => {
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false" } });
    await addStaff(h.db, "sam@example.com", PASSWORD);
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
  }, 30_000);

  afterAll(async () => {
    await h?.close();
  });

  it("needs the bearer or a session", async () => {
    const stream = await openStream(base, {});
    expect(stream.status).toBe(401);
    stream.close();
  });

  it("a new dead letter reaches an open stream within seconds, as a change with a new cursor", async () => {
    const stream = await openStream(base, AUTH);
    expect(stream.status).toBe(200);
    expect(stream.contentType).toMatch(/^text\/event-stream/);
    const ready = await stream.next();
    expect(ready).toMatchObject({ event: "ready" });
    expect(JSON.parse(ready.data)).toEqual({ cursor: ready.id });

    await newDeadLetter();
    const change = await stream.next();
    expect(change.event).toBe("change");
    expect(change.id).not.toBe(ready.id);
    stream.close();
  }, 30_000);

  it("a page that reconnects with Last-Event-ID hears at once what changed while it was away, and nothing when nothing did", async () => {
    const first = await openStream(base, AUTH);
    const { id: heard } = await first.next();
    first.close();

    const id = await newDeadLetter();
    await h.app.inject({ method: "POST", url: `/admin/dlq/${id}/discard`, headers: AUTH, payload: { note: "seen" } });

    const started = Date.now();
    const again = await openStream(base, { ...AUTH, "last-event-id": heard });
    const caughtUp = await again.next();
    expect(caughtUp.event).toBe("change");
    expect(Date.now() - started).toBeLessThan(2000); // at once, not at the next poll's change
    again.close();

    const current = await openStream(base, { ...AUTH, "last-event-id": caughtUp.id });
    expect(await current.next()).toMatchObject({ event: "ready", id: caughtUp.id });
    current.close();
  }, 40_000);

  it("behind a load balancer: a change is told by every web process, and a page that reconnects to another one is caught up there", async () => {
    // A second web process: the same database and Redis, nothing else shared.
    const other = anotherWeb(h);
    const otherBase = await other.listen({ port: 0, host: "127.0.0.1" });
    try {
      const here = await openStream(base, AUTH);
      const there = await openStream(otherBase, AUTH);
      const [{ id: heardHere }, { id: heardThere }] = await Promise.all([here.next(), there.next()]);
      expect(heardThere).toBe(heardHere); // one cursor, read from Postgres, whichever process answers
      await newDeadLetter(); // written by a worker, which knows nothing of either
      const [changeHere, changeThere] = await Promise.all([here.next(), there.next()]);
      expect(changeHere.event).toBe("change");
      expect(changeThere.event).toBe("change");
      here.close();

      await newDeadLetter(); // while the page is away
      const moved = await openStream(otherBase, { ...AUTH, "last-event-id": heardHere });
      expect((await moved.next()).event).toBe("change");
      moved.close();
      there.close();
    } finally {
      await other.close();
    }
  }, 40_000);

  it("a person's session cookie opens it, as the page's EventSource does", async () => {
    const signIn = await h.app.inject({ method: "POST", url: "/admin/session", payload: { email: "sam@example.com", password: PASSWORD } });
    const cookie = String(signIn.headers["set-cookie"]).split(";")[0]!;
    const stream = await openStream(base, { cookie });
    expect(stream.status).toBe(200);
    expect((await stream.next()).event).toBe("ready");
    stream.close();
  });

  it("closing the app ends open streams instead of waiting for them", async () => {
    const stream = await openStream(base, AUTH);
    await stream.next();
    const started = Date.now();
    await h.app.close();
    expect(Date.now() - started).toBeLessThan(5000);
    await eventually(() => stream.ended(), "the stream to end");
  }, 20_000);
});
