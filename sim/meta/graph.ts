import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { LocalService, sendJson } from "../local-server.ts";
import { envelope, graphError, messagesChange, metaWire } from "./wire.ts";

/**
 * Meta's Graph API as the system reaches it through GRAPH_API_BASE_URL, playing by Meta's
 * rules (WHATSAPP.md §5, §6, §8): sends (`to` a phone or `recipient` a BSUID, at most 4096
 * characters, quoting with `context`), read receipts with the typing indicator, the two-step
 * media download, the business account's approved templates (`GET /{waba}/message_templates`,
 * DEMO_TEMPLATES), Graph's error bodies. It records every send Meta TOOK (the customer got
 * it, whatever the HTTP answer said) and, after each, has the status webhooks delivered
 * (`sent`, `delivered`, …), each carrying the send's biz_opaque_callback_data.
 *
 * A process may be given its own base path (`/w1`, `/web`, …), so a request says which
 * process made it: that is how a chaos scenario finds the worker that is mid-send.
 */

/** The demo shop's business account (WHATSAPP_BUSINESS_ACCOUNT_ID in the demo's environment). */
export const DEMO_BUSINESS_ACCOUNT_ID = "100000000000042";

/** The demo shop's approved templates, as Meta lists them: what staff may send past the 24-hour window. */
export const DEMO_TEMPLATES = [
  {
    name: "order_update",
    language: "en_US",
    category: "UTILITY",
    status: "APPROVED",
    components: [{ type: "BODY", text: "Hello {{1}}, your order {{2}} is on its way." }],
  },
  {
    name: "we_are_here",
    language: "en_US",
    category: "UTILITY",
    status: "APPROVED",
    components: [{ type: "BODY", text: "Hi {{1}}, we have an answer for you: reply to this message to read it." }],
  },
] as const;

/** An edge proxy's error page, as a 502 or 504 from in front of Graph looks. */
export const PROXY_502_PAGE = "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>";

/** How Meta treats one send; none is a normal, prompt 200. */
export type SendFault =
  /** Takes the message but answers only after the client has given up (GRAPH_TIMEOUT_MS). */
  | { kind: "late"; answerAfterMs: number; statusAfterMs: number }
  /** Takes the message, then an edge proxy answers 502 with its HTML error page. */
  | { kind: "html502"; statusAfterMs: number }
  /** Takes the message and answers 200, slowly: time to catch a process in the middle of a send. */
  | { kind: "slow"; answerAfterMs: number; statusAfterMs: number }
  /** Never answers, and never takes the message. */
  | { kind: "hang" }
  /** Refuses with Graph's error body (WHATSAPP.md §6): the message was not taken. */
  | { kind: "refuse"; httpStatus: number; code: number; title: string; details?: string };

export interface SendRequest {
  /** The base path of the process that sent it ("w1", "web", …; "" without one). */
  via: string;
  phoneNumberId: string;
  /** The address: a phone number (`to`) or, for a customer known only by it, a BSUID (`recipient`). */
  to: string;
  addressedBy: "phone" | "bsuid";
  /** A text message's body (undefined for a template). */
  text: string | undefined;
  template: string | undefined;
  /** `context.message_id`: the message this one quotes. */
  replyTo: string | undefined;
  /** Our part id, as biz_opaque_callback_data carried it. */
  partId: string | undefined;
  /** How many sends to this customer arrived before this one. */
  nthToRecipient: number;
}

export interface TakenSend extends SendRequest {
  at: number;
  wamid: string;
  fault: SendFault["kind"] | undefined;
}

export type StatusName = "sent" | "delivered" | "read";

/** When each status webhook of a send Meta took goes out, counted from the moment it took it. */
export type StatusSchedule = (send: TakenSend, fault: SendFault | undefined) => { status: StatusName; afterMs: number }[];

const STATUS_AFTER_MS = 300;
const DELIVERED_AFTER_SENT_MS = 400;

