import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { PermanentError, RetryableError } from "../src/errors.ts";
import { GraphClient } from "../src/whatsapp/graph-client.ts";
import { graphError, PROXY_502_PAGE } from "./support/fake-graph.ts";
import { delayedUntil, eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { freePort } from "./support/ports.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 5: only proof of refusal means "not sent". Meta may have taken a send whose answer we
 * never read (a timeout, a reset, a proxy's 502 page): such a part stays `sending`, and nothing
 * sends it again before its status webhook could have come, not even a new message from the
 * customer. Only Graph's error body, or a connection never made, makes it safe at once.
 */

const harness = harnessPerTest();

/**
 * Short timings: a send times out after 300 ms; a maybe-sent part's deadline (resend_after) is
 * set, as it is marked sending, 500 ms (the send lease, JOB_LOCK_MS / 2) + 300 ms + 1500 ms ahead.
 */
const FAST = { GRAPH_TIMEOUT_MS: "300", SEND_RECONCILE_WAIT_MS: "1500", JOB_LOCK_MS: "1000", REPLY_DEBOUNCE_MS: "50" };
const RESEND_AFTER_MS = 500 + 300 + 1500;

const statusFor = (bizOpaque: string, wamid: string) => statusWebhook({ id: wamid, status: "sent", biz_opaque_callback_data: bizOpaque });

/** The part whose first send Meta may have taken, as its deadline for a status was recorded. */
async function maybeSentPart(h: Harness) {
  const part = await eventually(
    () => h.db.outboundMessage.findFirst({ where: { sendState: "sending", sendAttempt: 1, wamid: null } }),
    "a part whose first send may have been taken",
  );
  return { ...part, resendAfter: part.resendAfter! };
}

/** The conversation's reply job, once BullMQ holds it delayed until at least `notBefore` (epoch ms). */
async function replyJobDelayed(h: Harness, notBefore = 0): Promise<{ id: string; until: number } | undefined> {
  const [job] = await h.queues.reply.getDelayed();
  const until = job?.id ? await delayedUntil(h.redis, h.queues.reply, job.id) : undefined;
  return job?.id && until !== undefined && until >= notBefore ? { id: job.id, until } : undefined;
}

/** Every reply job has run to its end: nothing is left that could send. */
const repliesSettled = (h: Harness) =>
  eventually(async () => {
    const counts = await h.queues.reply.getJobCounts("waiting", "active", "delayed", "prioritized");
    return Object.values(counts).every((n) => n === 0);
  }, "every reply job to have run");

/** The inbound worker has stored `count` messages and scheduled their replies. */
const inboundHandled = (h: Harness, count: number) =>
  eventually(async () => (await h.queues.inbound.getJobCounts("completed")).completed === count, `${count} messages to be stored and their replies scheduled`);

describe("a send Meta may have taken", () => {
  it("timed out while Meta took it, then the customer writes again: the first reply reaches them once, the second once", async () => {
    const h = await harness({ env: FAST });
    h.graph.answerSends({ status: 200, delayMs: 1200 }); // Meta takes it, and answers after our timeout
    await h.deliver(textWebhook({ text: "do you deliver on Sundays?" }).body);
    const first = await maybeSentPart(h);
    const waiting = await eventually(() => replyJobDelayed(h, first.resendAfter.getTime()), "the reply job to wait until the part's deadline");

    // The customer writes again while the first reply waits for its status: the one reply job
    // still waits until the deadline, and nothing went out behind the new message.
    await h.deliver(textWebhook({ text: "and on holidays?" }).body);
    await inboundHandled(h, 2);
    expect(await delayedUntil(h.redis, h.queues.reply, waiting.id)).toBe(waiting.until);
    expect(await h.queues.reply.getJobCounts("waiting", "active", "prioritized", "delayed")).toEqual({ waiting: 0, active: 0, prioritized: 0, delayed: 1 });
    expect(h.graph.sentTexts).toEqual(["Reply #1"]);

    expect((await h.deliver(statusFor(first.id, "wamid.LATE1"))).statusCode).toBe(200);
    await eventually(() => h.graph.sends.length === 2, "the answer to the second message", 15_000);
    await repliesSettled(h);
    expect(h.graph.sentTexts).toEqual(["Reply #1", "Reply #2"]);
    expect(h.claude.requests).toHaveLength(2);
    const confirmed = await h.db.outboundMessage.findUniqueOrThrow({ where: { id: first.id } });
    expect(confirmed).toMatchObject({ sendState: "accepted", wamid: "wamid.LATE1" });
    expect(confirmed.acceptedAt!.getTime()).toBeLessThan(first.resendAfter.getTime()); // the scenario: its status came within its window
    expect(h.graph.sends[1]!.at).toBeGreaterThanOrEqual(confirmed.acceptedAt!.getTime()); // the second waited for the first to be confirmed
  });

  it("a 502 with an edge proxy's HTML page is maybe-sent: it waits for its status and is not sent again", async () => {
    const h = await harness({ env: FAST });
    h.graph.answerSends({ status: 502, html: PROXY_502_PAGE });
    await h.deliver(textWebhook({ text: "is the shop open?" }).body);
    const part = await maybeSentPart(h);
    await eventually(() => replyJobDelayed(h, part.resendAfter.getTime()), "the reply job to wait until the part's deadline");
    await h.deliver(statusFor(part.id, "wamid.BEHIND502"));
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply to be recorded sent", 15_000);
    await repliesSettled(h); // the waiting run has woken at the deadline and found the part confirmed
    expect(h.graph.sends).toHaveLength(1);
    const confirmed = await h.db.outboundMessage.findUniqueOrThrow({ where: { id: part.id } });
    expect(confirmed.acceptedAt!.getTime()).toBeLessThan(part.resendAfter.getTime()); // the scenario: its status came within its window
    expect(await h.db.deadLetter.count()).toBe(0);
  });

  it("with no status at all, the maybe-sent part goes out again only after its wait (law 5's window), as the same part", async () => {
    const h = await harness({ env: FAST });
    h.graph.answerSends({ status: 504 }); // an empty 5xx proves nothing either
    await h.deliver(textWebhook({ text: "hello?" }).body);
    const part = await maybeSentPart(h);
    // The deadline leaves room for the send's lease, its timeout, and then its status; it was set
    // after the part was made (Postgres keeps both to the millisecond, hence the 1 ms).
    expect(part.resendAfter.getTime() - part.createdAt.getTime()).toBeGreaterThanOrEqual(RESEND_AFTER_MS - 1);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the resend", 20_000);
    const [first, second] = h.graph.sends;
    expect(h.graph.sends).toHaveLength(2);
    expect(second!.at).toBeGreaterThanOrEqual(part.resendAfter.getTime()); // not while the deadline lay ahead
    expect(second!.body.biz_opaque_callback_data).toBe(first!.body.biz_opaque_callback_data); // one part, so a late status finds it
  });

  it("Graph's own error body proves Meta refused: the part is sent again at the next attempt, without waiting", async () => {
    const h = await harness({ env: { ...FAST, SEND_RECONCILE_WAIT_MS: "60000" } });
    h.graph.answerSends({ status: 500, body: graphError(131000, "Something went wrong") });
    await h.deliver(textWebhook({ text: "hello" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the retry", 10_000);
    expect(h.graph.sends).toHaveLength(2);
    const part = await h.db.outboundMessage.findFirstOrThrow();
    expect(part).toMatchObject({ sendState: "accepted", sendAttempt: 2 });
    // The first attempt's deadline lay at least 500 + 300 + 60 000 ms after the part was made;
    // the second attempt did not wait for it.
    expect(h.graph.sends[1]!.at).toBeLessThan(part.createdAt.getTime() + 500 + 300 + 60_000);
  });
});

describe("a waiting retry keeps its delay", () => {
  it("Meta's pair limit (≥ 6 s) is not cut short by the customer's next message", async () => {
    const h = await harness({ env: { REPLY_DEBOUNCE_MS: "50" } });
    h.graph.answerSends({ status: 400, body: graphError(131056, "(Business Account, Consumer Account) pair rate limit hit") });
    await h.deliver(textWebhook({ text: "first" }).body);
    await eventually(() => h.graph.sends.length === 1, "the refused send");
    const retry = await eventually(() => replyJobDelayed(h), "the retry to be scheduled");
    expect(retry.until - h.graph.sends[0]!.at).toBeGreaterThanOrEqual(6000); // scheduled by BullMQ after the refusal, 6 s on
    await h.deliver(textWebhook({ text: "second" }).body); // on the same conversation
    await inboundHandled(h, 2);
    expect(await delayedUntil(h.redis, h.queues.reply, retry.id)).toBe(retry.until); // not brought forward
    await eventually(() => h.graph.sends.length === 3, "both answers", 20_000);
    expect(h.graph.sends[1]!.at).toBeGreaterThanOrEqual(retry.until);
    expect(h.graph.sentTexts).toEqual(["Reply #1", "Reply #1", "Reply #2"]);
  });
});

describe("the Graph client tells refusal from ambiguity", () => {
  type Handler = (req: IncomingMessage, res: ServerResponse) => void;
  async function answering(handler: Handler): Promise<{ client: GraphClient; close: () => Promise<void> }> {
    const server = createServer(handler);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as { port: number };
    const client = new GraphClient({ baseUrl: `http://127.0.0.1:${port}`, version: "v24.0", accessToken: "t", timeoutMs: 300 });
    return {
      client,
      close: () =>
        new Promise((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }
  const send = (client: GraphClient) =>
    client.sendText({ phoneNumberId: "1", to: { phone: "2" }, text: "hi", bizOpaqueCallbackData: "p" }).then(
      () => undefined,
      (error: unknown) => error,
    );

  const page =
    (status: number, contentType: string, body: string): Handler =>
    (_req, res) => {
      res.writeHead(status, { "content-type": contentType });
      res.end(body);
    };
  it.each<[string, Handler, typeof RetryableError | typeof PermanentError]>([
    ["a timeout", () => undefined, RetryableError],
    ["a connection reset after the request", (req) => req.socket.destroy(), RetryableError],
    [
      "an answer that breaks off mid-body",
      (req, res) => {
        res.writeHead(200, { "content-type": "application/json", "content-length": "200" });
        res.write('{"messaging_product":"whatsapp","messages":[{"id":"wamid.');
        setTimeout(() => req.socket.destroy(), 20);
      },
      RetryableError,
    ],
    ["a 502 HTML page", page(502, "text/html", PROXY_502_PAGE), RetryableError],
    ["a 2xx whose body is not Graph's", page(200, "application/json", '{"ok"'), RetryableError],
    ["a 403 page from a firewall", page(403, "text/html", "<h1>Forbidden</h1>"), PermanentError],
  ])("%s is ambiguous", async (_what, handler, kind) => {
    const { client, close } = await answering(handler);
    try {
      const error = await send(client);
      expect(error).toBeInstanceOf(kind);
      expect((error as RetryableError).ambiguous).toBe(true);
    } finally {
      await close();
    }
  });

  it("Graph's error body and a connection refused are proof that nothing was sent", async () => {
    const { client, close } = await answering((_req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify(graphError(131000, "Something went wrong")));
    });
    try {
      const refused = await send(client);
      expect(refused).toMatchObject({ code: "131000", ambiguous: false });
    } finally {
      await close();
    }
    const nobody = new GraphClient({ baseUrl: `http://127.0.0.1:${await freePort()}`, version: "v24.0", accessToken: "t", timeoutMs: 300 });
    expect(await send(nobody)).toMatchObject({ code: "unreachable", ambiguous: false });
  });

  it.each<[string, Handler, Record<string, unknown>]>([
    [
      "a JSON answer that echoes our request",
      page(400, "application/json", JSON.stringify({ error: "bad request", request: { to: "447700900123", text: { body: "your order" } } })),
      { httpStatus: 400, contentType: "application/json", bodyShape: { error: "string", request: "object" } },
    ],
    [
      "an edge proxy's page",
      page(502, "text/html", PROXY_502_PAGE.replace("</body>", "<p>POST /v24.0/1/messages to=447700900123</p></body>")),
      { httpStatus: 502, contentType: "text/html", bodyExcerpt: "502 Bad Gateway" },
    ],
    [
      "a plain-text answer",
      page(503, "text/plain", "upstream reset while sending to +44 7700 900123"),
      { httpStatus: 503, contentType: "text/plain", bodyExcerpt: "upstream reset while sending to [number]" },
    ],
    [
      "Graph's own error, naming the number",
      page(400, "application/json", JSON.stringify(graphError(100, "Invalid parameter", "to: 447700900123 is not a valid WhatsApp user"))),
      { httpStatus: 400, message: "(#100) Invalid parameter", details: "to: [number] is not a valid WhatsApp user" },
    ],
  ])("%s keeps its shape for the dead letter, never the customer's number", async (_what, handler, detail) => {
    const { client, close } = await answering(handler);
    try {
      const error = (await send(client)) as RetryableError | PermanentError;
      expect(error.detail).toMatchObject(detail);
      expect(JSON.stringify(error.detail)).not.toContain("900123");
      expect(JSON.stringify(error.detail)).not.toContain("your order");
    } finally {
      await close();
    }
  });

  it("an answer's Retry-After sets the earliest retry, and a page's content type is kept for the dead letter", async () => {
    const { client, close } = await answering((_req, res) => {
      res.writeHead(503, { "Content-Type": "text/html; charset=utf-8", "Retry-After": "7" });
      res.end("<html>Service Unavailable</html>");
    });
    try {
      expect(await send(client)).toMatchObject({
        code: "http_503",
        ambiguous: true,
        minDelayMs: 7000,
        detail: { httpStatus: 503, contentType: "text/html; charset=utf-8" },
      });
    } finally {
      await close();
    }
  });
});
