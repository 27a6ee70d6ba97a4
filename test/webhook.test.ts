import { readFileSync } from "node:fs";
import type { Queue } from "bullmq";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.ts";
import { inboundJobId, statusJobId } from "../src/queue/catalog.ts";
import { WEBHOOK_BODY_LIMIT } from "../src/webhook/routes.ts";
import { signMetaBody } from "../src/webhook/signature.ts";
import { type Harness, type HarnessOptions, startHarness, TEST_APP_SECRET, TEST_VERIFY_TOKEN } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import {
  envelope,
  messagesChange,
  metaWire,
  PHONE_NUMBER_ID,
  statusChange,
  statusWebhook,
  textMessage,
  textWebhook,
  uniqueWamid,
} from "./support/webhook-bodies.ts";

/**
 * The web role of DESIGN.md §2 through the real app, on real Redis and Postgres: laws 1, 2,
 * 9 and 11 (law 3 has webhook-claim.test.ts), and the GET verify handshake of WHATSAPP.md §1. Every harness here runs
 * without workers, so whatever the webhook enqueues stays in the queue to be counted.
 */

const MB = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// helpers

let harnesses: Harness[] = [];
/** A web-only system (no workers): jobs stay where the webhook put them. */
async function webOnly(options: Omit<HarnessOptions, "workers"> = {}): Promise<Harness> {
  const h = await startHarness({ ...options, workers: 0 });
  harnesses.push(h);
  return h;
}
afterEach(async () => {
  await Promise.all(harnesses.map((h) => h.close()));
  harnesses = [];
});

async function jobCount(queue: Queue): Promise<number> {
  const counts = await queue.getJobCounts();
  return Object.values(counts).reduce((sum, n) => sum + n, 0);
}

/** Jobs in every queue of this system, by queue. */
async function jobCounts(h: Harness): Promise<{ inbound: number; status: number; reply: number }> {
  const [inbound, status, reply] = await Promise.all([jobCount(h.queues.inbound), jobCount(h.queues.status), jobCount(h.queues.reply)]);
  return { inbound, status, reply };
}

async function jobIds(queue: Queue): Promise<string[]> {
  const jobs = await queue.getJobs();
  return jobs.map((job) => job.id ?? "").sort();
}

async function scanKeys(h: Harness, pattern: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await h.redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    found.push(...keys);
    cursor = next;
  } while (cursor !== "0");
  return found.sort();
}

/** The webhook's claims: BullMQ's deduplication keys, one per queued item (law 3; see webhook-claim.test.ts). */
const claimKeys = (h: Harness) => scanKeys(h, `${h.prefix}:*:de:*`);
/** Every key of this system except the ":meta" keys BullMQ writes on its own when a Queue is built. */
const dataKeys = async (h: Harness) => (await scanKeys(h, `${h.prefix}*`)).filter((key) => !key.endsWith(":meta"));

/** A POST /webhook with exactly these headers (h.deliver always adds a signature). */
function post(h: Harness, payload: string | Buffer, headers: Record<string, string>) {
  return h.app.inject({ method: "POST", url: "/webhook", payload, headers });
}

function verifyGet(h: Harness, query: Record<string, string>) {
  return h.app.inject({ method: "GET", url: "/webhook", query });
}

const statusItem = (id: string, status: string) => ({
  id,
  status,
  timestamp: String(Math.floor(Date.now() / 1000)),
  recipient_id: "16505551234",
});

// ---------------------------------------------------------------------------------------------
// fixtures: Meta wire-format bodies with signatures committed beside them

const FIXTURES = new URL("../fixtures/", import.meta.url);
const fixtureSignatures = JSON.parse(readFileSync(new URL("signatures.json", FIXTURES), "utf8")) as {
  appSecret: string;
  signatures: Record<string, string>;
};
const FIXTURE_SECRET = fixtureSignatures.appSecret;
function fixture(name: string): { raw: Buffer; signature: string } {
  const signature = fixtureSignatures.signatures[name];
  if (signature === undefined) throw new Error(`no committed signature for ${name}`);
  return { raw: readFileSync(new URL(name, FIXTURES)), signature };
}