/** `sent`, then `delivered` (a fault may say when `sent` comes); no `read`: nobody reads a chaos customer's phone. */
export const SENT_THEN_DELIVERED: StatusSchedule = (_send, fault) => {
  const sentAfterMs = fault && "statusAfterMs" in fault ? fault.statusAfterMs : STATUS_AFTER_MS;
  return [
    { status: "sent", afterMs: sentAfterMs },
    { status: "delivered", afterMs: sentAfterMs + DELIVERED_AFTER_SENT_MS },
  ];
};

/** Hands a status webhook body to Meta's webhook deliverer, to go out `afterMs` from now. */
export type DeliverStatus = (body: string, afterMs: number, about: { send: TakenSend; status: StatusName }) => void;

/** What the Graph API was asked and what it answered, for whoever shows what happened. */
export type GraphEvent =
  | {
      kind: "send";
      request: SendRequest;
      /** The HTTP status answered; "none" when Meta never answers; "gave_up" when the client left before the answer. */
      answer: number | "none" | "gave_up";
      /** Set when Meta took the message. */
      wamid?: string;
      code?: number;
      fault?: SendFault["kind"];
    }
  | { kind: "mark_read"; wamid: string; typing: boolean; answer: number }
  | { kind: "media"; id: string; answer: number }
  | { kind: "refused"; path: string; answer: number; code: number; reason: string };

/** A customer's file, as Meta keeps it for the media download (WHATSAPP.md §8). */
export interface StoredMedia {
  mimeType: string;
  bytes: Buffer;
}

/** Meta's limit on a text body, in UTF-16 units (WHATSAPP.md §5). */
const TEXT_LIMIT = 4096;

export class MetaGraph extends LocalService {
  readonly taken: TakenSend[] = [];
  markReads = 0;
  /** When the last request of any kind arrived. */
  lastRequestAt = 0;
  /** Decides each send's fault; by default every send is a prompt 200. */
  plan: (send: SendRequest) => SendFault | undefined = () => undefined;
  /** Which status webhooks follow a send Meta took, and when. */
  statuses: StatusSchedule = SENT_THEN_DELIVERED;
  /** Whether a read receipt names a message Meta knows (else 131009); by default any. */
  knowsMessage: (wamid: string) => boolean = () => true;
  /** Customers' media by id, served by the two-step download. */
  readonly media = new Map<string, StoredMedia>();
  /** `display_phone_number` of each business number, for the webhooks' metadata. */
  readonly displayNumbers = new Map<string, string>();
  private readonly perRecipient = new Map<string, number>();
  private readonly inFlight = new Map<string, number>();
  private readonly takenListeners = new Set<(send: TakenSend) => void>();
  private readonly eventListeners = new Set<(event: GraphEvent) => void>();
  private counter = 0;

  constructor(
    private readonly deliverStatus: DeliverStatus,
    private readonly accessToken: string,
    options: { onError?: (error: unknown) => void } = {},
  ) {
    super(options.onError);
  }

  /** Forgets the sends taken so far (after a warm-up). */
  clearRecord(): void {
    this.taken.length = 0;
    this.markReads = 0;
  }

  /** Sends from process `via` that Meta has not answered yet. */
  sendsInFlight(via: string): number {
    return this.inFlight.get(via) ?? 0;
  }

  /** Called for every send Meta takes, as it takes it. */
  onTaken(listener: (send: TakenSend) => void): () => void {
    this.takenListeners.add(listener);
    return () => this.takenListeners.delete(listener);
  }

