import { signMetaBody } from "../../src/webhook/signature.ts";

/**
 * Meta's side of POST /webhook: every body is signed with the app secret (X-Hub-Signature-256
 * over the exact bytes) and posted to the web process over HTTP. Like Meta, anything but a 200
 * (another status, a reset, no answer in time) is delivered again, after a short backoff
 * (0.5–2 s here; Meta's real schedule is longer and unpublished, WHATSAPP.md §4), until it
 * is acknowledged or the deadline has passed. The chaos runner and the demo share it.
 */

/** Meta documents no timeout; guides quote 3–10 s. */
const REQUEST_TIMEOUT_MS = 5000;
const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 2000;

export interface DeliveryStats {
  /** HTTP POSTs made, redeliveries included. */
  posts: number;
  /** Answers other than 200, by status ("error" for a transport failure or timeout). */
  refused: Record<string, number>;
  /** Bodies that were never acknowledged before the deadline. */
  abandoned: number;
}

/** One POST of a body and how it was answered, for whoever shows what happened (the demo's log). */
export interface PostOutcome {
  /** 1 for the first POST of this delivery, 2 for its first redelivery, … */
  attempt: number;
  /** The HTTP status, or "error" for a reset or no answer within the timeout. */
  status: number | "error";
  ms: number;
  /** Whether another POST of this body follows. */
  willRetry: boolean;
}

export class WebhookDeliverer {
  /** No redelivery is started after this moment (ms since the epoch). */
  deadline = Number.POSITIVE_INFINITY;
  stats: DeliveryStats = { posts: 0, refused: {}, abandoned: 0 };
  /** When the last POST started: part of what "the system has gone quiet" means. */
  lastPostAt = 0;
  private inProgress = 0;
  private closed = false;
  private readonly sleepers = new Set<{ timer: NodeJS.Timeout; wake: () => void }>();

  /**
   * `url` is POST /webhook of the system; it may be set later, before the first delivery.
   * Several URLs are taken in turns, POST by POST, as a load balancer in front of several web
   * processes would (a redelivery may reach another one).
   */
  constructor(
    public url: string | readonly string[],
    private readonly appSecret: string,
    private readonly random: () => number,
  ) {}

  /** True while some body is being delivered or waits to be delivered again. */
  get busy(): boolean {
    return this.inProgress > 0;
  }

  /** Delivers `body` until it is answered 200; resolves false if it never was. `observe` hears every POST. */
  async deliver(body: string, afterMs = 0, observe?: (outcome: PostOutcome) => void): Promise<boolean> {
    this.inProgress++;
    try {
      if (afterMs > 0) await this.sleep(afterMs);
      const raw = Buffer.from(body, "utf8");
      for (let attempt = 0; !this.closed; attempt++) {
        const started = Date.now();
        const status = await this.post(raw);
        const backoff = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** attempt * (1 + this.random() * 0.5));
        const willRetry = status !== 200 && !this.closed && Date.now() + backoff <= this.deadline;
        observe?.({ attempt: attempt + 1, status: status === -1 ? "error" : status, ms: Date.now() - started, willRetry });
        if (status === 200) return true;
        if (!willRetry) break;
        await this.sleep(backoff);
      }
      this.stats.abandoned++;
      return false;
    } finally {
      this.inProgress--;
    }
  }

  /** Starts counting afresh (after a warm-up). */
  resetStats(): void {
    this.stats = { posts: 0, refused: {}, abandoned: 0 };
  }

  /** Stops every redelivery at once (they count as abandoned). */
  close(): void {
    this.closed = true;
    for (const sleeper of this.sleepers) {
      clearTimeout(sleeper.timer);
      sleeper.wake();
    }
    this.sleepers.clear();
  }

  private async post(raw: Buffer): Promise<number> {
    this.stats.posts++;
    this.lastPostAt = Date.now();
    let status: number | "error";
    try {
      const url = typeof this.url === "string" ? this.url : this.url[this.stats.posts % this.url.length]!;
      const response = await fetch(url, {
        method: "POST",
        body: raw,
        headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(raw, this.appSecret) },
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      await response.arrayBuffer();
      status = response.status;
    } catch {
      status = "error";
    }
    if (status !== 200) this.stats.refused[String(status)] = (this.stats.refused[String(status)] ?? 0) + 1;
    return status === "error" ? -1 : status;
  }

  private sleep(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const sleeper = {
        wake: resolve,
        timer: setTimeout(() => {
          this.sleepers.delete(sleeper);
          resolve();
        }, ms),
      };
      this.sleepers.add(sleeper);
    });
  }
}
