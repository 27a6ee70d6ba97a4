import pino from "pino";
import { SMTPServer } from "smtp-server";
import { afterEach, describe, expect, it } from "vitest";
import { deliverJobId } from "../src/queue/catalog.ts";
import { Receiver, WEBHOOK_TOKEN } from "./support/chat-receiver.ts";
import { problemsOf } from "./support/config-problems.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, testEnv } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { freePort } from "./support/ports.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 14, issue 20 point 2: a new dead letter or handoff tells staff, by a webhook post and/or
 * e-mail, batched, with links to the staff page; a notification is a durable job, retried
 * until the receiver takes it, never lost across restarts, never sent twice. Against a real
 * local HTTP receiver and a real SMTP session (smtp-server), not mocks.
 */

const harness = harnessPerTest();
const BASE = "https://staff.example.com";
const BATCH_MS = 1000;

let receivers: Receiver[] = [];
afterEach(async () => {
  await Promise.all(receivers.map((r) => r.stop()));
  receivers = [];
});
async function receiver(): Promise<Receiver> {
  const r = new Receiver(await freePort());
  receivers.push(r);
  return r;
}

const notifyEnv = (r: Receiver, extra: Record<string, string> = {}) => ({
  STAFF_NOTIFY_WEBHOOK_URL: r.url,
  PUBLIC_BASE_URL: BASE,
  STAFF_NOTIFY_BATCH_MS: String(BATCH_MS),
  ...extra,
});