// ---------------------------------------------------------------------------------------------

describe("GET /webhook: Meta's verify challenge", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness({ workers: 0 });
  });
  afterAll(async () => {
    await h.close();
  });

  it("answers hub.mode=subscribe with the right token with 200 and the raw challenge as text/plain", async () => {
    const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.verify_token": TEST_VERIFY_TOKEN, "hub.challenge": "1158201444" });
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/plain/);
    expect(res.body).toBe("1158201444");
  });

  it("returns a non-numeric challenge byte for byte, never JSON-quoted", async () => {
    const challenge = "abc-DEF_123.xyz";
    const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.verify_token": TEST_VERIFY_TOKEN, "hub.challenge": challenge });
    expect(res.statusCode).toBe(200);
    expect(res.headers["content-type"]).toMatch(/^text\/plain/);
    expect(res.body).toBe(challenge);
    expect(res.body).not.toContain('"');
  });

  it("refuses a wrong verify token with 403 and does not echo the challenge", async () => {
    const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.verify_token": "not-the-token", "hub.challenge": "1158201444" });
    expect(res.statusCode).toBe(403);
    expect(res.body).not.toContain("1158201444");
  });

  it("refuses the right token with a prefix or suffix added with 403", async () => {
    for (const token of [`${TEST_VERIFY_TOKEN}x`, TEST_VERIFY_TOKEN.slice(0, -1), ` ${TEST_VERIFY_TOKEN}`]) {
      const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": "42" });
      expect(res.statusCode).toBe(403);
    }
  });

  it("refuses a missing verify token with 403", async () => {
    const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.challenge": "1158201444" });
    expect(res.statusCode).toBe(403);
  });

  it("refuses a missing hub.mode with 403", async () => {
    const res = await verifyGet(h, { "hub.verify_token": TEST_VERIFY_TOKEN, "hub.challenge": "1158201444" });
    expect(res.statusCode).toBe(403);
    expect(res.body).not.toContain("1158201444");
  });

  it("refuses a hub.mode other than subscribe with 403", async () => {
    const res = await verifyGet(h, { "hub.mode": "unsubscribe", "hub.verify_token": TEST_VERIFY_TOKEN, "hub.challenge": "1158201444" });
    expect(res.statusCode).toBe(403);
  });

  it("refuses a missing hub.challenge with 403", async () => {
    const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.verify_token": TEST_VERIFY_TOKEN });
    expect(res.statusCode).toBe(403);
  });

  it("refuses an empty hub.challenge with 403", async () => {
    const res = await verifyGet(h, { "hub.mode": "subscribe", "hub.verify_token": TEST_VERIFY_TOKEN, "hub.challenge": "" });
    expect(res.statusCode).toBe(403);
  });
});

