import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addStaff } from "../src/staff/accounts.ts";
import { type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";

/** Issue 4: BullMQ's queues for operators at /admin/queues, behind the same sign-in, with security headers. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ workers: 0 });
  await addStaff(h.db, "ops@example.com", "correct horse battery staple");
});
afterAll(async () => h?.close());

describe("/admin/queues (bull-board)", () => {
  it("refuses the unauthenticated, its page and its API alike", async () => {
    for (const url of ["/admin/queues", "/admin/queues/api/queues"]) {
      expect((await h.app.inject({ method: "GET", url })).statusCode).toBe(401);
    }
  });

  it("shows the inbound, reply and status queues to a signed-in person", async () => {
    const signIn = await h.app.inject({ method: "POST", url: "/admin/session", payload: { email: "ops@example.com", password: "correct horse battery staple" } });
    const cookie = String(signIn.headers["set-cookie"]).split(";")[0]!;
    const page = await h.app.inject({ method: "GET", url: "/admin/queues", headers: { cookie } });
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toMatch(/^text\/html/);
    const api = await h.app.inject({ method: "GET", url: "/admin/queues/api/queues", headers: { cookie } });
    expect(api.statusCode).toBe(200);
    expect((api.json().queues as { name: string }[]).map((q) => q.name).sort()).toEqual(["inbound", "reconcile", "reply", "status"]);
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
    expect(page.body).toContain('<script defer src="/admin/assets/app.js"></script>');
    expect(page.body).not.toMatch(/<script>(?!<)/); // no inline script: the CSP forbids it
    for (const [file, type] of [["app.js", /javascript/], ["style.css", /css/]] as const) {
      const asset = await h.app.inject({ method: "GET", url: `/admin/assets/${file}` });
      expect(asset.statusCode).toBe(200);
      expect(asset.headers["content-type"]).toMatch(type);
    }
    expect((await h.app.inject({ method: "GET", url: "/admin/assets/secrets.env" })).statusCode).toBe(404);
  });
});