/** `count` customers whose replies Meta refuses for good (131026): `count` new dead letters. */
async function undeliverable(h: Harness, count: number, firstNumber = 16505551230): Promise<string[]> {
  h.graph.answerSends(...Array.from({ length: count }, () => ({ status: 400, body: graphError(131026, "Message undeliverable") })));
  const before = await h.db.deadLetter.count();
  for (let i = 0; i < count; i++) await h.deliver(textWebhook({ from: String(firstNumber + i), text: `my secret order question ${i}` }).body);
  await eventually(async () => (await h.db.deadLetter.count()) === before + count, `${count} dead letters`);
  const letters = await h.db.deadLetter.findMany({ orderBy: { createdAt: "desc" }, take: count, select: { id: true } });
  return letters.map((l) => l.id);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("staff are told of new dead letters", () => {
  it("three dead letters within the batch window make one webhook post listing all three by reason, with links", async () => {
    const r = await (await receiver()).start();
    const h = await harness({ env: notifyEnv(r) });
    const ids = await undeliverable(h, 3);

    await eventually(() => r.posts.length > 0, "the notification", 10_000);
    await sleep(2.5 * BATCH_MS); // a second batch would have come by now
    expect(r.posts).toHaveLength(1);
    const text = r.posts[0]!.text;
    expect(text).toMatch(/^3 WhatsApp conversations need a person \(3 Can't receive WhatsApp\)/);
    for (const id of ids) expect(text).toContain(`${BASE}/admin#/item/${id}`);
    expect(text).toContain("José (…1230)");
    // No message text and no whole phone number leave for the chat room.
    expect(text).not.toContain("secret order");
    expect(text).not.toContain("16505551230");
    const row = await h.db.staffNotification.findFirstOrThrow({ include: { items: true } });
    expect(row).toMatchObject({ channels: ["webhook"], webhookSentAt: expect.any(Date), deliveredAt: expect.any(Date) });
    expect(row.items.map((i) => i.deadLetterId).sort()).toEqual([...ids].sort());
    expect(await h.metrics.registry.getSingleMetricAsString("wa_staff_notifications_total")).toContain('channel="webhook",outcome="sent"} 1');
  });

  it("a handoff tells staff too", async () => {
    const r = await (await receiver()).start();
    const h = await harness({ env: notifyEnv(r) });
    await h.deliver(textWebhook({ text: "human" }).body);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { source: "handoff" } }), "the handoff item");
    await eventually(() => r.delivered.length > 0, "the notification", 10_000);
    expect(r.delivered[0]).toMatch(/^1 WhatsApp conversation needs a person \(1 Handed to a person\)/);
    expect(r.delivered[0]).toContain("The customer asked for a person");
    expect(r.delivered[0]).toContain(`${BASE}/admin#/item/${letter.id}`);
  });

  it("a customer's profile name cannot ping the room or plant a link: only its letters reach Slack, and every link is ours", async () => {
    const r = await (await receiver()).start();
    const h = await harness({ env: notifyEnv(r) });
    const name = "<!channel><https://evil.example/login|Open the staff page>";
    await h.deliver(textWebhook({ text: "human", from: "16505551299", name }).body);
    const letter = await eventually(() => h.db.deadLetter.findFirst({ where: { source: "handoff" } }), "the handoff item");
    await eventually(() => r.delivered.length > 0, "the notification", 10_000);
    const text = r.delivered[0]!;
    expect(text).toContain(`${BASE}/admin#/item/${letter.id}`);
    expect(text).not.toMatch(/[<>]/);
    expect(text).not.toContain("!channel");
    expect(text).not.toContain("evil.example");
    expect([...text.matchAll(/https?:\/\/[^\s)]+/g)].map((m) => m[0]).every((url) => url.startsWith(BASE))).toBe(true);
  });

  it("a receiver down for a while (refusing, then 503) gets the notification once it is back, exactly once; its items are not repeated later", async () => {
    const r = await receiver(); // not listening: connections are refused
    const h = await harness({ env: notifyEnv(r) });
    const first = await undeliverable(h, 2);
    const row = await eventually(() => h.db.staffNotification.findFirst({ where: { attempts: { gte: 2 } } }), "failed attempts while refused", 10_000);
    expect(row.lastError).toMatch(/webhook: unreachable \(ECONNREFUSED\)/);
    expect(row.lastError).not.toContain(WEBHOOK_TOKEN);
    let unavailable = 3;
    r.answer = () => (unavailable-- > 0 ? 503 : 200);
    await r.start();
    await eventually(() => r.delivered.length === 1, "the notification once the receiver is back", 10_000);
    expect(r.posts.filter((p) => p.status === 503)).toHaveLength(3);
    for (const id of first) expect(r.delivered[0]).toContain(id);

    const [later] = await undeliverable(h, 1, 16505551290);
    await eventually(() => r.delivered.length === 2, "the next notification", 10_000);
    await sleep(2 * BATCH_MS);
    expect(r.delivered).toHaveLength(2);
    expect(r.delivered[1]).toMatch(/^1 WhatsApp conversation needs/);
    expect(r.delivered[1]).toContain(later);
    for (const id of first) expect(r.delivered[1]).not.toContain(id);
    expect(await h.metrics.registry.getSingleMetricAsString("wa_staff_notifications_total")).toContain('channel="webhook",outcome="sent"} 2');
  });

  it("a pending notification survives the workers' restart, even with its job lost from Redis, and is sent once by two new workers", async () => {
    const r = await (await receiver()).start();
    r.answer = () => 503;
    const h = await harness({ env: notifyEnv(r) });
    const ids = await undeliverable(h, 2);
    const row = await eventually(() => h.db.staffNotification.findFirst({ where: { attempts: { gte: 1 } } }), "a failed attempt", 10_000);
    await h.stopWorkers();
    await h.queues.notify.remove(deliverJobId(row.id)); // as if Redis had lost it
    expect(await h.queues.notify.getJob(deliverJobId(row.id))).toBeUndefined();
    r.answer = () => 200;

    h.startWorkers(2);
    await eventually(() => r.delivered.length === 1, "the pending notification after the restart", 10_000);
    await sleep(2.5 * BATCH_MS);
    expect(r.delivered).toHaveLength(1);
    for (const id of ids) expect(r.delivered[0]).toContain(id);
    expect(await h.db.staffNotification.count()).toBe(1);
    expect(await h.db.staffNotification.findUniqueOrThrow({ where: { id: row.id } })).toMatchObject({ deliveredAt: expect.any(Date) });
  });

  it("with neither channel configured nothing is batched and no row piles up", async () => {
    const h = await harness();
    await undeliverable(h, 1);
    await sleep(1000);
    expect(await h.db.staffNotification.count()).toBe(0);
    expect(await h.queues.notify.count()).toBe(0);
  });
});

/** Reads a message as sent over SMTP: headers unfolded, quoted-printable bodies decoded. */
function readMail(raw: string): { subject: string; text: string } {
  const [head = "", ...rest] = raw.split("\r\n\r\n");
  const headers = head.replace(/\r\n[ \t]/g, " ");
  const subject = /^Subject: (.*)$/im.exec(headers)?.[1] ?? "";
  const decodedSubject = subject.replace(/=\?utf-8\?Q\?(.*?)\?=/gi, (_m, q: string) => qp(q.replace(/_/g, " "))).replace(/\?=\s+=\?/g, "");
  const body = rest.join("\r\n\r\n");
  return { subject: decodedSubject, text: /quoted-printable/i.test(headers) ? qp(body.replace(/=\r\n/g, "")) : body };
}
const qp = (s: string) =>
  Buffer.from(
    s.replace(/=([0-9A-F]{2})/gi, (_m, hex: string) => String.fromCharCode(Number.parseInt(hex, 16))),
    "latin1",
  ).toString("utf8");

