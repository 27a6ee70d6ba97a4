import type { WebhookDeliverer } from "../sim/meta/deliverer.ts";
import { textWebhook } from "../test/support/webhook-bodies.ts";

/**
 * The people writing in. Each message is one Meta webhook with its own wamid, delivered
 * (and redelivered) by the deliverer; a share of them is delivered a second time as well,
 * because Meta delivers at least once and "often more" (WHATSAPP.md §4).
 */

export interface WrittenMessage {
  wamid: string;
  from: string;
  at: number;
}

export class Customers {
  /** Every message written, by wamid: the "sent in" of the scenario. */
  readonly written = new Map<string, WrittenMessage>();
  duplicatesDelivered = 0;
  private counter = 0;

  constructor(
    private readonly deliverer: WebhookDeliverer,
    private readonly random: () => number,
    private readonly tag: string,
    private readonly duplicateRate: number,
  ) {}

  /** The WhatsApp id of customer `i`. */
  waId(i: number): string {
    return `1555${String(i).padStart(7, "0")}`;
  }

  /**
   * Customer `i` writes `text`; returns the message's wamid. Meta delivers it once, a share of
   * messages twice (duplicateRate), and with `copies` that many times at least: a storm of
   * redeliveries, some at once, some up to 1.5 s later.
   */
  write(i: number, text = `Hello, is the shop open on Sunday? (customer ${i})`, copies = 1): string {
    const from = this.waId(i);
    const wamid = `wamid.CHAOS${this.tag}x${++this.counter}`;
    const { body } = textWebhook({ from, id: wamid, text, name: `Customer ${i}` });
    this.written.set(wamid, { wamid, from, at: Date.now() });
    void this.deliverer.deliver(body);
    const again = Math.max(copies - 1, this.random() < this.duplicateRate ? 1 : 0);
    for (let n = 0; n < again; n++) {
      this.duplicatesDelivered++;
      void this.deliverer.deliver(body, n === 0 && copies > 1 ? 0 : 200 + this.random() * 1300);
    }
    return wamid;
  }

  /**
   * Warm-up customer `i` writes: delivered like any message, but outside the scenario's
   * count (and never twice). Returns their WhatsApp id.
   */
  warmUp(i: number): string {
    const from = `1999${String(i).padStart(7, "0")}`;
    void this.deliverer.deliver(textWebhook({ from, id: `wamid.CHAOS${this.tag}warm${i}`, text: "Hi! Are you open?", name: `Early bird ${i}` }).body);
    return from;
  }

  /** Which customer number a WhatsApp id belongs to. */
  indexOf(waId: string): number {
    return Number(waId.slice(4));
  }
}
