import { randomBytes } from "node:crypto";
import { type Customer, type CustomerInput, type CustomerMessage, DemoInputError, newCustomer } from "./customers.ts";
import { EventLog } from "./event-log.ts";
import { DUPLICATE_DELAYS_MS, describeFaults, type Faults, NO_FAULTS, sendFault, statusSchedule } from "./faults.ts";
import { WebhookDeliverer } from "./meta/deliverer.ts";
import { type GraphEvent, MetaGraph, type TakenSend } from "./meta/graph.ts";
import { inboundWebhook, type MessageShown, messagePayload } from "./meta/inbound.ts";

/**
 * The simulated WhatsApp around the backend: the customers and their phones (the chats as
 * they see them), and Meta in between. What a customer writes becomes a webhook in Meta's
 * wire format, signed with the app secret and delivered to POST /webhook until answered
 * 200; what the backend sends reaches the customer's chat through the simulated Graph API,
 * followed by status webhooks. Everything that passes is written to the event log.
 */

/** The business the demo customers write to. */
export const BUSINESS = { name: "Demo Shop", phoneNumberId: "109876543210987", displayPhoneNumber: "15550101234" } as const;

/** The demo's menu message, whose buttons customers tap (an interactive message sent before the demo began). */
export const MENU = {
  wamid: "wamid.DEMOMENU",
  text: "Welcome to the Demo Shop! Tap an option or write to us.",
  buttons: [
    { id: "hours", title: "Opening hours" },
    { id: "delivery", title: "Delivery times" },
    { id: "prices", title: "Prices" },
  ],
} as const;

export interface InEntry extends MessageShown {
  direction: "in";
  id: string;
  at: string;
  type: "text" | "image" | "document" | "audio" | "location" | "interactive";
  replyTo?: string;
  /** sending (no 200 yet) → delivered (POST /webhook answered 200) → read (the backend's read receipt). */
  status: "sending" | "delivered" | "read";
}

export interface OutEntry {
  direction: "out";
  id: string;
  at: string;
  text: string;
  replyTo?: string;
  /** Our part id, from biz_opaque_callback_data. */
  partId?: string;
}

export type ChatEntry = InEntry | OutEntry;

/** Meta's typing indicator lasts until the reply or 25 s (WHATSAPP.md §5). */
const TYPING_MS = 25_000;
/** Customers' files kept for the media download and the page; the oldest go first. */
const MAX_MEDIA = 50;
const MAX_CHAT_ENTRIES = 500;

export interface SandboxOptions {
  appSecret: string;
  accessToken: string;
  /** The backend's GRAPH_TIMEOUT_MS: a "timeout" answers just after it. */
  graphTimeoutMs: number;
}

export class Sandbox {
  readonly log = new EventLog();
  readonly graph: MetaGraph;
  private readonly deliverer: WebhookDeliverer;
  private readonly customersByKey = new Map<string, Customer>();
  private readonly chats = new Map<string, ChatEntry[]>();
  private readonly inbound = new Map<string, { chat: string; entry: InEntry }>();
  private readonly typingUntil = new Map<string, number>();
  private faultState: Faults = { ...NO_FAULTS };
  private counter = 0;

  constructor(options: SandboxOptions) {
    this.deliverer = new WebhookDeliverer("", options.appSecret, Math.random);
    this.graph = new MetaGraph(
      (body, afterMs, about) =>
        this.deliver(body, { afterMs, kind: "status", what: `Status "${about.status}" of ${about.send.wamid}`, chat: this.customerOf(about.send)?.key }),
      options.accessToken,
      { onError: (error) => this.log.add({ kind: "graph", text: `Simulator error: ${String(error)}`, ok: false }) },
    );
    this.graph.displayNumbers.set(BUSINESS.phoneNumberId, BUSINESS.displayPhoneNumber);
    this.graph.statuses = statusSchedule(() => this.faultState.statusesOutOfOrder);
    this.graph.knowsMessage = (wamid) => this.inbound.has(wamid);
    this.graph.plan = (send) => {
      if (!this.customerOf(send))
        return { kind: "refuse", httpStatus: 400, code: 131026, title: "Message undeliverable", details: "No such customer in the demo" };
      return this.faultState.send ? sendFault(this.faultState.send, options.graphTimeoutMs) : undefined;
    };
    this.graph.onTaken((send) => this.received(send));
    this.graph.onEvent((event) => this.logGraph(event));
  }

