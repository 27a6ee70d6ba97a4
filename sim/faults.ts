import { z } from "zod";
import type { ClaudeFault } from "./anthropic/offline.ts";
import type { ShopFault } from "./business/shop.ts";
import type { SendFault, StatusSchedule } from "./meta/graph.ts";

/**
 * The switches of the demo page: Meta (and Claude) on a bad day. While a switch is on it
 * applies to every webhook, status or send; the backend's real handling (dedup, retries,
 * the maybe-sent wait, dead letters) shows in the chat and the log.
 */

export const SEND_FAULTS = ["500", "timeout", "131047", "130429", "131056"] as const;
export type SendFaultName = (typeof SEND_FAULTS)[number];

export interface Faults {
  /** Every webhook (messages and statuses) is delivered 5 times, some at once. */
  duplicates: boolean;
  /** Status webhooks come read, delivered, sent. */
  statusesOutOfOrder: boolean;
  send: SendFaultName | null;
  /** Only with the offline responder: real Claude cannot be told to fail. */
  claude: ClaudeFault | null;
  /** The demo shop's order and booking API: slow (answers a key's first request after the tool's timeout, having acted) or failing (the shop's own 503). */
  shop: ShopFaultName | null;
}

export const SHOP_FAULTS = ["slow", "failing"] as const;
export type ShopFaultName = (typeof SHOP_FAULTS)[number];

export const NO_FAULTS: Faults = { duplicates: false, statusesOutOfOrder: false, send: null, claude: null, shop: null };

export const faultsUpdate = z
  .object({
    duplicates: z.boolean(),
    statusesOutOfOrder: z.boolean(),
    send: z.enum(SEND_FAULTS).nullable(),
    claude: z.enum(["529", "400"]).nullable(),
    shop: z.enum(SHOP_FAULTS).nullable(),
  })
  .partial()
  .strict();

/** When the copies of a duplicated webhook go out: two at once (racing for one claim), the rest later. */
export const DUPLICATE_DELAYS_MS = [0, 0, 150, 600, 1500];

/** What Meta does with a send while `name` is on (WHATSAPP.md §6). */
export function sendFault(name: SendFaultName, graphTimeoutMs: number): SendFault {
  switch (name) {
    case "500":
      return { kind: "refuse", httpStatus: 500, code: 131000, title: "Something went wrong", details: "Simulated server error" };
    case "timeout":
      // Meta takes the message and answers after the backend gave up: a maybe-sent part its status webhook confirms.
      return { kind: "late", answerAfterMs: graphTimeoutMs + 1500, statusAfterMs: 300 };
    case "131047":
      return {
        kind: "refuse",
        httpStatus: 400,
        code: 131047,
        title: "Re-engagement message",
        details: "Message failed to send because more than 24 hours have passed since the customer last replied to this number.",
      };
    case "130429":
      return { kind: "refuse", httpStatus: 400, code: 130429, title: "Rate limit hit", details: "Cloud API message throughput has been reached." };
    case "131056":
      return {
        kind: "refuse",
        httpStatus: 400,
        code: 131056,
        title: "(Business Account, Consumer Account) pair rate limit hit",
        details: "Too many messages sent from the sender phone number to the same recipient phone number in a short period of time.",
      };
  }
}

/**
 * What the demo shop does with a request while `name` is on. `firstOfKey`: the first request
 * with its Idempotency-Key (a repeat is the same call, asked again).
 */
export async function shopFault(name: ShopFaultName, toolTimeoutMs: number, firstOfKey: boolean): Promise<ShopFault> {
  // The shop's own error: a sure answer, which Claude explains to the customer at once.
  if (name === "failing") return { status: 503, body: JSON.stringify({ error: "the order system is down for maintenance" }) };
  // It acts, and answers only after the caller gave up: the tool loop asks again with the same
  // key, and the repeat is answered from what was done.
  if (firstOfKey) await new Promise((resolve) => setTimeout(resolve, toolTimeoutMs + 1000));
  return undefined;
}

/** Sent, delivered, then read as the customer opens the chat; or the same three backwards. */
export function statusSchedule(outOfOrder: () => boolean): StatusSchedule {
  return () =>
    outOfOrder()
      ? [
          { status: "read", afterMs: 300 },
          { status: "delivered", afterMs: 700 },
          { status: "sent", afterMs: 1100 },
        ]
      : [
          { status: "sent", afterMs: 300 },
          { status: "delivered", afterMs: 700 },
          { status: "read", afterMs: 1200 },
        ];
}

export function describeFaults(faults: Faults): string {
  const on = [
    faults.duplicates && "every webhook delivered 5 times",
    faults.statusesOutOfOrder && "statuses out of order",
    faults.send && `sends answered ${faults.send === "timeout" ? "too late (timeout)" : faults.send}`,
    faults.claude && `Claude answers ${faults.claude}`,
    faults.shop && `the shop's order API is ${faults.shop === "slow" ? "slow (answers after the tool's timeout)" : "failing (502)"}`,
  ].filter(Boolean);
  return on.length > 0 ? `Faults on: ${on.join("; ")}` : "All faults off: Meta and Claude behave";
}