describe("POST /webhook: Meta's committed wire-format fixtures (law 1: verified on raw bytes)", () => {
  it("the text fixture with \\uXXXX escapes, an emoji surrogate pair and \\/ is accepted with 200 and enqueued as one inbound job", async () => {
    const h = await webOnly({ env: { WHATSAPP_APP_SECRET: FIXTURE_SECRET } });
    const { raw, signature } = fixture("text-unicode-emoji-slash.json");
    const res = await h.deliver(raw, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(200);

    const wamid = "wamid.HBgNNTIxNTUxMjM0NTY3OBUCABIYFjNFQjBDNzE5QzU4RUVGRDRGMkU3QjcA";
    expect(await jobCounts(h)).toEqual({ inbound: 1, status: 0, reply: 0 });
    const job = await h.queues.inbound.getJob(inboundJobId(wamid));
    expect(job?.data).toMatchObject({
      phoneNumberId: PHONE_NUMBER_ID,
      sender: { waId: "5215512345678", name: "José Peña" },
      message: { id: wamid, from: "5215512345678", type: "text" },
    });
    // The job holds the decoded text: the escapes were Meta's wire format, not the message.
    expect(job?.data.message.text?.body).toBe("Hola, quiero un café ☕😀 ¿envío a Ciudad/Estado? 50% off @tienda <3");
  });

  it("the image fixture with escaped URLs and base64 sha256 is accepted with 200 and enqueued as one inbound job", async () => {
    const h = await webOnly({ env: { WHATSAPP_APP_SECRET: FIXTURE_SECRET } });
    const { raw, signature } = fixture("image-with-urls.json");
    const res = await h.deliver(raw, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(200);

    const wamid = "wamid.HBgNNDkxNTExMjM0NTY3OBUCABIYFjNFQjA0QTc3QjE2QzE5QjU0RkI0MTUA";
    expect(await jobCounts(h)).toEqual({ inbound: 1, status: 0, reply: 0 });
    const job = await h.queues.inbound.getJob(inboundJobId(wamid));
    expect(job?.data).toMatchObject({
      phoneNumberId: PHONE_NUMBER_ID,
      sender: { name: "Zoë" },
      message: {
        id: wamid,
        type: "image",
        image: {
          caption: "Hola quiero un café",
          mime_type: "image/jpeg",
          url: "https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1234567890123456&ext=1764470100&hash=ATsQ",
        },
      },
    });
  });

  it("the batch fixture enqueues 3 inbound messages across 2 entries and 1 status, ignores the template-status change, and answers 200", async () => {
    const h = await webOnly({ env: { WHATSAPP_APP_SECRET: FIXTURE_SECRET } });
    const { raw, signature } = fixture("batch-entries-changes-statuses.json");
    const res = await h.deliver(raw, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(200);

    expect(await jobCounts(h)).toEqual({ inbound: 3, status: 1, reply: 0 });
    expect(await jobIds(h.queues.inbound)).toEqual(["wamid.BATCH.A1", "wamid.BATCH.B1", "wamid.BATCH.C1"].map(inboundJobId).sort());
    expect(await jobIds(h.queues.status)).toEqual([statusJobId("wamid.UNKNOWN.OUT1", "delivered")]);

    // Each message keeps the phone number id of its own change, and its sender's name.
    expect((await h.queues.inbound.getJob(inboundJobId("wamid.BATCH.A1")))?.data).toMatchObject({ phoneNumberId: "106540352242922", sender: { name: "Ana" } });
    expect((await h.queues.inbound.getJob(inboundJobId("wamid.BATCH.B1")))?.data).toMatchObject({ phoneNumberId: "106540352242922", sender: { name: "Bo" } });
    expect((await h.queues.inbound.getJob(inboundJobId("wamid.BATCH.C1")))?.data).toMatchObject({
      phoneNumberId: "106540352249999",
      sender: { name: "Chloé" },
    });
    expect((await h.queues.status.getJob(statusJobId("wamid.UNKNOWN.OUT1", "delivered")))?.data).toMatchObject({
      phoneNumberId: "106540352242922",
      status: { id: "wamid.UNKNOWN.OUT1", status: "delivered" },
    });
  });

  it("a fixture body signed with the committed signature is refused with 401 when the app runs with another secret", async () => {
    const h = await webOnly(); // the default test secret, not the fixture secret
    const { raw, signature } = fixture("text-unicode-emoji-slash.json");
    const res = await h.deliver(raw, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(401);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await claimKeys(h)).toEqual([]);
  });

  it("a fixture re-serialised with JSON.stringify(JSON.parse(raw)) is refused with 401 under the committed signature", async () => {
    const h = await webOnly({ env: { WHATSAPP_APP_SECRET: FIXTURE_SECRET } });
    const { raw, signature } = fixture("text-unicode-emoji-slash.json");
    const reserialised = JSON.stringify(JSON.parse(raw.toString("utf8")) as unknown);
    const res = await h.deliver(reserialised, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(401);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
  });
});

describe("POST /webhook: signature and bad input (laws 1 and 11)", () => {
  it("a changed byte is refused with 401 and nothing is enqueued or claimed", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "Pay 10 EUR to my account" });
    const signature = signMetaBody(body, TEST_APP_SECRET);
    const tampered = Buffer.from(body, "utf8");
    const at = tampered.indexOf("10 EUR");
    expect(at).toBeGreaterThan(0);
    tampered[at] = "9".charCodeAt(0);

    const res = await h.deliver(tampered, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(401);

    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await claimKeys(h)).toEqual([]);
    expect(await h.queues.inbound.getDeduplicationJobId(inboundJobId(wamids[0]!))).toBeNull();
    // No side effect of any kind: this system has no key in Redis beyond BullMQ's own metadata.
    expect(await dataKeys(h)).toEqual([]);
  });

  it("a missing X-Hub-Signature-256 header is refused with 401 and nothing is enqueued", async () => {
    const h = await webOnly();
    const { body } = textWebhook({ text: "hello" });
    const res = await post(h, body, { "content-type": "application/json" });
    expect(res.statusCode).toBe(401);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await claimKeys(h)).toEqual([]);
  });

  it('a signature header without the "sha256=" prefix is refused with 401', async () => {
    const h = await webOnly();
    const { body } = textWebhook({ text: "hello" });
    const digest = signMetaBody(body, TEST_APP_SECRET).slice("sha256=".length);
    const res = await h.deliver(body, { "x-hub-signature-256": digest });
    expect(res.statusCode).toBe(401);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
  });

  it("a status delivery with a changed byte is refused with 401 and no status job is enqueued", async () => {
    const h = await webOnly();
    const body = statusWebhook({ id: uniqueWamid(), status: "delivered" });
    const signature = signMetaBody(body, TEST_APP_SECRET);
    const tampered = body.replace('"delivered"', '"read"');
    expect(tampered).not.toBe(body);
    const res = await h.deliver(tampered, { "x-hub-signature-256": signature });
    expect(res.statusCode).toBe(401);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await claimKeys(h)).toEqual([]);
  });

  it("a valid signature over malformed JSON is answered 400 and nothing is enqueued", async () => {
    const h = await webOnly();
    const { body } = textWebhook({ text: "cut short" });
    const truncated = body.slice(0, body.length - 5);
    const res = await h.deliver(truncated);
    expect(res.statusCode).toBe(400);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await claimKeys(h)).toEqual([]);
  });

  it("a valid signature over something that is not JSON at all is answered 400", async () => {
    const h = await webOnly();
    const res = await h.deliver("hello=world&object=whatsapp_business_account");
    expect(res.statusCode).toBe(400);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
  });

  it.each([
    ['{"object":"page","entry":[]}'],
    ['{"foo":1}'],
    ["[]"],
    ["null"],
    ["42"],
    ['"whatsapp_business_account"'],
    ['{"object":"whatsapp_business_account"}'],
    ['{"object":"whatsapp_business_account","entry":[{"id":"1"}]}'],
    ['{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"messages","value":{"messaging_product":"whatsapp"}}]}]}'],
    ['{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":"account_update","value":{"event":"VERIFIED_ACCOUNT"}}]}]}'],
  ])("a validly signed unknown payload shape %s is answered 200 and nothing is enqueued", async (body) => {
    const h = await webOnly();
    const res = await h.deliver(body);
    expect(res.statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await claimKeys(h)).toEqual([]);
  });
});

