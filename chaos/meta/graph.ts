import type { IncomingMessage, ServerResponse } from "node:http";
import { graphError, PROXY_502_PAGE } from "../../test/support/fake-graph.ts";
import { LocalServer, sendJson } from "../../test/support/local-server.ts";
import { statusWebhook } from "../../test/support/webhook-bodies.ts";
import type { WebhookDeliverer } from "./deliverer.ts";

/**
 * Meta's Graph API as the system's processes reach it through GRAPH_API_BASE_URL. It records
 * every send Meta TOOK (the customer got it, whatever the HTTP answer said) and, a little
 * after each, delivers the `sent` and `delivered` status webhooks carrying the send's
 * biz_opaque_callback_data, through the same deliverer as the customers' messages.
 *
 * Each process is given its own base path (`/w1`, `/web`, …), so a request says which
 * process made it: that is how a scenario finds the worker that is mid-send.
 */

/** How Meta treats one send; none is a normal, prompt 200. */
export type SendFault =
  /** Takes the message but answers only after the client has given up (GRAPH_TIMEOUT_MS). */
  | { kind: "late"; answerAfterMs: number; statusAfterMs: number }
  /** Takes the message, then an edge proxy answers 502 with its HTML error page. */
  | { kind: "html502"; statusAfterMs: number }
  /** Takes the message and answers 200, slowly: time to catch a process in the middle of a send. */
  | { kind: "slow"; answerAfterMs: number; statusAfterMs: number }
  /** Never answers, and never takes the message. */
  | { kind: "hang" };

export interface SendRequest {
  /** The base path of the process that sent it ("w1", "web", …). */
  via: string;
  to: string;
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

const STATUS_AFTER_MS = 300;
const DELIVERED_AFTER_SENT_MS = 400;

export class MetaGraph {
  readonly taken: TakenSend[] = [];
  markReads = 0;
  /** When the last request of any kind arrived. */
  lastRequestAt = 0;
  /** Decides each send's fault; by default every send is a prompt 200. */
  plan: (send: SendRequest) => SendFault | undefined = () => undefined;
  private readonly server = new LocalServer();
  private readonly perRecipient = new Map<string, number>();
  private readonly inFlight = new Map<string, number>();
  private readonly listeners = new Set<(send: TakenSend) => void>();
  private counter = 0;

  constructor(
    private readonly deliverer: WebhookDeliverer,
    private readonly accessToken: string,
  ) {}

  get url(): string {
    return this.server.url;
  }

  async start(): Promise<this> {
    await this.server.start((req, body, res) => this.handle(req, body, res));
    return this;
  }

  stop(): Promise<void> {
    return this.server.stop();
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
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private async handle(req: IncomingMessage, raw: Buffer, res: ServerResponse): Promise<void> {
    this.lastRequestAt = Date.now();
    const route = /^\/([\w-]+)\/v\d+\.\d+\/\d+\/messages$/.exec(req.url ?? "");
    if (req.method !== "POST" || !route) return sendJson(res, 404, graphError(100, "Unknown path components"));
    if (req.headers.authorization !== `Bearer ${this.accessToken}`) return sendJson(res, 401, graphError(190, "Invalid OAuth access token"));
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
    } catch {
      return sendJson(res, 400, graphError(100, "Invalid parameter"));
    }
    if (body.status === "read") {
      this.markReads++;
      return sendJson(res, 200, { success: true });
    }

    const to = String(body.to);
    const nthToRecipient = this.perRecipient.get(to) ?? 0;
    this.perRecipient.set(to, nthToRecipient + 1);
    const request: SendRequest = {
      via: route[1]!,
      to,
      partId: typeof body.biz_opaque_callback_data === "string" ? body.biz_opaque_callback_data : undefined,
      nthToRecipient,
    };
    const fault = this.plan(request);
    if (fault?.kind === "hang") return; // the client's timeout fires; nothing was taken

    const send: TakenSend = { ...request, at: Date.now(), wamid: `wamid.CHAOSOUT${++this.counter}`, fault: fault?.kind };
    this.taken.push(send);
    for (const listener of this.listeners) listener(send);
    this.emitStatuses(send, fault?.statusAfterMs ?? STATUS_AFTER_MS);

    const answerAfterMs = fault?.kind === "late" || fault?.kind === "slow" ? fault.answerAfterMs : 0;
    this.inFlight.set(send.via, this.sendsInFlight(send.via) + 1);
    try {
      if (answerAfterMs > 0) await new Promise((resolve) => setTimeout(resolve, answerAfterMs));
    } finally {
      this.inFlight.set(send.via, this.sendsInFlight(send.via) - 1);
    }
    if (res.destroyed || !res.socket || res.socket.destroyed) return; // the client gave up (a timeout) or died
    if (fault?.kind === "html502") {
      res.writeHead(502, { "content-type": "text/html; charset=utf-8" });
      res.end(PROXY_502_PAGE);
      return;
    }
    sendJson(res, 200, { messaging_product: "whatsapp", contacts: [{ input: to, wa_id: to }], messages: [{ id: send.wamid }] });
  }

  /** Meta's `sent`, then `delivered`, each carrying our id back (WHATSAPP.md §3 statuses). */
  private emitStatuses(send: TakenSend, sentAfterMs: number): void {
    const status = (name: string) =>
      statusWebhook({
        id: send.wamid,
        status: name,
        recipient_id: send.to,
        ...(send.partId ? { biz_opaque_callback_data: send.partId } : {}),
      });
    void this.deliverer.deliver(status("sent"), sentAfterMs);
    void this.deliverer.deliver(status("delivered"), sentAfterMs + DELIVERED_AFTER_SENT_MS);
  }
}
