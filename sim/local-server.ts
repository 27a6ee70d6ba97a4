import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A loopback HTTP server on a free port: the simulated Meta and Anthropic of the demo, the
 * chaos runner and the tests' fakes all stand on it.
 */
export class LocalServer {
  private server: Server | undefined;
  url = "";
  /**
   * Requests that arrived and are not answered yet (nor given up by their client): part of what
   * "the system has gone quiet" means to whoever waits for it (test/support/quiet.ts).
   */
  requestsInFlight = 0;

  /**
   * `onError` hears a handler that threw, which then answers 500: a long-running simulator
   * (the demo) must survive its own bug. Without it, the failure stays unhandled, as a test wants.
   */
  constructor(private readonly onError?: (error: unknown) => void) {}

  async start(handler: (req: IncomingMessage, body: Buffer, res: ServerResponse) => Promise<void> | void): Promise<void> {
    this.server = createServer((req, res) => {
      this.requestsInFlight++;
      // "close" follows the answer's last byte, or the connection's end when no answer came.
      res.once("close", () => this.requestsInFlight--);
      const chunks: Buffer[] = [];
      req.on("data", (chunk: Buffer) => chunks.push(chunk));
      // A client that hangs up mid-request (a timeout) is normal here, not a crash.
      req.on("error", () => undefined);
      req.on("end", () => {
        const handled = Promise.resolve().then(() => handler(req, Buffer.concat(chunks), res));
        const onError = this.onError;
        if (!onError) return void handled;
        handled.catch((error: unknown) => {
          onError(error);
          if (!res.headersSent) sendJson(res, 500, { error: "simulator error" });
          else res.destroy();
        });
      });
    });
    this.server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(body === undefined ? "" : JSON.stringify(body));
}

/**
 * A simulated service on its own LocalServer: Meta's Graph API, Anthropic's Messages API, a
 * transcriber, the demo shop. Each answers requests in `handle`; the address, start and stop
 * are this base's.
 */
export abstract class LocalService {
  private readonly server: LocalServer;

  /** `onError`: see LocalServer. */
  constructor(onError?: (error: unknown) => void) {
    this.server = new LocalServer(onError);
  }

  protected abstract handle(req: IncomingMessage, body: Buffer, res: ServerResponse): Promise<void> | void;

  get url(): string {
    return this.server.url;
  }

  /** A request is in flight: it arrived and has not been answered (or abandoned by its client) yet. */
  get busy(): boolean {
    return this.server.requestsInFlight > 0;
  }

  async start(): Promise<this> {
    await this.server.start((req, body, res) => this.handle(req, body, res));
    return this;
  }

  stop(): Promise<void> {
    return this.server.stop();
  }
}