describe("POST /webhook: body size (Meta sends up to 3 MB)", () => {
  it("a 2 MB signed text message is accepted with 200 and enqueued", async () => {
    const h = await webOnly();
    const text = "Hola, quiero un café / ".repeat(Math.ceil((2 * MB) / 23)).slice(0, 2 * MB);
    const { body, wamids } = textWebhook({ text });
    expect(Buffer.byteLength(body)).toBeGreaterThan(2 * MB);
    expect(Buffer.byteLength(body)).toBeLessThan(WEBHOOK_BODY_LIMIT);

    const res = await h.deliver(body);
    expect(res.statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 1, status: 0, reply: 0 });
    const job = await h.queues.inbound.getJob(inboundJobId(wamids[0]!));
    expect(job?.data.message.text?.body).toBe(text);
  });

  it("a body of 3 MB, Meta's documented maximum, is accepted with 200 and enqueued", async () => {
    const h = await webOnly();
    const { body } = textWebhook({ text: "x".repeat(3 * MB) });
    expect(Buffer.byteLength(body)).toBeGreaterThan(3 * MB);

    const res = await h.deliver(body);
    expect(res.statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 1, status: 0, reply: 0 });
  });

  it("a signed body over 4 MB is refused with 413 and nothing is enqueued or claimed", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "y".repeat(4 * MB + 64 * 1024) });
    expect(Buffer.byteLength(body)).toBeGreaterThan(4 * MB);

    const res = await h.deliver(body);
    expect(res.statusCode).toBe(413);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 0, reply: 0 });
    expect(await h.queues.inbound.getDeduplicationJobId(inboundJobId(wamids[0]!))).toBeNull();
    expect(await claimKeys(h)).toEqual([]);
    expect(await dataKeys(h)).toEqual([]);
  });
});

