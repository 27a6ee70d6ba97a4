import type { IncomingMessage, ServerResponse } from "node:http";
import { PROXY_502_PAGE } from "../../sim/meta/graph.ts";
import { graphError } from "../../sim/meta/wire.ts";
import { sendJson as json, LocalService } from "./local-server.ts";

// Shared with the simulated Meta (sim/meta/): one error body, one edge-proxy page.
export { graphError, PROXY_502_PAGE };

/**
 * A local stand-in for Meta's Graph API. Our real GraphClient talks to it over HTTP through
 * GRAPH_API_BASE_URL. Sends get scripted answers (default: accepted with a fresh wamid).
 */

export interface RecordedRequest {
  method: string;
  path: string;
  authorization: string | undefined;
  body: Record<string, unknown>;
  /** When it arrived (ms since the epoch). */
  at: number;
}

/**
 * How the fake answers a send. A send it answers with 200, however late (`delayMs` past the
 * client's timeout), Meta took; `html` is what an edge proxy says in Meta's place.
 */
export type ScriptedAnswer =
  | { status: number; body?: unknown; delayMs?: number; headers?: Record<string, string> }
  | { status: number; html: string; delayMs?: number }
  | { hang: true };

/** Media served a chunk every `everyMs`, without Content-Length unless `announceLength`, and without file_size. */
export interface SlowMedia {
  chunkBytes: number;
  everyMs: number;
  announceLength?: boolean;
  /**
   * Send the headers, then not one byte of the body until the client hangs up: a client that
   * waits for the body before deciding never decides (its own timeout ends it, with another error).
   */
  holdBody?: boolean;
}

export interface SlowDownload {
  id: string;
  bytesWritten: number;
  finished: boolean;
  /** The connection closed before the whole file was written. */
  closedByClient: boolean;
}

/** A template as Meta lists it (WHATSAPP.md §12). */
export interface ListedTemplate {
  name: string;
  language: string;
  category: string;
  status: string;
  components: { type: string; text?: string; format?: string }[];
}

/** Two approved templates and one still pending (never offered to staff). */
export const FAKE_TEMPLATES: readonly ListedTemplate[] = [
  {
    name: "order_update",
    language: "en_US",
    category: "UTILITY",
    status: "APPROVED",
    components: [
      { type: "HEADER", format: "TEXT", text: "Your order" },
      { type: "BODY", text: "Hello {{1}}, your order {{2}} is on its way." },
    ],
  },
  {
    name: "we_are_here",
    language: "en_US",
    category: "UTILITY",
    status: "APPROVED",
    components: [{ type: "BODY", text: "Hi {{1}}, we have an answer for you: reply to this message to read it." }],
  },
  { name: "summer_sale", language: "en_US", category: "MARKETING", status: "PENDING", components: [{ type: "BODY", text: "Everything half price, {{1}}!" }] },
];

export class FakeGraph extends LocalService {
  readonly requests: RecordedRequest[] = [];
  private readonly script: ScriptedAnswer[] = [];
  private counter = 0;
  /** Read receipts answer 500 while set: they are best effort and must never block a reply. */
  failReadReceipts = false;
  /** While set, read receipts are answered only once it resolves: a slow Graph API. */
  readReceiptsWait: Promise<void> | undefined;
  /** Customers' media by id, served by the two-step download of WHATSAPP.md §8. */
  readonly media = new Map<string, { mimeType: string; bytes: Buffer; slowly?: SlowMedia }>();
  /** How each download of media served `slowly` went. */
  readonly slowDownloads: SlowDownload[] = [];

  /** Queue answers for the next text sends, in order; afterwards sends succeed again. */
  answerSends(...answers: ScriptedAnswer[]): void {
    this.script.push(...answers);
  }

  /** The business account's templates, served by GET /{version}/{waba}/message_templates, this many a page. */
  templates: ListedTemplate[] = [...FAKE_TEMPLATES];
  templatePageSize = 2;
  /** How many pages of templates were asked for. */
  templateListRequests = 0;

  /** Template messages we sent, with their components. */
  get templateSends(): RecordedRequest[] {
    return this.requests.filter((r) => r.body.type === "template");
  }

  /** Interactive messages we sent (a CSAT ask's reply buttons). */
  get interactiveSends(): RecordedRequest[] {
    return this.requests.filter((r) => r.body.type === "interactive");
  }

  /** Text messages we sent (not read receipts). */
  get sends(): RecordedRequest[] {
    return this.requests.filter((r) => r.body.type === "text");
  }

  get sentTexts(): string[] {
    return this.sends.map((r) => (r.body.text as { body: string }).body);
  }

  get readReceipts(): RecordedRequest[] {
    return this.requests.filter((r) => r.body.status === "read");
  }

