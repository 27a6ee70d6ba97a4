import { createServer, type Server } from "node:http";

/** The secret part of a chat room's webhook URL (Slack-style), which must never reach a log. */
export const WEBHOOK_TOKEN = "T000/B000/s3cr3t-webhook-token";

/** A chat room's incoming webhook: answers each post with `answer()`'s status, or refuses connections while stopped. */
export class Receiver {
  readonly posts: { status: number; text: string }[] = [];
  answer: () => number = () => 200;
  private server: Server | undefined;
  constructor(readonly port: number) {}
  get url() {
    return `http://127.0.0.1:${this.port}/hooks/${WEBHOOK_TOKEN}`;
  }
  get delivered() {
    return this.posts.filter((p) => p.status === 200).map((p) => p.text);
  }
  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const status = this.answer();
        this.posts.push({ status, text: (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { text: string }).text });
        res.writeHead(status, { "content-type": "text/plain" }).end(status === 200 ? "ok" : "unavailable");
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(this.port, "127.0.0.1", resolve));
    return this;
  }
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