  /** Called for every request once it is answered (or will never be). */
  onEvent(listener: (event: GraphEvent) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  private emit(event: GraphEvent): void {
    for (const listener of this.eventListeners) listener(event);
  }

  private refuse(res: ServerResponse, path: string, answer: number, code: number, reason: string): void {
    this.emit({ kind: "refused", path, answer, code, reason });
    sendJson(res, answer, graphError(code, reason));
  }

  protected async handle(req: IncomingMessage, raw: Buffer, res: ServerResponse): Promise<void> {
    this.lastRequestAt = Date.now();
    const path = (req.url ?? "").split("?")[0]!;
    if (req.headers.authorization !== `Bearer ${this.accessToken}`) return this.refuse(res, path, 401, 190, "Invalid OAuth access token");
    const send = /^(?:\/([\w-]+))?\/v\d+\.\d+\/(\d+)\/messages$/.exec(path);
    if (req.method === "POST" && send) return this.handleMessages(send[1] ?? "", send[2]!, raw, res);
    const templates = /^(?:\/[\w-]+)?\/v\d+\.\d+\/(\d+)\/message_templates$/.exec(path);
    if (req.method === "GET" && templates) {
      if (templates[1] !== DEMO_BUSINESS_ACCOUNT_ID) return this.refuse(res, path, 400, 100, "Unsupported get request: no such business account");
      return sendJson(res, 200, { data: DEMO_TEMPLATES, paging: { cursors: { before: "0", after: String(DEMO_TEMPLATES.length) } } });
    }
    const download = /^(?:\/[\w-]+)?\/media-download\/([^/]+)$/.exec(path);
    if (req.method === "GET" && download) return this.download(decodeURIComponent(download[1]!), res);
    const info = /^(?:\/([\w-]+))?\/v\d+\.\d+\/([^/]+)$/.exec(path);
    if (req.method === "GET" && info) return this.mediaInfo(info[1] ?? "", decodeURIComponent(info[2]!), res);
    return this.refuse(res, path, 404, 100, "Unknown path components");
  }

  private async handleMessages(via: string, phoneNumberId: string, raw: Buffer, res: ServerResponse): Promise<void> {
    const path = `${phoneNumberId}/messages`;
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
    } catch {
      return this.refuse(res, path, 400, 100, "Invalid parameter");
    }
    if (body.messaging_product !== "whatsapp") return this.refuse(res, path, 400, 100, "Param messaging_product must be whatsapp");
    if (body.status === "read") return this.markRead(body, res);

    // `to` wins when both are given (WHATSAPP.md §9).
    const to = typeof body.to === "string" ? body.to : typeof body.recipient === "string" ? body.recipient : undefined;
    if (!to) return this.refuse(res, path, 400, 100, "The parameter to is required");
    const text = (body.text as { body?: unknown } | undefined)?.body;
    const template = (body.template as { name?: unknown } | undefined)?.name;
    if (body.type === "text" && (typeof text !== "string" || text.length === 0)) return this.refuse(res, path, 400, 100, "Param text['body'] is required");
    if (typeof text === "string" && text.length > TEXT_LIMIT) {
      return this.refuse(res, path, 400, 100, `Param text['body'] must be at most ${TEXT_LIMIT} characters long`);
    }
    if (body.type !== "text" && body.type !== "template") return this.refuse(res, path, 400, 100, `Param type "${String(body.type)}" is not simulated`);

    const nthToRecipient = this.perRecipient.get(to) ?? 0;
    this.perRecipient.set(to, nthToRecipient + 1);
    const replyTo = (body.context as { message_id?: unknown } | undefined)?.message_id;
    const request: SendRequest = {
      via,
      phoneNumberId,
      to,
      addressedBy: typeof body.to === "string" ? "phone" : "bsuid",
      text: typeof text === "string" ? text : undefined,
      template: typeof template === "string" ? template : undefined,
      replyTo: typeof replyTo === "string" ? replyTo : undefined,
      partId: typeof body.biz_opaque_callback_data === "string" ? body.biz_opaque_callback_data : undefined,
      nthToRecipient,
    };
    const fault = this.plan(request);
    if (fault?.kind === "hang") {
      this.emit({ kind: "send", request, answer: "none", fault: "hang" }); // the client's timeout fires; nothing was taken
      return;
    }
    if (fault?.kind === "refuse") {
      this.emit({ kind: "send", request, answer: fault.httpStatus, code: fault.code, fault: "refuse" });
      return sendJson(res, fault.httpStatus, graphError(fault.code, fault.title, fault.details));
    }

    const taken: TakenSend = { ...request, at: Date.now(), wamid: `wamid.SIM${Date.now().toString(36)}x${++this.counter}`, fault: fault?.kind };
    this.taken.push(taken);
    for (const listener of this.takenListeners) listener(taken);
    for (const { status, afterMs } of this.statuses(taken, fault)) this.deliverStatus(this.statusBody(taken, status), afterMs, { send: taken, status });

    const answerAfterMs = fault?.kind === "late" || fault?.kind === "slow" ? fault.answerAfterMs : 0;
    this.inFlight.set(via, this.sendsInFlight(via) + 1);
    try {
      if (answerAfterMs > 0) await new Promise((resolve) => setTimeout(resolve, answerAfterMs));
    } finally {
      this.inFlight.set(via, this.sendsInFlight(via) - 1);
    }
    const event = { kind: "send", request, wamid: taken.wamid, fault: fault?.kind } as const;
    if (res.destroyed || !res.socket || res.socket.destroyed) {
      this.emit({ ...event, answer: "gave_up" }); // the client gave up (a timeout) or died
      return;
    }
    if (fault?.kind === "html502") {
      this.emit({ ...event, answer: 502 });
      res.writeHead(502, { "content-type": "text/html; charset=utf-8" });
      res.end(PROXY_502_PAGE);
      return;
    }
    this.emit({ ...event, answer: 200 });
    const contact = request.addressedBy === "phone" ? { input: to, wa_id: to } : { input: to, user_id: to };
    sendJson(res, 200, { messaging_product: "whatsapp", contacts: [contact], messages: [{ id: taken.wamid }] });
  }

