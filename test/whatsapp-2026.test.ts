import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { untilQuiet } from "./support/quiet.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 8: WhatsApp as Meta sends it in December 2026, from fixtures in Meta's wire format
 * (fixtures/messages, fixtures/webhooks): usernames and BSUIDs, the WhatsApp Business app on
 * the same number (echoes), deletions, edits, Flows, ads, and every other field a WhatsApp
 * Business Account can subscribe to. Nothing here is answered twice or left silent without a
 * logged reason.
 */

const harness = harnessPerTest();
const PHONE = "16505551234";
const BSUID = "US.13491208655302741918";
const NEW_BSUID = "US.24817305912873645029";

/** A fixture as Meta would send it now (string and integer timestamps both moved to now, or `at`). */
function fixture(path: string, replace: Record<string, string> = {}, at = Math.floor(Date.now() / 1000)): string {
  let body = readFileSync(`fixtures/${path}.json`, "utf8")
    .replaceAll('"timestamp":"1764470000"', `"timestamp":"${at}"`)
    .replaceAll('"timestamp":1764470000', `"timestamp":${at}`);
  for (const [from, to] of Object.entries(replace)) body = body.replaceAll(from, to);
  return body;
}

const sentReplies = (h: Harness) => h.db.reply.count({ where: { state: "sent" } });
const answered = (h: Harness, n: number) => eventually(async () => (await sentReplies(h)) === n, `${n} answer(s)`);
const stored = (h: Harness, wamid: string) => eventually(() => h.db.inboundMessage.findUnique({ where: { wamid } }), `${wamid} to be stored`);

describe("usernames and BSUIDs, from Meta's fixtures", () => {
  it("a username customer (no phone) is answered once, at recipient = BSUID; with a parent BSUID only, at the parent", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/username-text"));
    await answered(h, 1);
    expect(h.graph.sends[0]!.body).toMatchObject({ recipient: BSUID });
    expect(await h.db.contact.findFirstOrThrow()).toMatchObject({ waId: null, userId: BSUID, username: "@maria.g" });

    await h.deliver(fixture("messages/username-parent-text"));
    await answered(h, 2);
    expect(await h.db.contact.count()).toBe(1);
    expect((await h.db.contact.findFirstOrThrow()).parentUserId).toBe("US.ENT.11815799212886844830");
  });

  it("the BSUID changes (user_changed_user_id): the contact follows it and the conversation goes on", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/username-text"));
    await answered(h, 1);
    await h.deliver(fixture("messages/system-user-changed-user-id"));
    await eventually(async () => (await h.db.contact.findFirst())?.userId === NEW_BSUID, "the contact to take the new BSUID");
    await h.deliver(fixture("messages/username-text", { [BSUID]: NEW_BSUID, "wamid.FIXTURE.USERNAME": "wamid.FIXTURE.USERNAME2" }));
    await answered(h, 2);
    expect(await h.db.conversation.count()).toBe(1);
    expect(h.graph.sends[1]!.body).toMatchObject({ recipient: NEW_BSUID });
    expect(h.claude.userText(1)).toContain("tienen mesa para esta noche"); // the history came along
    const notice = await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: "wamid.FIXTURE.SYS_USERID" } });
    expect(notice.skipReason).toMatch(/system notice/);
  });

  it("a user_id_update webhook moves the contact to the new BSUID too", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/phone-and-bsuid-text"));
    await answered(h, 1);
    expect((await h.deliver(fixture("webhooks/user-id-update"))).statusCode).toBe(200);
    await eventually(async () => (await h.db.contact.findFirst())?.userId === NEW_BSUID, "the new BSUID");
    expect(await h.db.contact.findFirstOrThrow()).toMatchObject({ waId: PHONE });
  });

  it("statuses by recipient_user_id reconcile; a failed one without contacts (131062) dead-letters the reply with its reason", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0", GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "1000", JOB_LOCK_MS: "1000" } });
    h.graph.answerSends({ hang: true });
    await h.deliver(fixture("messages/username-text"));
    const part = await eventually(() => h.db.outboundMessage.findFirst({ where: { sendState: "sending" } }), "the maybe-sent part");
    await h.deliver(fixture("webhooks/status-bsuid-only", { "PART-ID": part.id }));
    await answered(h, 1);
    expect(h.graph.sends).toHaveLength(1);
    expect(await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } })).toMatchObject({ wamid: "wamid.OUT.BSUID1", status: "delivered" });

    await h.deliver(fixture("webhooks/status-failed-no-contacts", { "wamid.FIXTURE.FAILED_BSUID": "wamid.OUT.BSUID1" }));
    const letter = await eventually(() => h.db.deadLetter.findFirst(), "the dead letter");
    expect(letter).toMatchObject({ source: "status", code: "131062" });
    expect(letter.reason).toMatch(/username \(BSUID\)/);
  });
});