describe("POST /webhook: batches are normal (law 9)", () => {
  it("every message and status of several entries and changes is enqueued", async () => {
    const h = await webOnly();
    const messageIds: string[] = [];
    const statusIds: string[] = [];
    const entries: unknown[][] = [];
    for (let e = 0; e < 3; e++) {
      const changes: unknown[] = [];
      for (let c = 0; c < 2; c++) {
        const messages = [0, 1, 2].map((m) => textMessage({ text: `entry ${e} change ${c} message ${m}`, from: `1650555${e}${c}${m}00` }));
        messageIds.push(...messages.map((m) => m.id));
        changes.push(messagesChange(messages, `10654035224${e}${c}`));
        const statuses = [statusItem(uniqueWamid(), "sent"), statusItem(uniqueWamid(), "delivered")];
        statusIds.push(...statuses.map((s) => statusJobId(s.id, s.status)));
        changes.push(statusChange(statuses, `10654035224${e}${c}`));
      }
      entries.push(changes);
    }
    const res = await h.deliver(metaWire(envelope(...entries)));
    expect(res.statusCode).toBe(200);

    expect(await jobCounts(h)).toEqual({ inbound: 18, status: 12, reply: 0 });
    expect(await jobIds(h.queues.inbound)).toEqual(messageIds.map((id) => inboundJobId(id)).sort());
    expect(await jobIds(h.queues.status)).toEqual(statusIds.sort());
    // Every message and status is claimed, by the same script that queued its job.
    expect(await claimKeys(h)).toHaveLength(30);
  });

  it("one message without an id does not sink the other messages and statuses of the POST", async () => {
    const h = await webOnly();
    const good1 = textMessage({ text: "first" });
    const good2 = textMessage({ text: "third" });
    const good3 = textMessage({ text: "other entry" });
    const { id: _dropped, ...withoutId } = textMessage({ text: "second, malformed" });
    const status = statusItem(uniqueWamid(), "read");
    const badStatus = { ...statusItem(uniqueWamid(), "exploded") };
    const body = metaWire(
      envelope([messagesChange([good1, withoutId as ReturnType<typeof textMessage>, good2]), statusChange([badStatus, status])], [messagesChange([good3])]),
    );
    const res = await h.deliver(body);
    expect(res.statusCode).toBe(200);

    expect(await jobCounts(h)).toEqual({ inbound: 3, status: 1, reply: 0 });
    expect(await jobIds(h.queues.inbound)).toEqual([inboundJobId(good1.id), inboundJobId(good2.id), inboundJobId(good3.id)].sort());
    expect(await jobIds(h.queues.status)).toEqual([statusJobId(status.id, "read")]);
  });

  it("a batch of 1000 updates, Meta's maximum, is enqueued in full", async () => {
    const h = await webOnly();
    const messages = Array.from({ length: 500 }, (_, i) => textMessage({ text: `message ${i}`, from: `1650555${String(i % 50).padStart(4, "0")}` }));
    const statuses = Array.from({ length: 500 }, (_, i) => statusItem(uniqueWamid(), i % 2 === 0 ? "delivered" : "read"));
    const res = await h.deliver(metaWire(envelope([messagesChange(messages), statusChange(statuses)])));
    expect(res.statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 500, status: 500, reply: 0 });
  });
});