  get url(): string {
    return this.graph.url;
  }

  /** Meta has work in hand: a request to answer, or a webhook (a message, a status) still to deliver. */
  get busy(): boolean {
    return this.graph.busy || this.deliverer.busy;
  }

  async start(): Promise<this> {
    await this.graph.start();
    return this;
  }

  /** Where Meta delivers webhooks: the backend's POST /webhook, known once it listens. */
  deliverTo(webhookUrl: string): void {
    this.deliverer.url = webhookUrl;
  }

  async close(): Promise<void> {
    this.deliverer.close();
    await this.graph.stop();
  }

  get faults(): Faults {
    return { ...this.faultState };
  }

  setFaults(update: Partial<Faults>): Faults {
    this.faultState = { ...this.faultState, ...update };
    this.log.add({ kind: "fault", text: describeFaults(this.faultState), ok: true });
    return this.faults;
  }

  customers(): Customer[] {
    return [...this.customersByKey.values()];
  }

  customer(key: string): Customer | undefined {
    return this.customersByKey.get(key);
  }

  /** A customer by phone number (with a name), or by username and BSUID with the number hidden. */
  addCustomer(input: CustomerInput): Customer {
    const customer = newCustomer(input);
    if (this.customersByKey.has(customer.key)) throw new DemoInputError(`a customer ${customer.key} already exists`);
    this.customersByKey.set(customer.key, customer);
    this.chats.set(customer.key, []);
    return customer;
  }

  chat(key: string): { entries: ChatEntry[]; typing: boolean } | undefined {
    const entries = this.chats.get(key);
    if (!entries) return undefined;
    return { entries: [...entries], typing: (this.typingUntil.get(key) ?? 0) > Date.now() };
  }

  /** The file a customer sent, for the page. */
  media(id: string) {
    return this.graph.media.get(id);
  }

  /** The customer writes: one webhook as Meta sends it (5 of them while duplicates are on). */
  write(key: string, message: CustomerMessage): InEntry {
    const customer = this.customersByKey.get(key);
    if (!customer) throw new DemoInputError(`no customer ${key}`);
    const wamid = `wamid.DEMO${Date.now().toString(36)}${(++this.counter).toString(36)}${randomBytes(3).toString("hex")}`;
    const { payload, shown } = messagePayload(message, (bytes, mimeType) => this.storeMedia(bytes, mimeType));
    // A tapped button answers the menu message; a quote names the message it quotes (WHATSAPP.md §3, `context`).
    const replyTo = "button" in message ? MENU.wamid : message.replyTo;
    const quoted = replyTo ? this.chats.get(key)?.find((e) => e.id === replyTo) : undefined;
    const entry: InEntry = {
      direction: "in",
      id: wamid,
      at: new Date().toISOString(),
      type: payload.type,
      ...shown,
      ...(replyTo ? { replyTo } : {}),
      status: "sending",
    };
    this.append(key, entry);
    this.inbound.set(wamid, { chat: key, entry });
    const context = replyTo ? { from: quoted?.direction === "in" ? (customer.phone ?? customer.userId) : BUSINESS.displayPhoneNumber, id: replyTo } : undefined;
    this.deliver(inboundWebhook(BUSINESS, customer, { id: wamid, ...payload, ...(context ? { context } : {}) }), {
      afterMs: 0,
      kind: "webhook",
      what: `${customer.name}'s ${entry.type} message ${wamid}`,
      chat: key,
      onAcknowledged: () => {
        if (entry.status === "sending") entry.status = "delivered";
      },
    });
    return entry;
  }

  private storeMedia(bytes: Buffer, mimeType: string): string {
    const id = `${Date.now()}${String(++this.counter).padStart(4, "0")}`;
    this.graph.media.set(id, { mimeType, bytes });
    for (const old of this.graph.media.keys()) {
      if (this.graph.media.size <= MAX_MEDIA) break;
      this.graph.media.delete(old);
    }
    return id;
  }