describe("the WhatsApp Business app on the same number (coexistence)", () => {
  it("an echo is never answered; it is the business's side of the conversation, and it pauses the bot until the pause runs out", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0", HUMAN_REPLY_PAUSE_MINUTES: "1" } });
    await h.deliver(textWebhook({ text: "¿Me guardan una mesa?", from: PHONE }).body);
    await answered(h, 1);
    // Written from the app 55 s ago: the one-minute pause ends in 5 s.
    expect((await h.deliver(fixture("webhooks/smb-message-echoes", {}, Math.floor(Date.now() / 1000) - 55))).statusCode).toBe(200);
    await eventually(async () => (await h.db.conversation.findFirstOrThrow()).pausedBy === "business app", "the pause");
    expect(await h.db.reply.findFirstOrThrow({ where: { kind: "human" } })).toMatchObject({
      state: "sent",
      text: expect.stringContaining("Ya le reservé la mesa"),
    });

    await h.deliver(textWebhook({ text: "¡Gracias!", from: PHONE }).body);
    const thanks = await eventually(
      async () => (await h.db.inboundMessage.findFirst({ where: { text: "¡Gracias!" } }))?.skipReason,
      "the message to be skipped",
    );
    expect(thanks).toBe("bot paused for a person");
    expect(h.graph.sends).toHaveLength(1); // the echo and the message during the pause: no answer

    await eventually(async () => (await h.db.conversation.findFirstOrThrow()).pausedUntil! < new Date(), "the pause to run out", 15_000);
    await h.deliver(textWebhook({ text: "¿A qué hora abren?", from: PHONE }).body);
    await answered(h, 3); // the human reply counts as sent: 1 bot reply, 1 human, 1 bot
    expect(h.graph.sends).toHaveLength(2);
    expect(h.claude.userText(1)).toContain("¿A qué hora abren?");
  });

  it("with HUMAN_REPLY_PAUSE_MINUTES=0 an echo pauses nothing, and Claude's history shows what the person wrote", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0", HUMAN_REPLY_PAUSE_MINUTES: "0" } });
    await h.deliver(textWebhook({ text: "¿Me guardan una mesa?", from: PHONE }).body);
    await answered(h, 1);
    await h.deliver(fixture("webhooks/smb-message-echoes"));
    await h.deliver(fixture("webhooks/smb-message-echoes")); // a redelivery is one echo
    await eventually(() => h.db.reply.findFirst({ where: { kind: "human" } }), "the echo");
    expect((await h.db.conversation.findFirstOrThrow()).pausedUntil).toBeNull();
    await h.deliver(textWebhook({ text: "¿Y para 5?", from: PHONE }).body);
    await answered(h, 3);
    expect(await h.db.reply.count({ where: { kind: "human" } })).toBe(1);
    expect(h.graph.sends).toHaveLength(2);
    expect(JSON.stringify(h.claude.requests[1]!.messages)).toContain("Ya le reserv");
  });
});

