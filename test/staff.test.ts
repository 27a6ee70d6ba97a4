import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { STAFF_JS } from "./support/build.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 4: staff sign in as themselves; every action is theirs. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => h?.close());

const PASSWORD = "correct horse battery staple";

/** The CLI as operators run it, in its own process (asynchronously: the system under test shares this event loop). */
function staffCli(args: string[], input = ""): Promise<{ status: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [STAFF_JS, ...args], {
      env: { PATH: process.env.PATH ?? "", DATABASE_URL: h.config.databaseUrl },
    });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.once("close", (status) => resolve({ status, out }));
    child.stdin.end(input);
  });
}

async function signIn(email: string, password = PASSWORD) {
  return h.app.inject({ method: "POST", url: "/admin/session", payload: { email, password } });
}

async function session(email: string): Promise<{ cookie: string; csrf: string }> {
  const res = await signIn(email);
  expect(res.statusCode).toBe(200);
  const cookie = String(res.headers["set-cookie"]).split(";")[0]!;
  return { cookie, csrf: res.json().csrfToken as string };
}

async function deadLetter(from: string): Promise<string> {
  h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
  await h.deliver(textWebhook({ text: "hello", from }).body);
  return (await eventually(() => h.db.deadLetter.findFirst({ where: { conversation: { contact: { waId: from } } } }), "a dead letter")).id;
}

describe("npm run staff", () => {
  it("adds an account with an argon2id hash (never the password), lists it, and disables it", async () => {
    expect(await staffCli(["add", "Ana@Example.com"], `${PASSWORD}\n`)).toMatchObject({ status: 0, out: "added ana@example.com\n" });
    expect((await staffCli(["list"])).out).toMatch(/^ana@example\.com\tactive\t/);
    expect(await staffCli(["add", "ana@example.com"], `${PASSWORD}\n`)).toMatchObject({ status: 1, out: "ana@example.com already has an account\n" });
    expect(await staffCli(["add", "bo@example.com"], "short\n")).toMatchObject({ status: 1, out: "the password must be at least 12 characters\n" });
    expect((await staffCli(["add", "not-an-email"], `${PASSWORD}\n`)).status).toBe(1);
    expect(await staffCli(["disable", "ana@example.com"])).toMatchObject({ status: 0 });
    expect((await staffCli(["list"])).out).toMatch(/^ana@example\.com\tdisabled /);
    expect((await staffCli(["frobnicate"])).status).toBe(2);
  });

  it("adds operators, changes a role, and lists each account's role", async () => {
    expect(await staffCli(["add", "olga@example.com", "--operator"], `${PASSWORD}\n`)).toMatchObject({ status: 0, out: "added olga@example.com (operator)\n" });
    expect((await staffCli(["list"])).out).toMatch(/^olga@example\.com\tactive\toperator\tsince /m);
    expect(await staffCli(["role", "Olga@example.com", "staff"])).toMatchObject({ status: 0, out: "olga@example.com is now staff\n" });
    expect((await staffCli(["list"])).out).toMatch(/^olga@example\.com\tactive\tstaff\tsince /m);
    expect(await staffCli(["role", "olga@example.com", "operator"])).toMatchObject({ status: 0, out: "olga@example.com is now operator\n" });
    expect(await staffCli(["role", "olga@example.com", "admin"])).toMatchObject({ status: 1, out: '"admin" is not a role: use staff or operator\n' });
    expect(await staffCli(["role", "nobody@example.com", "operator"])).toMatchObject({ status: 1, out: "no account for nobody@example.com\n" });
    expect((await staffCli(["role", "olga@example.com"])).status).toBe(2);
    expect((await h.db.staffMember.findUniqueOrThrow({ where: { email: "olga@example.com" } })).role).toBe("operator");
    expect((await h.db.staffMember.findUniqueOrThrow({ where: { email: "ana@example.com" } })).role).toBe("staff"); // the default
  }, 90_000); // eight processes, each starting the CLI: seconds apiece on a loaded machine

  it("stores only a hash", async () => {
    const member = await h.db.staffMember.findUniqueOrThrow({ where: { email: "ana@example.com" } });
    expect(member.passwordHash).toMatch(/^\$argon2id\$/);
    expect(member.passwordHash).not.toContain(PASSWORD);
  });
});

