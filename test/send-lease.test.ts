import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { MAIN_JS } from "./support/build.ts";
import { eventually, type Harness } from "./support/harness.ts";
import { harnessPerTest } from "./support/per-test.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Law 5: a part is sent only by the run that marked it `sending`, and only promptly after (the
 * send lease): past it, another worker may have counted the part maybe-sent and be waiting out
 * its `resend_after`, or have sent it again. The lease is checked as the request's body is
 * written, once the connection (TLS included) is up, not before connecting: a handshake that
 * takes longer than the lease (a slow network, a freeze while connecting) sends nothing.
 *
 * Meta is reached over TLS here: a front for the fake Graph API whose first connection
 * completes its handshake only after the lease has lapsed. The worker is a process of its own,
 * trusting the front's certificate the way Node is told to (NODE_EXTRA_CA_CERTS).
 */

const harness = harnessPerTest();
let worker: ChildProcess | undefined;
let front: Server | undefined;
afterEach(async () => {
  worker?.kill("SIGKILL");
  worker = undefined;
  await new Promise<void>((resolve) => (front ? front.close(() => resolve()) : resolve()));
  front = undefined;
});

/** A self-signed certificate for 127.0.0.1, made by openssl for this test alone. */
function certificate(): { key: Buffer; cert: Buffer; certPath: string } {
  const dir = mkdtempSync(join(tmpdir(), "graph-tls-"));
  const [keyPath, certPath] = [join(dir, "key.pem"), join(dir, "cert.pem")];
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      keyPath,
      "-out",
      certPath,
      "-days",
      "1",
      "-subj",
      "/CN=127.0.0.1",
      "-addext",
      "subjectAltName=IP:127.0.0.1",
    ],
    { stdio: "ignore" },
  );
  return { key: readFileSync(keyPath), cert: readFileSync(certPath), certPath };
}

/**
 * An HTTPS front for the fake Graph API at `upstream`: each connection's TLS handshake starts
 * only after `handshakeDelayMs(n)` (n: its number, from 0).
 */
async function tlsFront(upstream: string, tlsFiles: { key: Buffer; cert: Buffer }, handshakeDelayMs: (n: number) => number) {
  const https = createHttpsServer(tlsFiles, async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const answer = await request(`${upstream}${req.url}`, {
      method: req.method as "GET" | "POST",
      headers: { "content-type": req.headers["content-type"] ?? "application/json", authorization: req.headers.authorization ?? "" },
      ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
    });
    res.writeHead(answer.statusCode, { "content-type": String(answer.headers["content-type"] ?? "application/json") });
    res.end(Buffer.from(await answer.body.arrayBuffer()));
  });
  let count = 0;
  const server = createServer((socket) => {
    const n = count++;
    socket.pause();
    setTimeout(() => {
      https.emit("connection", socket);
      socket.resume();
    }, handshakeDelayMs(n));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return { server, url: `https://127.0.0.1:${address.port}` };
}

function startWorker(h: Harness, env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, [MAIN_JS, "worker"], {
    env: { ...process.env, ...h.env, ...env, LOG_LEVEL: "silent" },
    stdio: "ignore",
  });
}

describe("the send lease is checked when the request is written, not before connecting", () => {
  it("a connection whose TLS handshake outlasts the lease carries no send: the part goes out once, on the next attempt", async () => {
    // JOB_LOCK_MS 1000: a send lease of 500 ms. The first two connections (the read receipt's,
    // and the first send's, opened while the first still shakes hands) take 2 s to come up.
    const h = await harness({ workers: 0, env: { JOB_LOCK_MS: "1000", REPLY_DEBOUNCE_MS: "0", GRAPH_TIMEOUT_MS: "5000", RETRY_BASE_DELAY_MS: "20" } });
    const tls = certificate();
    const graph = await tlsFront(h.graph.url, tls, (n) => (n < 2 ? 2000 : 0));
    front = graph.server;
    worker = startWorker(h, { GRAPH_API_BASE_URL: graph.url, NODE_EXTRA_CA_CERTS: tls.certPath });

    await h.deliver(textWebhook({ text: "can I return the shoes?" }).body);
    await eventually(async () => (await h.db.reply.count({ where: { state: "sent" } })) === 1, "the reply", 60_000);

    expect(h.graph.sends).toHaveLength(1);
    // Marked sending twice: the first attempt, on a connection that came up past its lease, wrote nothing.
    expect(await h.db.outboundMessage.findFirstOrThrow()).toMatchObject({ sendAttempt: 2, sendState: "accepted" });
  }, 90_000);
});
