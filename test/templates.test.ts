import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN } from "./support/harness.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Issue 21.1: staff resolve an item with one of the business account's approved templates, sent once. */

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ env: { JOB_ATTEMPTS: "1", WHATSAPP_BUSINESS_ACCOUNT_ID: "102290129340398" } });
});
afterAll(async () => h?.close());

const auth = { authorization: `Bearer ${TEST_ADMIN_TOKEN}` };
const get = (url: string) => h.app.inject({ method: "GET", url, headers: auth });
/** Without a key of the test's own, a fresh one, as the page sends: sending a template requires one. */
const post = (url: string, payload: Record<string, unknown>, key: string = randomUUID()) =>
  h.app.inject({ method: "POST", url, headers: { ...auth, "idempotency-key": key }, payload });

/** Nothing of this customer's is waiting to go out (the holding reply included): the next scripted answer is the template's. */
const settled = (from: string) =>
  eventually(
    async () => (await h.db.reply.count({ where: { state: { in: ["generating", "ready"] }, conversation: { contact: { waId: from } } } })) === 0,
    `${from}'s sends to settle`,
  );

/** Meta refuses the reply: the 24-hour window has closed. */
async function closedWindowItem(from: string): Promise<string> {
  h.graph.answerSends({ status: 400, body: graphError(131047, "Re-engagement message") });
  await h.deliver(textWebhook({ text: "is my order coming?", from, name: "Ada" }).body);
  const letter = await eventually(
    () => h.db.deadLetter.findFirst({ where: { state: "open", conversation: { contact: { waId: from } } } }),
    `a dead letter for ${from}`,
  );
  await settled(from);
  return letter.id;
}

const templateSendsTo = (to: string) => h.graph.templateSends.filter((r) => r.body.to === to);