  /** Meta delivers a webhook until it is answered 200, five times over while duplicates are on. */
  private deliver(
    body: string,
    how: { afterMs: number; kind: "webhook" | "status"; what: string; chat: string | undefined; onAcknowledged?: () => void },
  ): void {
    const copies = this.faultState.duplicates ? DUPLICATE_DELAYS_MS : [0];
    copies.forEach((delay, copy) => {
      const label = copies.length > 1 ? `${how.what} (copy ${copy + 1} of ${copies.length})` : how.what;
      void this.deliverer.deliver(body, how.afterMs + delay, (outcome) => {
        const again = outcome.attempt > 1 ? `, delivery ${outcome.attempt}` : "";
        const next = outcome.status === 200 ? "" : outcome.willRetry ? "; Meta delivers it again" : "; Meta gives up";
        this.log.add({ kind: how.kind, text: `${label}: POST /webhook → ${outcome.status}${again}${next}`, ok: outcome.status === 200, chat: how.chat });
        if (outcome.status === 200) how.onAcknowledged?.();
      });
    });
  }

  /** A send Meta took: the reply appears in the customer's chat, and "typing…" stops. */
  private received(send: TakenSend): void {
    const customer = this.customerOf(send);
    if (!customer) return;
    this.typingUntil.delete(customer.key);
    this.append(customer.key, {
      direction: "out",
      id: send.wamid,
      at: new Date(send.at).toISOString(),
      text: send.text ?? `[template ${send.template ?? "?"}]`,
      ...(send.replyTo ? { replyTo: send.replyTo } : {}),
      ...(send.partId ? { partId: send.partId } : {}),
    });
  }

  private logGraph(event: GraphEvent): void {
    if (event.kind === "mark_read") {
      const found = this.inbound.get(event.wamid);
      if (found && event.answer === 200) this.markRead(found.chat, found.entry, event.typing);
      this.log.add({
        kind: "read",
        text: `Read receipt${event.typing ? " + typing indicator" : ""} for ${event.wamid} → ${event.answer}`,
        ok: event.answer === 200,
        chat: found?.chat,
      });
      return;
    }
    if (event.kind === "media") {
      this.log.add({ kind: "media", text: `The backend fetched media ${event.id} → ${event.answer}`, ok: event.answer === 200 });
      return;
    }
    if (event.kind === "refused") {
      this.log.add({ kind: "graph", text: `Graph refused ${event.path}: ${event.answer} (#${event.code}) ${event.reason}`, ok: false });
      return;
    }
    const words = (event.request.text ?? event.request.template ?? "").replace(/\s+/g, " ");
    const what = `Send to ${event.request.to}: “${words.length > 50 ? `${words.slice(0, 49)}…` : words}”`;
    const answer =
      event.answer === "gave_up"
        ? "Meta took it but answered after the backend's timeout: maybe sent, its status webhook will tell"
        : event.answer === "none"
          ? "no answer"
          : event.wamid
            ? `${event.answer}, Meta took it (${event.wamid})`
            : `${event.answer} (#${event.code}), refused: not sent`;
    this.log.add({ kind: "send", text: `${what} → ${answer}`, ok: event.answer === 200, chat: this.customerOf(event.request)?.key });
  }

  /** Meta's read receipt marks this message and every earlier one read (WHATSAPP.md §5). */
  private markRead(chat: string, entry: InEntry, typing: boolean): void {
    const entries = this.chats.get(chat) ?? [];
    for (const e of entries.slice(0, entries.indexOf(entry) + 1)) if (e.direction === "in") e.status = "read";
    if (typing) this.typingUntil.set(chat, Date.now() + TYPING_MS);
  }

  /** Whom a send is addressed to: `to` a phone number, or `recipient` a BSUID (WHATSAPP.md §9). */
  private customerOf(send: { to: string; addressedBy: "phone" | "bsuid" }): Customer | undefined {
    if (send.addressedBy === "phone") return this.customersByKey.get(send.to);
    return [...this.customersByKey.values()].find((c) => c.userId === send.to);
  }

  private append(chat: string, entry: ChatEntry): void {
    const entries = this.chats.get(chat);
    if (!entries) return;
    entries.push(entry);
    if (entries.length > MAX_CHAT_ENTRIES) entries.splice(0, entries.length - MAX_CHAT_ENTRIES);
  }
}
