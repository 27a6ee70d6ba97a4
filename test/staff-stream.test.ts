import type { FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { type EventStream, openStream } from "./support/event-stream.ts";
import { anotherWeb, eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";

/**
 * The staff stream belongs to a session (issue 32.11): `GET /admin/events` over real sockets. A
 * session holds three streams at most, the oldest ended first; its streams end at once when it
 * signs out here, and within the check period when it ends anywhere else (another web process,
 * expiry, a disabled person), which only Postgres knows.
 */

const PASSWORD = "correct horse battery staple";
const BEARER = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
/** The second web process reads its streams' sessions this often; the first keeps the default (15 s). */
const CHECK_MS = 200;

interface Session {
  cookie: string;
  csrfToken: string;
}

describe("a staff stream belongs to its session", () => {
  let h: Harness;
  /** This web process: signing out here ends the session's streams here. */
  let base: string;
  /** Another web process behind the same balancer: it learns of a session's end only from Postgres. */
  let other: FastifyInstance;
  let otherBase: string;
  let people = 0;
  const opened: EventStream[] = [];

  async function signIn(app: FastifyInstance = h.app): Promise<Session & { email: string }> {
    const email = `person${++people}@example.com`;
    await addStaff(h.db, email, PASSWORD);
    const response = await app.inject({ method: "POST", url: "/admin/session", payload: { email, password: PASSWORD } });
    expect(response.statusCode).toBe(200);
    return { email, cookie: String(response.headers["set-cookie"]).split(";")[0]!, csrfToken: response.json<{ csrfToken: string }>().csrfToken };
  }

  async function open(at: string, headers: Record<string, string>): Promise<EventStream> {
    const stream = await openStream(at, headers);
    opened.push(stream);
    expect(stream.status).toBe(200);
    expect((await stream.next()).event).toBe("ready");
    return stream;
  }

  /** Opens `count` streams one after the other, so their order is the order they opened. */
  async function openTabs(count: number, at: string, headers: Record<string, string>): Promise<EventStream[]> {
    const tabs: EventStream[] = [];
    for (let i = 0; i < count; i++) tabs.push(await open(at, headers));
    return tabs;
  }

  async function endedBecause(stream: EventStream, reason: string, withinMs: number): Promise<void> {
    const end = await stream.next(withinMs);
    expect(end.event).toBe("end");
    expect(JSON.parse(end.data)).toEqual({ reason });
    await eventually(() => stream.ended(), "the stream to end", withinMs);
  }

  const signOut = (app: FastifyInstance, session: Session) =>
    app.inject({ method: "DELETE", url: "/admin/session", headers: { cookie: session.cookie, "x-csrf-token": session.csrfToken } });

  beforeAll(async () => {
    h = await startHarness({ env: { ADMIN_SECURE_COOKIES: "false" } });
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
    other = anotherWeb(h, { liveQueue: { sessionCheckMs: CHECK_MS } });
    otherBase = await other.listen({ port: 0, host: "127.0.0.1" });
  }, 30_000);

  afterAll(async () => {
    for (const stream of opened) stream.close();
    await other?.close();
    await h?.close();
  });

  it("a session holds three streams at most: a fourth ends the oldest, which is told it was replaced; other sessions' streams stay", async () => {
    const sam = await signIn();
    const someoneElse = await signIn();
    const theirs = await open(base, { cookie: someoneElse.cookie });
    const [first, second, third] = (await openTabs(3, base, { cookie: sam.cookie })) as [EventStream, EventStream, EventStream];
    expect(first.ended()).toBe(false);

    const fourth = await open(base, { cookie: sam.cookie });
    await endedBecause(first, "replaced", 5000);
    for (const stream of [second, third, fourth, theirs]) expect(stream.ended()).toBe(false);

    const fifth = await open(base, { cookie: sam.cookie });
    await endedBecause(second, "replaced", 5000);
    for (const stream of [third, fourth, fifth, theirs]) expect(stream.ended()).toBe(false);
  }, 30_000);

  it("the ADMIN_TOKEN bearer is one bucket of three too", async () => {
    const streams = await openTabs(3, base, BEARER);
    await open(base, BEARER);
    await endedBecause(streams[0]!, "replaced", 5000);
    expect(streams[1]!.ended()).toBe(false);
  }, 30_000);

  it("signing out ends the session's open streams at once, not at the next check, and leaves other sessions' alone", async () => {
    const sam = await signIn();
    const someoneElse = await signIn();
    const samsTabs = await openTabs(2, base, { cookie: sam.cookie });
    const theirs = await open(base, { cookie: someoneElse.cookie });

    expect((await signOut(h.app, sam)).statusCode).toBe(200);
    // This process checks sessions every 15 s: two seconds is "at once".
    for (const tab of samsTabs) await endedBecause(tab, "session_ended", 2000);
    expect(theirs.ended()).toBe(false);
    expect((await openStream(base, { cookie: sam.cookie })).status).toBe(401);
  }, 30_000);

  it("a session signed out through another web process ends its streams here within the check period", async () => {
    const sam = await signIn();
    const stream = await open(otherBase, { cookie: sam.cookie });
    const bearer = await open(otherBase, BEARER);
    expect((await signOut(h.app, sam)).statusCode).toBe(200); // the first process knows nothing of this stream
    await endedBecause(stream, "session_ended", 5000);
    await new Promise((resolve) => setTimeout(resolve, CHECK_MS * 3));
    expect(bearer.ended()).toBe(false); // the bearer has no session to end
  }, 30_000);

  it("a session that expired, or was deleted in Postgres directly, ends its streams within the check period", async () => {
    const expiring = await signIn();
    const deleted = await signIn();
    const staying = await signIn();
    const [expiringStream, deletedStream, stayingStream] = [
      await open(otherBase, { cookie: expiring.cookie }),
      await open(otherBase, { cookie: deleted.cookie }),
      await open(otherBase, { cookie: staying.cookie }),
    ];

    await h.db.staffSession.updateMany({ where: { staff: { email: expiring.email } }, data: { expiresAt: new Date(Date.now() - 1000) } });
    await h.db.staffSession.deleteMany({ where: { staff: { email: deleted.email } } });
    await endedBecause(expiringStream, "session_ended", 5000);
    await endedBecause(deletedStream, "session_ended", 5000);
    expect(stayingStream.ended()).toBe(false);
  }, 30_000);

  it("a disabled person's streams end within the check period, as their requests are refused, even with the session row still there", async () => {
    const sam = await signIn();
    const stream = await open(otherBase, { cookie: sam.cookie });
    await h.db.staffMember.update({ where: { email: sam.email }, data: { disabledAt: new Date() } });
    await endedBecause(stream, "session_ended", 5000);
  }, 30_000);
});