  private serveMedia(req: IncomingMessage, res: ServerResponse): void {
    const path = req.url ?? "";
    this.requests.push({ method: "GET", path, authorization: req.headers.authorization, body: {}, at: Date.now() });
    if (req.headers.authorization !== "Bearer test-access-token") {
      json(res, 401, graphError(190, "Invalid OAuth access token"));
      return;
    }
    const download = /^\/download\/(.+)$/.exec(path);
    const id = decodeURIComponent(download?.[1] ?? path.split("/").pop() ?? "");
    const media = this.media.get(id);
    if (!media) {
      json(res, 400, graphError(100, "Invalid parameter", "media id not found or expired"));
      return;
    }
    if (download && media.slowly) {
      this.trickle(res, id, media.bytes, media.mimeType, media.slowly);
      return;
    }
    if (download) {
      res.writeHead(200, { "content-type": media.mimeType });
      res.end(media.bytes);
      return;
    }
    json(res, 200, {
      messaging_product: "whatsapp",
      url: `${this.url}/download/${encodeURIComponent(id)}`,
      mime_type: media.mimeType,
      sha256: "0".repeat(64),
      // Meta has sent it as a string too; slow media leaves it out, as Meta may.
      ...(media.slowly ? {} : { file_size: String(media.bytes.length) }),
      id,
    });
  }

  /** Writes the file a chunk at a time, noting how far it got before the client hung up. */
  private trickle(res: ServerResponse, id: string, bytes: Buffer, mimeType: string, slowly: SlowMedia): void {
    const download: SlowDownload = { id, bytesWritten: 0, finished: false, closedByClient: false };
    this.slowDownloads.push(download);
    res.writeHead(200, { "content-type": mimeType, ...(slowly.announceLength ? { "content-length": String(bytes.length) } : {}) });
    res.flushHeaders();
    const timer = slowly.holdBody
      ? undefined
      : setInterval(() => {
          if (download.bytesWritten >= bytes.length) {
            clearInterval(timer);
            download.finished = true;
            res.end();
            return;
          }
          const chunk = bytes.subarray(download.bytesWritten, download.bytesWritten + slowly.chunkBytes);
          res.write(chunk);
          download.bytesWritten += chunk.length;
        }, slowly.everyMs);
    res.once("close", () => {
      clearInterval(timer);
      if (!download.finished) download.closedByClient = true;
    });
  }

  /** Meta's list of templates, paged by an `after` cursor with a `paging.next` link while more follow. */
  private serveTemplates(req: IncomingMessage, res: ServerResponse, url: URL): void {
    this.templateListRequests++;
    this.requests.push({ method: "GET", path: req.url ?? "", authorization: req.headers.authorization, body: {}, at: Date.now() });
    if (req.headers.authorization !== "Bearer test-access-token") {
      json(res, 401, graphError(190, "Invalid OAuth access token"));
      return;
    }
    const from = Number(url.searchParams.get("after") ?? "0");
    const page = this.templates.slice(from, from + this.templatePageSize);
    const next = from + page.length;
    const more = next < this.templates.length;
    json(res, 200, {
      data: page,
      paging: { cursors: { before: String(from), after: String(next) }, ...(more ? { next: `${this.url}${url.pathname}?after=${next}` } : {}) },
    });
  }

  protected async handle(req: IncomingMessage, raw: Buffer, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://fake");
    if (req.method === "GET" && /^\/v\d+\.\d+\/\d+\/message_templates$/.test(url.pathname)) return this.serveTemplates(req, res, url);
    if (req.method === "GET") return this.serveMedia(req, res);
    const text = raw.toString("utf8");
    const body = (text ? JSON.parse(text) : {}) as Record<string, unknown>;
    this.requests.push({ method: req.method ?? "", path: req.url ?? "", authorization: req.headers.authorization, body, at: Date.now() });

    if (body.status === "read") {
      await this.readReceiptsWait;
      return this.failReadReceipts ? json(res, 500, graphError(131000, "Something went wrong")) : json(res, 200, { success: true });
    }
    const answer = this.script.shift();
    if (answer && "hang" in answer) return; // never answers: the client's timeout fires
    if (answer?.delayMs) await new Promise((r) => setTimeout(r, answer.delayMs));
    if (answer && "html" in answer) {
      res.writeHead(answer.status, { "content-type": "text/html" });
      res.end(answer.html);
      return;
    }
    if (answer && answer.status !== 200) {
      json(res, answer.status, answer.body, answer.headers);
      return;
    }
    const wamid = `wamid.OUT${++this.counter}`;
    return json(
      res,
      200,
      answer?.body ?? {
        messaging_product: "whatsapp",
        contacts: [{ input: body.to, wa_id: body.to }],
        messages: [{ id: wamid }],
      },
    );
  }
}
