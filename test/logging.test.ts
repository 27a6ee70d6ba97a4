import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { asFailure, describeError, forTheQueue } from "../src/errors.ts";
import { createLogger } from "../src/logger.ts";
import { eventually, type Harness, startHarness, TEST_ADMIN_TOKEN, TEST_APP_SECRET, TEST_VERIFY_TOKEN } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/** Law 10: secrets and people stay out of logs. */

const { lines, destination: sink } = logLines();

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ logger: createLogger({ level: "info", destination: sink }) });
});
afterAll(async () => h?.close());

const PRIVATE_TEXT = "my passport number is X1234567";

describe("logs", () => {
  beforeAll(async () => {
    await h.app.inject({ method: "GET", url: `/webhook?hub.mode=subscribe&hub.verify_token=${TEST_VERIFY_TOKEN}&hub.challenge=42` });
    await h.app.inject({ method: "GET", url: "/admin/dlq", headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    await h.deliver(textWebhook({ text: PRIVATE_TEXT }).body);
    await eventually(() => h.graph.sends.length === 1, "the reply");
    await eventually(() => lines.some((l) => l.includes('"reply.sent"')), "the reply.sent log line");
  });

  it("are structured JSON events with stable names", () => {
    const events = lines.map((l) => JSON.parse(l) as { event?: string }).flatMap((l) => (l.event ? [l.event] : []));
    expect(events).toEqual(expect.arrayContaining(["webhook.verified", "webhook.enqueued", "inbound.stored", "reply.generated", "reply.sent"]));
  });

  it("never contain the verify token, even though it rides in the verify request's query string", () => {
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.filter((l) => l.includes(TEST_VERIFY_TOKEN))).toEqual([]);
  });

  it("never contain the admin token, the app secret, the access token or the API key", () => {
    for (const secret of [TEST_ADMIN_TOKEN, TEST_APP_SECRET, "test-access-token", "test-anthropic-key"]) {
      expect(lines.filter((l) => l.includes(secret))).toEqual([]);
    }
  });

  it("never contain message text at info level", () => {
    expect(lines.filter((l) => l.includes("passport"))).toEqual([]);
    expect(lines.filter((l) => l.includes("Reply #1"))).toEqual([]);
  });

  it("never contain why Claude handed a customer to a person: that stays in Postgres and on the staff page (issue 32.9)", async () => {
    const reason = "The customer wants a refund over the limit for their divorce lawyer's invoice.";
    h.claude.answer({ content: [{ type: "tool_use", id: "toolu_01logs", name: "handoff_to_human", input: { reason } }] });
    await h.deliver(textWebhook({ text: "can I have my money back?", from: "34600000999" }).body);
    await eventually(() => lines.some((l) => l.includes('"reply.handed_off"')), "the reply.handed_off log line");
    expect((await h.db.deadLetter.findFirstOrThrow({ where: { source: "handoff", code: "claude" } })).reason).toContain("divorce lawyer");
    expect(lines.filter((l) => l.includes("divorce"))).toEqual([]);
  });
});

describe("an error's properties", () => {
  it("are logged without the customer's number under any of Meta's names, at any depth, and the error itself is left as it was", () => {
    const { lines: written, destination } = logLines();
    const log = createLogger({ level: "info", destination });
    const number = "447700900123";
    const answer = { contacts: [{ input: number, wa_id: number }], messages: [] };
    const error = Object.assign(new Error("the send went wrong"), {
      code: "unreadable_answer",
      detail: { httpStatus: 200, answer },
      request: { to: number, recipient_id: number, nested: { deeper: { from: number, phone: `+${number}` } } },
      payload: { statuses: [{ recipient_id: number }], text: { body: `call me on ${number}` } },
      cause: Object.assign(new Error("caused by"), { wa_id: number }),
    });
    log.error({ event: "test.failed", err: error }, "failed");

    expect(written.join("")).not.toContain("900123");
    const line = JSON.parse(written.join("")) as { err: Record<string, unknown> };
    expect(line.err).toMatchObject({ message: "the send went wrong: caused by", code: "unreadable_answer", detail: { httpStatus: 200 } });
    expect(line.err.detail).toEqual({ httpStatus: 200, answer: { contacts: [{ input: "[redacted]", wa_id: "[redacted]" }], messages: [] } });
    // Still to be stored and retried: the log line took a copy.
    expect(error.detail.answer.contacts[0]!.wa_id).toBe(number);
    expect(error.request.nested.deeper.from).toBe(number);
  });
});

describe("a line's fields", () => {
  const { lines: written, destination } = logLines();
  const log = createLogger({ level: "info", destination });

  it("are censored under a secret's or a customer's name in the line's first three levels and in a child's bindings; the logged objects are left as they were", () => {
    const number = "447700900123";
    const config = {
      whatsapp: { accessToken: "EAAG-token", appSecret: "app-secret" },
      notify: { smtpUrl: "smtp://u:pw@host", webhookUrl: "https://hooks/T0KEN" },
    };
    const fields = {
      event: "test.secrets",
      apiKey: "sk-ant-key",
      text: "my passport number is X1234567",
      config,
      messages: [{ from: "someone", wa_id: number, text: { body: "hello" } }],
      headers: { authorization: "Bearer admin-token", cookie: "wa_staff=s" },
      at: new Date(0),
    };
    log.child({ phone: number }).child({ reqId: "req-1" }, { level: "info" }).info(fields, "configured");

    const line = written.at(-1)!;
    for (const secret of ["EAAG-token", "app-secret", "u:pw", "T0KEN", "sk-ant-key", "X1234567", number, "admin-token", "wa_staff", "hello"])
      expect(line).not.toContain(secret);
    expect(JSON.parse(line)).toMatchObject({
      reqId: "req-1",
      phone: "[redacted]",
      event: "test.secrets",
      config: { whatsapp: { accessToken: "[redacted]" }, notify: { smtpUrl: "[redacted]" } },
      messages: [{ from: "someone", wa_id: "[redacted]", text: "[redacted]" }],
      at: "1970-01-01T00:00:00.000Z",
    });
    expect(config.notify.smtpUrl).toBe("smtp://u:pw@host");
    expect(fields.messages[0]!.wa_id).toBe(number);
  });

  it("with nothing to hide are written as they are, ids and counts included", () => {
    log.info({ event: "webhook.enqueued", status: 200, enqueued: ["wamid.A", "wamid.B"], duplicates: [], ignored: 0 }, "delivery accepted");
    expect(JSON.parse(written.at(-1)!)).toMatchObject({
      event: "webhook.enqueued",
      status: 200,
      enqueued: ["wamid.A", "wamid.B"],
      duplicates: [],
      ignored: 0,
      msg: "delivery accepted",
    });
  });
});

describe("a send Meta answers without a message id", () => {
  const CUSTOMER = "447700900123";
  const { lines: answered, destination: capture } = logLines();
  let s: Harness;
  beforeAll(async () => {
    // Two attempts; a maybe-sent part waits about a second for its status before the second.
    s = await startHarness({
      logger: createLogger({ level: "debug", destination: capture }),
      env: { JOB_ATTEMPTS: "2", GRAPH_TIMEOUT_MS: "300", JOB_LOCK_MS: "1000", SEND_RECONCILE_WAIT_MS: "300" },
    });
  });
  afterAll(async () => s?.close());

  it("names the customer nowhere: not in the log lines, the job's failure in Redis, or the dead letter in Postgres", async () => {
    // Meta's answer, as it would come for this customer, but unreadable: it carries no message id.
    const unreadable = { status: 200, body: { messaging_product: "whatsapp", contacts: [{ input: CUSTOMER, wa_id: CUSTOMER }], messages: [] } };
    s.graph.answerSends(unreadable, unreadable);
    await s.deliver(textWebhook({ text: "where is my order?", from: CUSTOMER }).body);
    const letter = await eventually(() => s.db.deadLetter.findFirst({ include: { actions: true } }), "the dead letter", 20_000);
    expect(s.graph.sends.filter((send) => send.body.to === CUSTOMER).length).toBeGreaterThanOrEqual(2);
    expect(letter).toMatchObject({ code: "unreadable_answer" });
    // What still tells an operator what came back: the answer's shape, never its values.
    expect(letter.detail).toEqual({
      bodyLength: expect.any(Number),
      bodyShape: { messaging_product: "string", contacts: "array of 1", messages: "array of 0" },
    });
    await eventually(() => answered.some((line) => line.includes('"job.retrying"')), "the retry's log line");

    expect(answered.filter((line) => line.includes('"reply.dead_lettered"'))).toHaveLength(1);
    expect(answered.filter((line) => line.includes(CUSTOMER))).toEqual([]);
    expect(JSON.stringify(letter)).not.toContain(CUSTOMER);
    const jobs = await s.queues.reply.getJobs(["completed", "failed", "delayed", "wait", "active"]);
    expect(jobs.some((job) => job.failedReason)).toBe(true);
    for (const job of jobs) {
      const stored = await s.redis.hgetall(`${s.prefix}:${s.queues.reply.name}:${job.id}`);
      expect(JSON.stringify(stored)).not.toContain(CUSTOMER);
    }
  });
});

describe("a process's last log lines", () => {
  it("are all written, in order, when it exits right after them while its stdout is backed up (a shutdown's or a crash's last words)", async () => {
    // The reader is slow (a loaded machine, a log shipper): the pipe fills while the process
    // logs on, turn after turn, and it exits as soon as it is done.
    const script = [
      'import { createLogger } from "./src/logger.ts";',
      'const log = createLogger({ level: "info" });',
      "for (let i = 0; i < 2000; i++) {",
      '  log.info({ event: "test.line", i }, "x".repeat(200));',
      "  if (i % 50 === 0) await new Promise((resolve) => setTimeout(resolve, 1));",
      "}",
      "process.exit(0);",
    ].join("\n");
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    let output = "";
    child.stdout!.pause();
    setTimeout(() => child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString())).resume(), 1500);
    await new Promise((resolve) => child.once("close", resolve));
    const numbers = output
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => (JSON.parse(line) as { i: number }).i);
    expect(numbers).toEqual(Array.from({ length: 2000 }, (_, i) => i));
  });
});

describe("Prisma's messages, which quote the whole call", () => {
  it("are cut to what went wrong before a failure is stored or shown: a message's words and a number never reach failedReason or a dead letter's reason", async () => {
    const secret = "my card is 4111111111111111";
    let thrown: unknown;
    try {
      // A call Prisma refuses before it reaches Postgres: its message lists every argument.
      await h.db.inboundMessage.create({ data: { wamid: "wamid.X", text: secret, type: 42 } as never });
    } catch (error) {
      thrown = error;
    }
    expect(String((thrown as Error).message)).toContain(secret); // what Prisma says
    expect(describeError(thrown)).not.toContain(secret);
    expect(describeError(thrown)).toMatch(/^PrismaClientValidationError: Argument `\w+`/);
    expect(String((forTheQueue(thrown) as Error).message)).not.toContain(secret);
    expect(asFailure(thrown).reason).not.toContain(secret);
  });
});