describe("POST /webhook: duplicates (at-least-once delivery)", () => {
  it("the same wamid delivered twice in a row gives one inbound job, and both deliveries are answered 200", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "hello twice" });
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 1, status: 0, reply: 0 });
    expect(await jobIds(h.queues.inbound)).toEqual([inboundJobId(wamids[0]!)]);
  });

  it("the same wamid in a different body (a redelivery re-batched by Meta) is still one inbound job", async () => {
    const h = await webOnly();
    const message = textMessage({ text: "re-batched" });
    const other = textMessage({ text: "a new one" });
    expect((await h.deliver(metaWire(envelope([messagesChange([message])])))).statusCode).toBe(200);
    expect((await h.deliver(metaWire(envelope([messagesChange([other, message])])))).statusCode).toBe(200);
    expect(await jobIds(h.queues.inbound)).toEqual([inboundJobId(message.id), inboundJobId(other.id)].sort());
  });

  it("the same body delivered 5 times concurrently is answered 200 every time and gives exactly one inbound job", async () => {
    const h = await webOnly();
    const { body, wamids } = textWebhook({ text: "five at once" });
    const responses = await Promise.all(Array.from({ length: 5 }, () => h.deliver(body)));
    expect(responses.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect(await jobCounts(h)).toEqual({ inbound: 1, status: 0, reply: 0 });
    expect(await jobIds(h.queues.inbound)).toEqual([inboundJobId(wamids[0]!)]);
    expect(await h.queues.inbound.getDeduplicationJobId(inboundJobId(wamids[0]!))).toBe(inboundJobId(wamids[0]!));
  });

  it("the same wamid twice within one POST gives one inbound job and 200", async () => {
    const h = await webOnly();
    const message = textMessage({ text: "listed twice" });
    const res = await h.deliver(metaWire(envelope([messagesChange([message, message])])));
    expect(res.statusCode).toBe(200);
    expect(await jobIds(h.queues.inbound)).toEqual([inboundJobId(message.id)]);
  });

  it("the same (wamid, status) delivered twice gives one status job", async () => {
    const h = await webOnly();
    const wamid = uniqueWamid();
    const body = statusWebhook({ id: wamid, status: "delivered" });
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect((await h.deliver(body)).statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 1, reply: 0 });
    expect(await jobIds(h.queues.status)).toEqual([statusJobId(wamid, "delivered")]);
  });

  it("the same wamid with a different status gives a second status job", async () => {
    const h = await webOnly();
    const wamid = uniqueWamid();
    expect((await h.deliver(statusWebhook({ id: wamid, status: "delivered" }))).statusCode).toBe(200);
    expect((await h.deliver(statusWebhook({ id: wamid, status: "read" }))).statusCode).toBe(200);
    expect(await jobCounts(h)).toEqual({ inbound: 0, status: 2, reply: 0 });
    expect(await jobIds(h.queues.status)).toEqual([statusJobId(wamid, "delivered"), statusJobId(wamid, "read")].sort());
  });
});

describe("POST /webhook: logs (law 10)", () => {
  it("a delivery is one info line with what it queued, its status and its time, whatever the batch size, and never the text", async () => {
    const log = logLines();
    const h = await webOnly({ logger: createLogger({ level: "info", destination: log.destination }) });
    const messages = Array.from({ length: 20 }, (_, i) => textMessage({ text: `private words ${i}` }));
    expect((await h.deliver(metaWire(envelope([messagesChange(messages)])))).statusCode).toBe(200);
    expect((await h.deliver(metaWire(envelope([messagesChange(messages.slice(0, 1))])))).statusCode).toBe(200);

    const lines = log.parsed();
    expect(lines.map((l) => l.event)).toEqual(["webhook.enqueued", "webhook.duplicate"]);
    expect(lines[0]).toMatchObject({ level: 30, status: 200, enqueued: messages.map((m) => m.id), duplicates: [] });
    expect(lines[1]).toMatchObject({ status: 200, enqueued: [], duplicates: [messages[0]!.id] });
    expect(typeof lines[0]!.ms).toBe("number");
    expect(JSON.stringify(lines)).not.toContain("private words");
  });
});
