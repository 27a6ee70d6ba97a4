import { writeFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { LocalService, sendJson } from "../local-server.ts";

/**
 * A business's own HTTP endpoints, as the demo's shop runs them and the tests call them:
 * an order lookup (`GET /orders/{orderId}`) and a booking (`POST /bookings`). The booking acts:
 * it keeps the answer it gave for each Idempotency-Key and gives it again for a repeat, as a
 * business that takes our key (law 12) does, so `bookings` counts what was done, not what was
 * asked. Every request is recorded, its key with it.
 */

export interface ShopRequest {
  method: string;
  path: string;
  idempotencyKey: string | undefined;
  authorization: string | undefined;
  body: unknown;
}

export interface Booking {
  id: string;
  name: string;
  date: string;
  time: string;
  people: number;
}

/**
 * What the shop does with a request: fail it (`status`, the body a proxy's page), hold it
 * unanswered (`hang`), or act on it and then hold its answer (`actThenHang`: the business did
 * it, the caller never hears so); undefined carries on.
 */
export type ShopFault = { status: number; body?: string } | { hang: true } | { actThenHang: true } | undefined;

export const DEMO_ORDERS: Readonly<Record<string, { status: string; items: string[]; eta?: string }>> = {
  A1001: { status: "shipped", items: ["Trail runner, size 42"], eta: "2 business days" },
  A1002: { status: "processing", items: ["Rain jacket, M", "Wool socks (3 pairs)"] },
  A1003: { status: "delivered", items: ["Hiking boots, size 39"] },
};

export class DemoShop extends LocalService {
  readonly requests: ShopRequest[] = [];
  readonly bookings: Booking[] = [];
  /** Asked before each answer (the demo's switch, a test's script). */
  fault: (request: ShopRequest) => ShopFault | Promise<ShopFault> = () => undefined;
  /** Told of each answer given (the demo's log); `status` undefined for one held unanswered. */
  observe: (request: ShopRequest, status: number | undefined) => void = () => undefined;
  private readonly byKey = new Map<string, { status: number; body: unknown }>();
  private readonly held = new Set<ServerResponse>();

  override async stop(): Promise<void> {
    for (const res of this.held) res.destroy();
    await super.stop();
  }

  protected async handle(req: IncomingMessage, raw: Buffer, res: ServerResponse): Promise<void> {
    const path = req.url ?? "/";
    let body: unknown;
    try {
      body = raw.length > 0 ? JSON.parse(raw.toString("utf8")) : undefined;
    } catch {
      return sendJson(res, 400, { error: "the body is not JSON" });
    }
    const request: ShopRequest = {
      method: req.method ?? "GET",
      path,
      idempotencyKey: header(req, "idempotency-key"),
      authorization: header(req, "authorization"),
      body,
    };
    this.requests.push(request);
    const fault = await this.fault(request);
    if (fault && "status" in fault) {
      res.writeHead(fault.status, { "content-type": "text/html" });
      res.end(fault.body ?? `<html><body><h1>${fault.status}</h1></body></html>`);
      this.observe(request, fault.status);
      return;
    }
    if (fault && "actThenHang" in fault) this.answer(request);
    if (fault) {
      this.held.add(res);
      res.once("close", () => this.held.delete(res));
      this.observe(request, undefined);
      return;
    }
    const { status, body: answer } = this.answer(request);
    sendJson(res, status, answer);
    this.observe(request, status);
  }

  private answer(request: ShopRequest): { status: number; body: unknown } {
    const order = /^\/orders\/([^/?]+)$/.exec(request.path);
    if (request.method === "GET" && order) {
      const id = decodeURIComponent(order[1]!).toUpperCase();
      const found = DEMO_ORDERS[id];
      return found ? { status: 200, body: { orderId: id, ...found } } : { status: 404, body: { error: `no order ${id}` } };
    }
    if (request.method === "POST" && request.path === "/bookings") {
      if (!request.idempotencyKey) return { status: 400, body: { error: "Idempotency-Key is required" } };
      const earlier = this.byKey.get(request.idempotencyKey);
      if (earlier) return earlier; // a repeat: the booking was made once
      const { name, date, time, people } = (request.body ?? {}) as Partial<Booking>;
      if (!name || !date || !time || !people) return { status: 422, body: { error: "name, date, time and people are required" } };
      const booking: Booking = { id: `B${1000 + this.bookings.length + 1}`, name, date, time, people };
      this.bookings.push(booking);
      const made = { status: 201, body: { booked: true, ...booking } };
      this.byKey.set(request.idempotencyKey, made);
      return made;
    }
    return { status: 404, body: { error: `no such endpoint: ${request.method} ${request.path}` } };
  }
}

const header = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
};

/**
 * The shop's tools file for a number (src/tools/tools-file.ts), pointing at `url`: on this
 * machine, so the tools allow the private network unless told otherwise.
 */
export function shopToolsFile(
  url: string,
  options: { authorizationEnv?: string; timeoutMs?: number; allowPrivateNetwork?: boolean } = {},
): { tools: unknown[] } {
  const headers = options.authorizationEnv ? { Authorization: `Bearer \${${options.authorizationEnv}}` } : {};
  const timeoutMs = options.timeoutMs ?? 5000;
  const allowPrivateNetwork = options.allowPrivateNetwork ?? true;
  return {
    tools: [
      {
        name: "lookup_order",
        description: "Look up one of the shop's orders by its id (like A1001): its status, items and delivery estimate.",
        input_schema: {
          type: "object",
          properties: { orderId: { type: "string", pattern: "^[A-Za-z0-9-]{1,20}$", description: "The order id the customer gave" } },
          required: ["orderId"],
          additionalProperties: false,
        },
        request: { method: "GET", url: `${url}/orders/{orderId}`, headers, timeoutMs },
        allowPrivateNetwork,
      },
      {
        name: "book_fitting",
        description: "Book a shoe-fitting appointment in the shop. Ask the customer for every field first; call it once they confirm.",
        input_schema: {
          type: "object",
          properties: {
            name: { type: "string" },
            date: { type: "string", format: "date" },
            time: { type: "string", pattern: "^\\d{2}:\\d{2}$" },
            people: { type: "integer", minimum: 1, maximum: 6 },
          },
          required: ["name", "date", "time", "people"],
          additionalProperties: false,
        },
        request: { method: "POST", url: `${url}/bookings`, headers, timeoutMs },
        allowPrivateNetwork,
      },
    ],
  };
}

/** The demo shop's own knowledge: hours, delivery, returns. */
export const DEMO_KNOWLEDGE_DIR = fileURLToPath(new URL("./knowledge/", import.meta.url));

/** Writes a PHONE_NUMBERS_FILE for the demo's number into `dir`: the shop's knowledge and its tools at `shopUrl`; its path. */
export async function writeDemoNumbers(dir: string, phoneNumberId: string, shopUrl: string, toolTimeoutMs: number): Promise<string> {
  await writeFile(join(dir, "tools.json"), JSON.stringify(shopToolsFile(shopUrl, { timeoutMs: toolTimeoutMs }), null, 2));
  const path = join(dir, "numbers.json");
  await writeFile(path, JSON.stringify({ [phoneNumberId]: { knowledgeDir: DEMO_KNOWLEDGE_DIR, toolsFile: "tools.json" } }, null, 2));
  return path;
}
