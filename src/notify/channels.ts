import nodemailer, { type Transporter } from "nodemailer";
import type { StaffNotifySettings } from "../config/config.ts";
import type { Channel } from "./batches.ts";
import type { StaffMessage } from "./message.ts";

/**
 * The two ways staff are told. Each throws when the receiver did not take the message (the
 * notification is retried); an answer proves it took it. Neither the webhook's URL (its path
 * is the token) nor SMTP_URL (its password) is ever put in an error or a log line.
 */

/** How long a webhook post may take. */
const DELIVERY_TIMEOUT_MS = 15_000;

export class DeliveryFailed extends Error {
  constructor(
    readonly channel: Channel,
    message: string,
  ) {
    super(`${channel}: ${message}`);
    this.name = "DeliveryFailed";
  }
}

export interface StaffChannels {
  readonly configured: readonly Channel[];
  send(channel: Channel, message: StaffMessage): Promise<void>;
  close(): void;
}

export function staffChannels(settings: StaffNotifySettings): StaffChannels {
  const { webhookUrl, email } = settings;
  // nodemailer's own timeouts bound a session (connection 2 min, greeting 30 s).
  const transport = email ? nodemailer.createTransport(email.smtpUrl) : undefined;
  const configured: Channel[] = [...(webhookUrl ? (["webhook"] as const) : []), ...(email ? (["email"] as const) : [])];
  return {
    configured,
    async send(channel, message) {
      if (channel === "webhook" && webhookUrl) return postToWebhook(webhookUrl, message);
      if (channel === "email" && transport && email) return sendEmail(transport, email, message);
      throw new DeliveryFailed(channel, "not configured in this process");
    },
    close() {
      transport?.close();
    },
  };
}

/**
 * Slack's and Teams' mrkdwn read `<…>` as a ping or a link and `&` as the start of an entity,
 * so the three are escaped as Slack documents; our own links are bare URLs, which both link.
 */
const escapeMrkdwn = (text: string) => text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

/** Slack, Google Chat and Microsoft Teams incoming webhooks all take `{"text": …}`; any 2xx is taken. */
async function postToWebhook(url: string, message: StaffMessage): Promise<void> {
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8" },
      body: JSON.stringify({ text: escapeMrkdwn(message.text) }),
      signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
    });
  } catch (error) {
    // fetch's errors name the URL in their cause only; the code says what happened.
    const cause = (error as { cause?: { code?: string } }).cause?.code;
    throw new DeliveryFailed("webhook", error instanceof Error && error.name === "TimeoutError" ? "timed out" : `unreachable (${cause ?? "network error"})`);
  }
  await response.body?.cancel().catch(() => undefined);
  if (!response.ok) throw new DeliveryFailed("webhook", `answered HTTP ${response.status}`);
}

async function sendEmail(transport: Transporter, email: NonNullable<StaffNotifySettings["email"]>, message: StaffMessage): Promise<void> {
  try {
    await transport.sendMail({ from: email.from, to: [...email.to], subject: message.subject, text: message.text });
  } catch (error) {
    // nodemailer's errors carry the server's answer (responseCode, response), never the URL.
    const e = error as { code?: string; responseCode?: number; message?: string };
    throw new DeliveryFailed("email", `SMTP ${e.responseCode ?? e.code ?? "error"}: ${(e.message ?? String(error)).slice(0, 200)}`);
  }
}