  /** Mark as read, with or without "typing…" (WHATSAPP.md §5). */
  private markRead(body: Record<string, unknown>, res: ServerResponse): void {
    const wamid = typeof body.message_id === "string" ? body.message_id : "";
    const typing = (body.typing_indicator as { type?: unknown } | undefined)?.type === "text";
    if (!wamid || !this.knowsMessage(wamid)) {
      this.emit({ kind: "mark_read", wamid, typing, answer: 400 });
      sendJson(res, 400, graphError(131009, "Parameter value is not valid", "message_id is not a message received by this number"));
      return;
    }
    this.markReads++;
    this.emit({ kind: "mark_read", wamid, typing, answer: 200 });
    sendJson(res, 200, { success: true });
  }

  /** Step 1 of a download: the media's metadata and a short-lived URL. */
  private mediaInfo(via: string, id: string, res: ServerResponse): void {
    const media = this.media.get(id);
    this.emit({ kind: "media", id, answer: media ? 200 : 400 });
    if (!media) {
      sendJson(res, 400, graphError(100, "Invalid parameter", "media id not found or expired"));
      return;
    }
    sendJson(res, 200, {
      messaging_product: "whatsapp",
      url: `${this.url}${via ? `/${via}` : ""}/media-download/${encodeURIComponent(id)}`,
      mime_type: media.mimeType,
      sha256: createHash("sha256").update(media.bytes).digest("hex"),
      file_size: media.bytes.length,
      id,
    });
  }

  /** Step 2: the bytes, for the same bearer token. */
  private download(id: string, res: ServerResponse): void {
    const media = this.media.get(id);
    if (!media) {
      sendJson(res, 404, graphError(100, "Invalid parameter", "media URL expired"));
      return;
    }
    res.writeHead(200, { "content-type": media.mimeType, "content-length": String(media.bytes.length) });
    res.end(media.bytes);
  }

  /** A status webhook as Meta sends it for this send (WHATSAPP.md §3 statuses, §9 BSUIDs). */
  private statusBody(send: TakenSend, status: StatusName): string {
    const number = { phoneNumberId: send.phoneNumberId, displayPhoneNumber: this.displayNumbers.get(send.phoneNumberId) ?? send.phoneNumberId };
    return metaWire(
      envelope([
        messagesChange(number, {
          statuses: [
            {
              id: send.wamid,
              status,
              timestamp: String(Math.floor(Date.now() / 1000)),
              ...(send.addressedBy === "phone" ? { recipient_id: send.to } : { recipient_user_id: send.to }),
              ...(send.partId ? { biz_opaque_callback_data: send.partId } : {}),
              // On sent and on one of delivered/read (WHATSAPP.md §3); a service reply is billed since October 2026 (§12).
              ...(status === "sent" || status === "delivered" ? { pricing: { pricing_model: "PMP", type: "regular", category: "service" } } : {}),
            },
          ],
        }),
      ]),
    );
  }
}