describe("deletions and edits", () => {
  const earlier = () => textWebhook({ id: "wamid.FIXTURE.EARLIER", text: "Somos 4 personas para las 20:30", from: PHONE }).body;

  it("a deleted message that was not answered yet is never seen by Claude, and its words are erased", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "1500" } });
    await h.deliver(earlier());
    await stored(h, "wamid.FIXTURE.EARLIER");
    await h.deliver(fixture("messages/revoke"));
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(0);
    expect(h.graph.sends).toHaveLength(0);
    expect(await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: "wamid.FIXTURE.EARLIER" } })).toMatchObject({
      text: null,
      skipReason: "deleted by the customer",
      deletedAt: expect.any(Date),
    });
    expect((await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: "wamid.FIXTURE.REVOKE" } })).skipReason).toBe("the customer deleted a message");
  });

  it("a deletion processed before the message it deletes still wins", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/revoke"));
    await stored(h, "wamid.FIXTURE.REVOKE");
    await h.deliver(earlier());
    await stored(h, "wamid.FIXTURE.EARLIER");
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(0);
    expect(await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: "wamid.FIXTURE.EARLIER" } })).toMatchObject({
      text: null,
      skipReason: "deleted by the customer",
    });
  });

  it("deleting an answered message erases its words and sends nothing", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(earlier());
    await answered(h, 1);
    await h.deliver(fixture("messages/revoke"));
    await eventually(async () => (await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: "wamid.FIXTURE.EARLIER" } })).deletedAt, "the erasure");
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(1);
    expect((await h.db.inboundMessage.findUniqueOrThrow({ where: { wamid: "wamid.FIXTURE.EARLIER" } })).text).toBeNull();
  });

  it("an edit before the answer: Claude sees only the edited words, and answers once", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "1500" } });
    await h.deliver(earlier());
    await stored(h, "wamid.FIXTURE.EARLIER");
    await h.deliver(fixture("messages/edit"));
    await answered(h, 1);
    await untilQuiet(h);
    expect(h.claude.requests).toHaveLength(1);
    expect(h.claude.userText(0)).toContain("somos 5 personas, no 4");
    expect(h.claude.userText(0)).not.toContain("Somos 4 personas para las 20:30");
    expect(h.graph.sends).toHaveLength(1);
  });

  it("an edit after the answer is answered once, as a follow-up that says what changed", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(earlier());
    await answered(h, 1);
    await h.deliver(fixture("messages/edit"));
    await answered(h, 2);
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(2);
    expect(h.claude.userText(1)).toContain('[Edited their earlier message "Somos 4 personas para las 20:30". It now says:]');
    expect(h.claude.userText(1)).toContain("somos 5 personas, no 4");
  });

  it("an edit in the older shape (unsupported, without its new words) is stored and deliberately not answered", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0", FALLBACK_REPLY: "I can't open that." } });
    await h.deliver(fixture("messages/unsupported-edit"));
    const message = await eventually(async () => (await h.db.inboundMessage.findFirst())?.skipReason, "the skip");
    expect(message).toMatch(/edit without its new text/);
    await untilQuiet(h);
    expect(h.graph.sends).toHaveLength(0);
  });
});

describe("Flows, ads and a chat opened", () => {
  it("a Flow's answers reach Claude as readable text, without Meta's flow_token", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/flow-nfm-reply"));
    await answered(h, 1);
    const seen = h.claude.userText(0);
    expect(seen).toContain(
      "[Filled in the form: date: 2026-12-05; time: 20:30; party size: 4; name: Lucía Gómez; notes: Mesa en terraza/exterior si es posible]",
    );
    expect(seen).not.toContain("FT-BOOKING");
  });

  it("a message from a Click-to-WhatsApp ad tells Claude which ad the customer came from", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/ad-referral-text"));
    await answered(h, 1);
    expect(h.claude.userText(0)).toContain(
      '[Came from an ad: "Escríbenos por WhatsApp" — Croissants recién horneados cada mañana 🥐 (https://fb.me/3cr4Wqqkv)]',
    );
    expect(h.claude.userText(0)).toContain("¿me pueden dar más información?");
  });

  it("a chat opened without a message gets no answer by default, and the configured welcome when there is one", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "0" } });
    await h.deliver(fixture("messages/request-welcome"));
    expect(await eventually(async () => (await h.db.inboundMessage.findFirst())?.skipReason, "the skip")).toMatch(/chat opened/);

    const w = await harness({ env: { REPLY_DEBOUNCE_MS: "0", WELCOME_REPLY: "¡Hola! ¿En qué te ayudamos?" } });
    await w.deliver(fixture("messages/request-welcome"));
    await answered(w, 1);
    expect(w.graph.sentTexts).toEqual(["¡Hola! ¿En qué te ayudamos?"]);
    expect(w.claude.requests).toHaveLength(0);
  });
});

describe("every other field a WhatsApp Business Account can subscribe to", () => {
  it("a marketing stop (user_preferences) is stored on the contact", async () => {
    const h = await harness();
    expect((await h.deliver(fixture("webhooks/user-preferences-marketing-stop"))).statusCode).toBe(200);
    const contact = await eventually(() => h.db.contact.findFirst({ where: { marketingOptedOutAt: { not: null } } }), "the preference");
    expect(contact).toMatchObject({ waId: PHONE, userId: BSUID });
  });

  it.each([
    "webhooks/account-update",
    "webhooks/template-status-update",
    "webhooks/template-quality-update",
    "webhooks/template-category-update",
    "webhooks/phone-number-quality-update",
    "webhooks/calls",
    "webhooks/history",
    "webhooks/smb-app-state-sync",
    "webhooks/status-group",
    "webhooks/status-played",
  ])("%s: 200, a deliberate outcome, nothing answered", async (name) => {
    const h = await harness();
    expect((await h.deliver(fixture(name))).statusCode).toBe(200);
    await untilQuiet(h);
    expect(await h.queues.inbound.count()).toBe(0);
    expect(await h.db.inboundMessage.count()).toBe(0);
    expect(h.graph.sends).toHaveLength(0);
  });
});
