import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff, setStaffRole } from "../src/staff/accounts.ts";
import { type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";

/**
 * Issue 4: BullMQ's queues at /admin/queues, behind the same sign-in, with security headers.
 * Issue 7 (10.5): for operators only, and read-only.
 */

const PASSWORD = "correct horse battery staple";

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ workers: 0 });
  await addStaff(h.db, "ops@example.com", PASSWORD, "operator");
  await addStaff(h.db, "ana@example.com", PASSWORD);
});
afterAll(async () => h?.close());

async function sessionCookie(email: string): Promise<string> {
  const signIn = await h.app.inject({ method: "POST", url: "/admin/session", payload: { email, password: PASSWORD } });
  expect(signIn.statusCode).toBe(200);
  return String(signIn.headers["set-cookie"]).split(";")[0]!;
}

/** The board's page, one of its assets, and its API. */
const BOARD_URLS = ["/admin/queues", "/admin/queues/static/images/logo.svg", "/admin/queues/api/queues"];

describe("/admin/queues (bull-board)", () => {
  it("refuses the unauthenticated, its page and its API alike", async () => {
    for (const url of BOARD_URLS) {
      expect((await h.app.inject({ method: "GET", url })).statusCode).toBe(401);
    }
  });

  it("shows every queue to a signed-in operator", async () => {
    const cookie = await sessionCookie("ops@example.com");
    for (const url of BOARD_URLS) expect((await h.app.inject({ method: "GET", url, headers: { cookie } })).statusCode, url).toBe(200);
    const page = await h.app.inject({ method: "GET", url: "/admin/queues", headers: { cookie } });
    expect(page.headers["content-type"]).toMatch(/^text\/html/);
    const api = await h.app.inject({ method: "GET", url: "/admin/queues/api/queues", headers: { cookie } });
    expect(api.statusCode).toBe(200);
    expect((api.json().queues as { name: string }[]).map((q) => q.name).sort()).toEqual([
      "csat",
      "events",
      "inbound",
      "notify",
      "reconcile",
      "reply",
      "status",
    ]);
  });

  it("refuses staff who are not operators (job payloads carry message text and phone numbers), page, assets and API", async () => {
    const cookie = await sessionCookie("ana@example.com");
    for (const url of BOARD_URLS) {
      const res = await h.app.inject({ method: "GET", url, headers: { cookie } });
      expect(res.statusCode, url).toBe(403);
      expect(res.body).not.toContain("inbound");
    }
    const session = await h.app.inject({ method: "GET", url: "/admin/session", headers: { cookie } });
    const change = await h.app.inject({
      method: "PUT",
      url: "/admin/queues/api/queues/reply/pause",
      headers: { cookie, "x-csrf-token": session.json().csrfToken as string },
    });
    expect(change.statusCode).toBe(403);
    expect((await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { cookie } })).statusCode).toBe(200); // their own work is still theirs
  });

  it("a role change applies to sessions already open", async () => {
    await addStaff(h.db, "ivo@example.com", PASSWORD, "operator");
    const cookie = await sessionCookie("ivo@example.com");
    const queues = () => h.app.inject({ method: "GET", url: "/admin/queues/api/queues", headers: { cookie } });
    expect((await queues()).statusCode).toBe(200);
    expect(await setStaffRole(h.db, "ivo@example.com", "staff")).toBe(true);
    expect((await queues()).statusCode).toBe(403);
  });

  it("stays open to the ADMIN_TOKEN bearer", async () => {
    const api = await h.app.inject({ method: "GET", url: "/admin/queues/api/queues", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(api.statusCode).toBe(200);
  });

  it("is read-only: no retry, clean, promote or remove, in the page or through its API", async () => {
    const authorization = `Bearer ${TEST_ADMIN_TOKEN}`;
    const api = await h.app.inject({ method: "GET", url: "/admin/queues/api/queues", headers: { authorization } });
    const queues = api.json().queues as { name: string; readOnlyMode: boolean }[];
    expect(queues.map((q) => [q.name, q.readOnlyMode]).sort()).toEqual([
      ["csat", true],
      ["events", true],
      ["inbound", true],
      ["notify", true],
      ["reconcile", true],
      ["reply", true],
      ["status", true],
    ]);
    for (const url of [
      "/admin/queues/api/queues/reply/clean/completed",
      "/admin/queues/api/queues/reply/retry/failed",
      "/admin/queues/api/queues/reply/pause",
    ]) {
      expect((await h.app.inject({ method: "PUT", url, headers: { authorization } })).statusCode, url).toBe(405);
    }
    expect(await h.queues.reply.isPaused()).toBe(false);
  });
});

describe("security headers", () => {
  it("every /admin answer carries them", async () => {
    const res = await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(res.headers["content-security-policy"]).toMatch(/default-src 'self'/);
    expect(res.headers["x-frame-options"]).toBe("SAMEORIGIN");
    expect(res.headers["x-content-type-options"]).toBe("nosniff");
    expect(res.headers["strict-transport-security"]).toMatch(/max-age=/);
  });

  it("Meta's webhook answers are left alone (the route answers Meta, not a browser)", async () => {
    const res = await h.app.inject({ method: "GET", url: "/webhook?hub.mode=subscribe&hub.verify_token=x&hub.challenge=1" });
    expect(res.headers["content-security-policy"]).toBeUndefined();
  });
});

describe("the staff page", () => {
  it("is served at /admin without data in it, with its script and styles from the same origin (CSP-safe)", async () => {
    const page = await h.app.inject({ method: "GET", url: "/admin" });
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toMatch(/^text\/html/);
    expect(page.body).toContain('<script type="module" src="/admin/assets/app.js"></script>');
    expect(page.body).not.toMatch(/<script>(?!<)/); // no inline script: the CSP forbids it
    expect(page.body).not.toMatch(/\s(style|on[a-z]+)=/); // nor inline styles or handlers
    const modules = [
      ...["app.js", "api.js", "dom.js", "chat.js", "queue.js", "detail.js", "templates.js", "presence.js"],
      ...["costs.js", "conversations.js", "insights.js", "charts.js", "try.js", "customers.js", "live.js", "uPlot.esm.js"],
    ];
    for (const [file, type] of [...modules.map((m) => [m, /javascript/] as const), ["style.css", /css/] as const, ["uPlot.min.css", /css/] as const]) {
      const asset = await h.app.inject({ method: "GET", url: `/admin/assets/${file}` });
      expect(asset.statusCode).toBe(200);
      expect(asset.headers["content-type"]).toMatch(type);
    }
    // Each module imports only what is served beside it.
    for (const file of modules) {
      const source = (await h.app.inject({ method: "GET", url: `/admin/assets/${file}` })).body;
      for (const [, imported] of source.matchAll(/from "\.\/([\w-]+\.js)"/g)) expect(modules, `${file} imports ${imported}`).toContain(imported);
    }
    for (const missing of ["secrets.env", "constructor", "__proto__"])
      expect((await h.app.inject({ method: "GET", url: `/admin/assets/${missing}` })).statusCode, missing).toBe(404);
  });
});