describe("staff are told by e-mail", () => {
  let servers: SMTPServer[] = [];
  afterEach(async () => {
    await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    servers = [];
  });

  it("through a real SMTP session: the subject counts the items, the body lists each with its link; the password is never logged", async () => {
    const mails: { from: string; to: string[]; raw: string }[] = [];
    const logins: { username: string | null | undefined; password: string | null | undefined }[] = [];
    const server = new SMTPServer({
      authOptional: true,
      allowInsecureAuth: true,
      disabledCommands: ["STARTTLS"],
      logger: false,
      onAuth(auth, _session, callback) {
        logins.push({ username: auth.username, password: auth.password });
        callback(null, { user: auth.username });
      },
      onData(stream, session, callback) {
        const chunks: Buffer[] = [];
        stream.on("data", (c: Buffer) => chunks.push(c));
        stream.on("end", () => {
          mails.push({
            from: session.envelope.mailFrom ? session.envelope.mailFrom.address : "",
            to: session.envelope.rcptTo.map((t) => t.address),
            raw: Buffer.concat(chunks).toString("utf8"),
          });
          callback();
        });
      },
    });
    servers.push(server);
    const port = await freePort();
    await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));

    const { lines, destination } = logLines();
    const logger = pino({ level: "debug" }, destination);
    const h = await harness({
      logger,
      env: {
        SMTP_URL: `smtp://bot%40example.com:smtp-pa55word@127.0.0.1:${port}`,
        STAFF_NOTIFY_EMAIL: "support@example.com, lead@example.com",
        STAFF_NOTIFY_EMAIL_FROM: "bot@example.com",
        PUBLIC_BASE_URL: `${BASE}/`,
        STAFF_NOTIFY_BATCH_MS: String(BATCH_MS),
      },
    });
    const ids = await undeliverable(h, 2);
    await eventually(() => mails.length > 0, "the e-mail", 10_000);
    await sleep(2 * BATCH_MS);
    expect(mails).toHaveLength(1);
    expect(logins).toEqual([{ username: "bot@example.com", password: "smtp-pa55word" }]);
    expect(mails[0]).toMatchObject({ from: "bot@example.com", to: ["support@example.com", "lead@example.com"] });
    const mail = readMail(mails[0]!.raw);
    expect(mail.subject).toBe("2 WhatsApp conversations need a person (2 Can't receive WhatsApp)");
    for (const id of ids) expect(mail.text).toContain(`${BASE}/admin#/item/${id}`);
    expect(mail.text).toContain("José (…1231)");
    expect(await h.db.staffNotification.findFirstOrThrow()).toMatchObject({
      channels: ["email"],
      emailSentAt: expect.any(Date),
      deliveredAt: expect.any(Date),
    });
    expect(lines.some((l) => l.includes('"event":"notify.sent"'))).toBe(true);
    expect(lines.join("")).not.toContain("pa55word");
  });
});

describe("start-up checks the notification settings", () => {
  it("names every bad one, showing no secret", () => {
    const problems = problemsOf(
      testEnv({
        STAFF_NOTIFY_WEBHOOK_URL: "hooks.slack.com/services/T0/B0/tok3n",
        SMTP_URL: "http://mailer:pa55@mail.example.com",
        STAFF_NOTIFY_EMAIL: "support@example.com, not-an-address",
        STAFF_NOTIFY_BATCH_MS: "0",
        PUBLIC_BASE_URL: "staff.example.com",
      }),
    );
    for (const name of ["STAFF_NOTIFY_WEBHOOK_URL", "SMTP_URL", "STAFF_NOTIFY_EMAIL", "STAFF_NOTIFY_BATCH_MS", "PUBLIC_BASE_URL"]) {
      expect(
        problems.some((p) => p.startsWith(name)),
        `${name} in ${problems.join(" | ")}`,
      ).toBe(true);
    }
    expect(problems.join("\n")).toContain('"not-an-address"');
    expect(problems.join("\n")).not.toMatch(/tok3n|pa55/);
  });

  it("asks for both halves of e-mail, and for the staff page's address when any channel is on", () => {
    expect(problemsOf(testEnv({ SMTP_URL: "smtp://mail.example.com", PUBLIC_BASE_URL: BASE }))).toEqual([
      "STAFF_NOTIFY_EMAIL is required with SMTP_URL: the addresses staff are told at",
    ]);
    expect(problemsOf(testEnv({ STAFF_NOTIFY_EMAIL: "a@example.com", PUBLIC_BASE_URL: BASE }))).toEqual([
      "SMTP_URL is required with STAFF_NOTIFY_EMAIL: the server the e-mail is sent through",
    ]);
    expect(problemsOf(testEnv({ STAFF_NOTIFY_WEBHOOK_URL: "https://hooks.example.com/x" }))).toEqual([
      "PUBLIC_BASE_URL is required when staff are notified (STAFF_NOTIFY_WEBHOOK_URL, SMTP_URL): the notifications link to the staff page",
    ]);
    expect(problemsOf(testEnv({ SMTP_URL: "smtps://u:p@mail.example.com:465", STAFF_NOTIFY_EMAIL: "a@example.com", PUBLIC_BASE_URL: BASE }))).toEqual([]);
  });
});
