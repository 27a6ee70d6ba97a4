import { connect, type Socket } from "node:net";

/**
 * A deliberately minimal HTTP/1.1 keep-alive client for the load generator: one request at a
 * time per connection, responses framed by Content-Length (what Fastify sends). node:http's
 * client costs about as much CPU per request as the server we measure, and on a 2-core
 * machine that would make the baseline measure the generator; this costs a fraction.
 */

/** A status code, or -1 for a transport error, a timeout or a response we cannot frame. */
export type Outcome = number;

const HEADER_END = Buffer.from("\r\n\r\n");
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;

export class Connection {
  private socket: Socket | undefined;
  private buffered: Buffer = Buffer.alloc(0);
  private pending: { resolve: (outcome: Outcome) => void; timer: NodeJS.Timeout } | undefined;

  constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly timeoutMs: number,
  ) {}

  /** Sends one request and resolves with its outcome; never rejects. One at a time. */
  request(head: Buffer, body: Buffer): Promise<Outcome> {
    if (this.pending) throw new Error("Connection.request while a request is in flight");
    const socket = this.socket ?? this.open();
    return new Promise<Outcome>((resolve) => {
      const timer = setTimeout(() => this.fail(), this.timeoutMs);
      this.pending = { resolve, timer };
      socket.cork();
      socket.write(head);
      socket.write(body);
      socket.uncork();
    });
  }

  close(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }

  private open(): Socket {
    const socket = connect({ host: this.host, port: this.port, noDelay: true });
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", () => this.fail());
    socket.on("close", () => {
      if (this.socket === socket) this.fail();
    });
    this.socket = socket;
    this.buffered = Buffer.alloc(0);
    return socket;
  }

  private onData(chunk: Buffer): void {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    const headerEnd = this.buffered.indexOf(HEADER_END);
    if (headerEnd < 0) return;
    const head = this.buffered.toString("latin1", 0, headerEnd);
    const status = Number(head.slice(9, 12));
    const length = CONTENT_LENGTH.exec(head)?.[1];
    if (!head.startsWith("HTTP/1.") || !Number.isInteger(status) || length === undefined) {
      this.fail();
      return;
    }
    const end = headerEnd + HEADER_END.length + Number(length);
    if (this.buffered.length < end) return; // the body is still arriving
    // Nothing else can follow: we never pipeline, so anything extra is a framing error.
    if (this.buffered.length > end) {
      this.fail();
      return;
    }
    this.buffered = Buffer.alloc(0);
    if (/\r\nconnection:[ \t]*close/i.test(head)) this.close();
    this.settle(status);
  }

  /** Drops the connection (the next request opens a new one) and reports -1. */
  private fail(): void {
    this.close();
    this.settle(-1);
  }

  private settle(outcome: Outcome): void {
    const pending = this.pending;
    if (!pending) return;
    this.pending = undefined;
    clearTimeout(pending.timer);
    pending.resolve(outcome);
  }
}

/** The request line and headers of a POST, ready to write before its body. */
export function postHead(url: URL, body: Buffer, headers: Record<string, string>): Buffer {
  const lines = [
    `POST ${url.pathname} HTTP/1.1`,
    `host: ${url.host}`,
    "connection: keep-alive",
    `content-length: ${body.length}`,
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  return Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1");
}

/**
 * A fixed set of connections handed out first come, first served (the open loop's socket
 * pool). A request that waits longer than the timeout for a connection is given up unsent
 * (-1), so an overloaded target cannot stretch the run without bound.
 */
export class Pool {
  private readonly idle: Connection[];
  private readonly all: Connection[];
  private readonly waiting: ((connection: Connection | undefined) => void)[] = [];

  constructor(
    url: URL,
    size: number,
    private readonly timeoutMs: number,
  ) {
    this.all = Array.from({ length: size }, () => new Connection(url.hostname, Number(url.port), timeoutMs));
    this.idle = [...this.all];
  }

  async request(head: Buffer, body: Buffer): Promise<Outcome> {
    const connection = this.idle.pop() ?? (await this.wait());
    if (!connection) return -1;
    try {
      return await connection.request(head, body);
    } finally {
      const next = this.waiting.shift();
      if (next) next(connection);
      else this.idle.push(connection);
    }
  }

  close(): void {
    for (const connection of this.all) connection.close();
  }

  private wait(): Promise<Connection | undefined> {
    return new Promise((resolve) => {
      const waiter = (connection: Connection | undefined) => {
        clearTimeout(timer);
        resolve(connection);
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(waiter), 1);
        resolve(undefined);
      }, this.timeoutMs);
      this.waiting.push(waiter);
    });
  }
}
