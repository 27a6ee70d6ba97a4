import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PermanentError } from "../src/errors.ts";
import { GraphClient } from "../src/whatsapp/graph-client.ts";
import { FakeGraph } from "./support/fake-graph.ts";
import { eventually } from "./support/harness.ts";

/** Issue 7 (10.3): a download stops at MEDIA_MAX_BYTES while it streams, not after it has all been read. */

/**
 * Longer than any test here may run: the client's own timeout must never be what closes a
 * download, or "the client hung up" would pass for a client that never decided to.
 */
const CLIENT_TIMEOUT_MS = 120_000;

let graph: FakeGraph;
let client: GraphClient;
beforeAll(async () => {
  graph = await new FakeGraph().start();
  client = new GraphClient({ baseUrl: graph.url, version: "v24.0", accessToken: "test-access-token", timeoutMs: CLIENT_TIMEOUT_MS });
});
afterAll(async () => graph?.stop());

const KiB = 1024;

async function refusal(mediaId: string, maxBytes: number): Promise<PermanentError> {
  const error: unknown = await client.downloadMedia(mediaId, maxBytes).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PermanentError);
  expect(error).toMatchObject({ code: "media_too_large" });
  return error as PermanentError;
}

describe("downloading a customer's media", () => {
  it("with no size given, it stops reading and hangs up as soon as the file passes the limit", async () => {
    const size = 1024 * KiB;
    graph.media.set("1001", { mimeType: "image/jpeg", bytes: randomBytes(size), slowly: { chunkBytes: 16 * KiB, everyMs: 5 } });
    const error = await refusal("1001", 64 * KiB);
    expect(error.reason).toMatch(/65536/);
    const download = await eventually(() => graph.slowDownloads.find((d) => d.id === "1001" && d.closedByClient), "the server to see the client hang up");
    expect(download.finished).toBe(false);
    expect(download.bytesWritten).toBeLessThan(size / 2);
  });

  it("refuses on Content-Length alone, before any of the body has arrived, and hangs up", async () => {
    const size = 256 * KiB;
    // The fake sends the headers and holds the body back: only a client that decides from
    // Content-Length refuses at all; one that waits for the body waits past the test's timeout.
    graph.media.set("1002", {
      mimeType: "application/pdf",
      bytes: randomBytes(size),
      slowly: { chunkBytes: 16 * KiB, everyMs: 50, announceLength: true, holdBody: true },
    });
    const error = await refusal("1002", 64 * KiB);
    expect(error.reason).toBe(`The file is ${size} bytes; the limit is ${64 * KiB}`);
    await eventually(() => graph.slowDownloads.find((d) => d.id === "1002" && d.closedByClient), "the server to see the client hang up");
  });

  it("a file within the limit arrives whole, with or without Content-Length", async () => {
    const bytes = randomBytes(100 * KiB);
    graph.media.set("1003", { mimeType: "image/png", bytes, slowly: { chunkBytes: 8 * KiB, everyMs: 1 } });
    graph.media.set("1004", { mimeType: "image/png", bytes, slowly: { chunkBytes: 8 * KiB, everyMs: 1, announceLength: true } });
    for (const id of ["1003", "1004"]) {
      const media = await client.downloadMedia(id, 100 * KiB);
      expect(media.mimeType).toBe("image/png");
      expect(media.data.equals(bytes)).toBe(true);
    }
  });
});
