import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../src/logger.ts";
import { inboundJobId } from "../src/queue/catalog.ts";
import { signMetaBody } from "../src/webhook/signature.ts";
import { deliverOverHttp } from "./support/entry-point.ts";
import { eventually, type Harness, startHarness, TEST_APP_SECRET } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 11 on the wire: the web's port faces the internet, and a client that sends its request
 * slowly holds a connection, and up to 4 MB of buffered body, before any signature is checked.
 * A real listening server (its clocks short for the test), raw sockets that trickle, and
 * Meta's deliveries on other connections meanwhile. Web only: what the webhook enqueues stays
 * in the queue to be looked for.
 */

const REQUEST_TIMEOUT_MS = 1000;
const KEEP_ALIVE_TIMEOUT_MS = 1000;
/** How long a test waits for a connection to be closed: the clock, the server's sweep, and room for a loaded machine. */
const CLOSED_WITHIN_MS = 8000;

const { destination: sink, parsed } = logLines();
const logged = () => parsed() as { level: number; event?: string }[];

let h: Harness;
let port: number;
let base: string;
beforeAll(async () => {
  h = await startHarness({
    workers: 0,
    env: { HTTP_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS), HTTP_KEEP_ALIVE_TIMEOUT_MS: String(KEEP_ALIVE_TIMEOUT_MS) },
    logger: createLogger({ level: "info", destination: sink }),
  });
  base = await h.app.listen({ port: 0, host: "127.0.0.1" });
  port = Number(new URL(base).port);
});
afterAll(async () => h?.close());

interface Connection {
  socket: Socket;
  /** What the server wrote back. */
  readonly answer: string;
  /** Settles once the connection is made. */
  connected: Promise<void>;
  /** Settles when the connection is closed, by either side. */
  closed: Promise<void>;
}

function open(): Connection {
  const socket = connect(port, "127.0.0.1");
  let answer = "";
  socket.on("data", (chunk: Buffer) => (answer += chunk.toString("latin1")));
  socket.on("error", () => undefined); // a reset by the server is one of the ways it closes
  const connected = new Promise<void>((resolve) => socket.once("connect", () => resolve()));
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  return {
    socket,
    connected,
    get answer() {
      return answer;
    },
    closed,
  };
}

/** Writes `bytes` one at a time, every `everyMs`, until they run out or the connection closes. */
function dribble(connection: Connection, bytes: string, everyMs = 250): void {
  let next = 0;
  const timer = setInterval(() => {
    if (next >= bytes.length || connection.socket.destroyed) return clearInterval(timer);
    connection.socket.write(bytes[next++]!);
  }, everyMs);
  void connection.closed.then(() => clearInterval(timer));
}

/**
 * A signed delivery of a large message (its Content-Length is over 1 MB) whose headers go at
 * once and whose body comes a byte at a time: it would take days to arrive.
 */
function tricklingDelivery(): { connection: Connection; wamid: string } {
  const { body, wamids } = textWebhook({ text: "x".repeat(1024 * 1024) });
  const connection = open();
  connection.socket.write(
    [
      "POST /webhook HTTP/1.1",
      "Host: 127.0.0.1",
      "Content-Type: application/json",
      `Content-Length: ${Buffer.byteLength(body)}`,
      `X-Hub-Signature-256: ${signMetaBody(body, TEST_APP_SECRET)}`,
      "",
      "",
    ].join("\r\n"),
  );
  dribble(connection, body.slice(0, 200));
  return { connection, wamid: wamids[0]! };
}

/** Resolves when `promise` does; fails naming `what` after `ms`. */
async function within(promise: Promise<unknown>, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  try {
    await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Its inbound job, or the claim that would come with it (law 3). */
async function queued(wamid: string): Promise<boolean> {
  const job = await h.queues.inbound.getJob(inboundJobId(wamid));
  const claim = await h.redis.exists(`${h.prefix}:inbound:de:${inboundJobId(wamid)}`);
  return job !== undefined || claim === 1;
}

describe("a request that arrives too slowly (HTTP_REQUEST_TIMEOUT_MS)", () => {
  it("is cut off, its connection closed, and nothing of it enqueued, while a delivery on another connection is answered 200", async () => {
    const slow = tricklingDelivery();
    const meanwhile = textWebhook({ text: "are you open today?" });
    expect((await deliverOverHttp(base, meanwhile.body)).status).toBe(200);
    await within(slow.connection.closed, CLOSED_WITHIN_MS, "the trickling connection");

    expect(slow.connection.answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(await queued(meanwhile.wamids[0]!)).toBe(true);
    expect(await queued(slow.wamid)).toBe(false);
    // Said for what it is: not a malformed request, not a server error.
    await eventually(() => logged().some((line) => line.event === "http.request_cut_off"), "the cut-off request's log line");
    expect(logged().filter((line) => line.level >= 50 || line.event === "http.client_error")).toEqual([]);
  });

  it("many at once do not stop a delivery, and every one of them is closed", async () => {
    const slow = Array.from({ length: 50 }, () => tricklingDelivery());
    await within(Promise.all(slow.map((s) => s.connection.connected)), CLOSED_WITHIN_MS, "the trickling connections to open");
    const meanwhile = textWebhook({ text: "hello?" });
    expect((await deliverOverHttp(base, meanwhile.body)).status).toBe(200);
    await within(Promise.all(slow.map((s) => s.connection.closed)), CLOSED_WITHIN_MS, "the trickling connections");

    expect(await queued(meanwhile.wamids[0]!)).toBe(true);
    for (const s of slow) expect(await queued(s.wamid)).toBe(false);
  });
});

describe("connections that send no request", () => {
  it("one that sends nothing, and one that sends its headers a byte at a time, are closed", async () => {
    const silent = open();
    const slowHeaders = open();
    dribble(slowHeaders, "POST /webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n");
    await within(Promise.all([silent.closed, slowHeaders.closed]), CLOSED_WITHIN_MS, "the connections without a request");
  });

  it("an idle keep-alive connection is closed after HTTP_KEEP_ALIVE_TIMEOUT_MS", async () => {
    const idle = open();
    idle.socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    await within(new Promise<void>((resolve) => idle.socket.on("data", () => resolve())), CLOSED_WITHIN_MS, "the answer");
    expect(idle.answer).toMatch(/^HTTP\/1\.1 200 /);
    await within(idle.closed, CLOSED_WITHIN_MS, "the idle keep-alive connection");
  });
});