describe("signing in", () => {
  beforeAll(async () => {
    await addStaff(h.db, "cleo@example.com", PASSWORD);
  });

  it("a right password gets a secure, httpOnly, SameSite=Strict session cookie and a CSRF token", async () => {
    const res = await signIn("cleo@example.com");
    expect(res.statusCode).toBe(200);
    expect(String(res.headers["set-cookie"])).toMatch(/^wa_staff=[\w-]{40,}; Path=\/admin; HttpOnly; SameSite=Strict; Max-Age=43200; Secure$/);
    expect(res.json()).toMatchObject({ email: "cleo@example.com", csrfToken: expect.stringMatching(/^[\w-]{40,}$/) });
  });

  it("a wrong password, an unknown email or a disabled account is refused alike", async () => {
    await addStaff(h.db, "gone@example.com", PASSWORD);
    await staffCli(["disable", "gone@example.com"]);
    for (const [email, password] of [
      ["cleo@example.com", "wrong password!!"],
      ["nobody@example.com", PASSWORD],
      ["gone@example.com", PASSWORD],
    ]) {
      const res = await signIn(email!, password);
      expect(res.statusCode).toBe(401);
      expect(res.json()).toEqual({ error: "wrong email or password" });
    }
  });

  it("sign-in attempts are rate limited", async () => {
    await addStaff(h.db, "dora@example.com", PASSWORD);
    const codes: number[] = [];
    for (let i = 0; i < 6; i++) codes.push((await signIn("dora@example.com", "not the password")).statusCode);
    expect(codes).toEqual([401, 401, 401, 401, 401, 429]);
    expect((await signIn("dora@example.com")).statusCode).toBe(429); // even the right password, until the window passes
  });

  it("actions are attributed to the person, audited, and need the CSRF token", async () => {
    const { cookie, csrf } = await session("cleo@example.com");
    const id = await deadLetter("4477000000001");
    const list = await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie } });
    expect(list.statusCode).toBe(200);

    const forged = await h.app.inject({ method: "POST", url: `/admin/dlq/${id}/discard`, headers: { cookie } });
    expect(forged.statusCode).toBe(403);
    const wrong = await h.app.inject({ method: "POST", url: `/admin/dlq/${id}/discard`, headers: { cookie, "x-csrf-token": "x".repeat(43) } });
    expect(wrong.statusCode).toBe(403);
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id } })).state).toBe("open");

    const done = await h.app.inject({
      method: "POST",
      url: `/admin/dlq/${id}/discard`,
      headers: { cookie, "x-csrf-token": csrf },
      payload: { note: "phoned" },
    });
    expect(done.statusCode).toBe(200);
    expect(await h.db.deadLetter.findUniqueOrThrow({ where: { id } })).toMatchObject({ state: "discarded", actedBy: "cleo@example.com" });
    expect(await h.db.deadLetterAction.findFirstOrThrow({ where: { deadLetterId: id } })).toMatchObject({ actor: "cleo@example.com", action: "discard" });
  });

  it("signing out ends the session", async () => {
    const { cookie, csrf } = await session("cleo@example.com");
    expect((await h.app.inject({ method: "GET", url: "/admin/session", headers: { cookie } })).json()).toEqual({
      email: "cleo@example.com",
      csrfToken: csrf,
      operator: false,
    });
    const out = await h.app.inject({ method: "DELETE", url: "/admin/session", headers: { cookie, "x-csrf-token": csrf } });
    expect(out.statusCode).toBe(200);
    expect(String(out.headers["set-cookie"])).toMatch(/^wa_staff=; .*Max-Age=0/);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie } })).statusCode).toBe(401);
  });

  it("sessions past their expiry, anyone's, are gone after the next sign-in; live ones stay and still work", async () => {
    await addStaff(h.db, "finn@example.com", PASSWORD);
    await addStaff(h.db, "gail@example.com", PASSWORD);
    const finnOld = await session("finn@example.com");
    const gailOld = await session("gail@example.com");
    const gailLive = await session("gail@example.com");
    // Twelve hours on, for two of them: their expiry passes. Only the token's hash is stored.
    const rowOf = (cookie: string) => ({ tokenHash: createHash("sha256").update(cookie.slice("wa_staff=".length)).digest("hex") });
    const { count } = await h.db.staffSession.updateMany({
      where: { OR: [rowOf(finnOld.cookie), rowOf(gailOld.cookie)] },
      data: { expiresAt: new Date(Date.now() - 1000) },
    });
    expect(count).toBe(2);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie: finnOld.cookie } })).statusCode).toBe(401);
    expect(await h.db.staffSession.count({ where: { expiresAt: { lte: new Date() } } })).toBe(2);

    await session("cleo@example.com");
    expect(await h.db.staffSession.count({ where: { expiresAt: { lte: new Date() } } })).toBe(0);
    expect(await h.db.staffSession.findUnique({ where: rowOf(gailLive.cookie) })).not.toBeNull();
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie: gailLive.cookie } })).statusCode).toBe(200);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie: gailOld.cookie } })).statusCode).toBe(401);
  });

  it("disabling an account ends its open sessions", async () => {
    await addStaff(h.db, "eve@example.com", PASSWORD);
    const { cookie } = await session("eve@example.com");
    await staffCli(["disable", "eve@example.com"]);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie } })).statusCode).toBe(401);
  });
});

describe("every /admin route refuses the unauthenticated", () => {
  const id = "00000000-0000-4000-8000-000000000000";
  it.each([
    ["GET", "/admin/dlq"],
    ["GET", `/admin/dlq/${id}`],
    ["POST", `/admin/dlq/${id}/retry`],
    ["POST", `/admin/dlq/${id}/discard`],
    ["POST", `/admin/dlq/${id}/regenerate`],
    ["POST", "/admin/dlq/bulk-retry"],
    ["POST", `/admin/conversations/${id}/pause`],
    ["POST", `/admin/conversations/${id}/resume`],
    ["GET", "/admin/session"],
    ["DELETE", "/admin/session"],
  ] as const)("%s %s", async (method, url) => {
    for (const headers of [{}, { cookie: "wa_staff=forged-session-token" }, { authorization: "Bearer wrong-token-0123456789" }]) {
      expect((await h.app.inject({ method, url, headers })).statusCode).toBe(401);
    }
  });
});