describe("approved templates", () => {
  it("lists the account's approved templates across Meta's pages, with body, parameters and category; cached until refreshed", async () => {
    const first = await get("/admin/templates");
    expect(first.statusCode).toBe(200);
    const body = first.json();
    expect(body.configured).toBe(true);
    expect(body.templates).toEqual([
      { name: "order_update", language: "en_US", category: "UTILITY", body: "Hello {{1}}, your order {{2}} is on its way.", parameterCount: 2, price: null },
      {
        name: "we_are_here",
        language: "en_US",
        category: "UTILITY",
        body: "Hi {{1}}, we have an answer for you: reply to this message to read it.",
        parameterCount: 1,
        price: null,
      },
    ]);
    // Three templates, two a page: Meta was asked twice, once for each page.
    expect(h.graph.templateListRequests).toBe(2);
    expect(h.graph.requests.filter((r) => r.path.includes("message_templates")).every((r) => r.path.startsWith("/v24.0/102290129340398/"))).toBe(true);

    expect((await get("/admin/templates")).json().templates).toHaveLength(2);
    expect(h.graph.templateListRequests).toBe(2); // from memory

    h.graph.templates.push({
      name: "back_soon",
      language: "fr",
      category: "UTILITY",
      status: "APPROVED",
      components: [{ type: "BODY", text: "Nous revenons vers vous." }],
    });
    const refreshed = await get("/admin/templates?refresh=1");
    expect(refreshed.json().templates.map((t: { name: string }) => t.name)).toEqual(["back_soon", "order_update", "we_are_here"]);
    expect(h.graph.templateListRequests).toBe(4);
    expect((await get("/admin/templates?colour=red")).statusCode).toBe(400);
  });

  it("a closed-window item is resolved with a template sent once, with its parameters, however often the same request comes", async () => {
    const from = "4479000000101";
    const id = await closedWindowItem(from);
    // The window has truly closed by now (and the number has no windowClosedTemplate): the chosen template still goes.
    await h.db.conversation.updateMany({ where: { contact: { waId: from } }, data: { lastInboundAt: new Date(Date.now() - 25 * 3600_000) } });
    const request = { name: "order_update", language: "en_US", parameters: ["Ada", "A-1042"] };
    const [a, b] = await Promise.all([post(`/admin/dlq/${id}/template`, request, "draft-1"), post(`/admin/dlq/${id}/template`, request, "draft-1")]);
    expect([a.statusCode, b.statusCode].sort()).toEqual([202, 409]); // the second while the first runs
    const replay = await post(`/admin/dlq/${id}/template`, request, "draft-1");
    expect(replay.statusCode).toBe(202);
    expect(replay.headers["idempotent-replayed"]).toBe("true");
    // Another key (another person, another tab) finds it already resolved.
    const other = await post(`/admin/dlq/${id}/template`, request, "draft-2");
    expect(other.statusCode).toBe(409);
    expect(other.json().error).toMatch(/already resent by api/);

    await eventually(() => templateSendsTo(from).length === 1, "the template to be sent");
    await settled(from);
    const [send] = templateSendsTo(from);
    expect(send!.body.template).toEqual({
      name: "order_update",
      language: { code: "en_US" },
      components: [
        {
          type: "body",
          parameters: [
            { type: "text", text: "Ada" },
            { type: "text", text: "A-1042" },
          ],
        },
      ],
    });
    const letter = await h.db.deadLetter.findUniqueOrThrow({ where: { id }, include: { reply: { include: { parts: true } } } });
    expect(letter.state).toBe("resent");
    expect(letter.reply!.state).toBe("sent");
    expect(letter.reply!.text).toBe("Hello Ada, your order A-1042 is on its way.");
    const detail = (await get(`/admin/dlq/${id}`)).json();
    expect(detail.actions).toContainEqual(
      expect.objectContaining({
        actor: "api",
        action: "resend_template",
        detail: expect.objectContaining({ template: "order_update", parameters: ["Ada", "A-1042"] }),
      }),
    );
    await new Promise((r) => setTimeout(r, 300));
    expect(templateSendsTo(from)).toHaveLength(1);
  });

  it("refuses an unknown or unapproved template and the wrong number of parameters, in words, and sends nothing", async () => {
    const from = "4479000000102";
    const id = await closedWindowItem(from);
    const unknown = await post(`/admin/dlq/${id}/template`, { name: "no_such", language: "en_US", parameters: [] });
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json().error).toMatch(/no approved template "no_such" in language en_US/);
    const pending = await post(`/admin/dlq/${id}/template`, { name: "summer_sale", language: "en_US", parameters: ["Ada"] });
    expect(pending.statusCode).toBe(400);
    const wrongLanguage = await post(`/admin/dlq/${id}/template`, { name: "order_update", language: "fr", parameters: ["Ada", "1"] });
    expect(wrongLanguage.statusCode).toBe(400);
    const tooFew = await post(`/admin/dlq/${id}/template`, { name: "order_update", language: "en_US", parameters: ["Ada"] });
    expect(tooFew.statusCode).toBe(400);
    expect(tooFew.json().error).toBe('template "order_update" takes 2 parameters; 1 given');
    const empty = await post(`/admin/dlq/${id}/template`, { name: "we_are_here", language: "en_US", parameters: [" "] });
    expect(empty.statusCode).toBe(400);
    expect((await post(`/admin/dlq/${id}/template`, { name: "we_are_here" })).statusCode).toBe(400);
    expect(
      (await post("/admin/dlq/00000000-0000-4000-8000-000000000000/template", { name: "we_are_here", language: "en_US", parameters: ["Ada"] })).statusCode,
    ).toBe(404);
    expect(templateSendsTo(from)).toHaveLength(0);
    expect((await h.db.deadLetter.findUniqueOrThrow({ where: { id } })).state).toBe("open");
  });

  it("a template Meta refuses (132001) comes back as an item that says so in words", async () => {
    const from = "4479000000103";
    const id = await closedWindowItem(from);
    h.graph.answerSends({ status: 404, body: graphError(132001, "Template name does not exist in the translation") });
    expect((await post(`/admin/dlq/${id}/template`, { name: "we_are_here", language: "en_US", parameters: ["Ada"] }, "k-132001")).statusCode).toBe(202);
    const again = await eventually(
      () => h.db.deadLetter.findFirst({ where: { state: "open", code: "132001", conversation: { contact: { waId: from } } } }),
      "the refusal to be an item",
    );
    const detail = (await get(`/admin/dlq/${again.id}`)).json();
    expect(detail.explanation).toMatchObject({ kind: "setup", title: "The template does not exist in that language" });
    expect(detail.explanation.next).toMatch(/another approved template/);
    expect(templateSendsTo(from)).toHaveLength(1);
  });
});
