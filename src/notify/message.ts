import { explain, REASON_KINDS, type ReasonKind } from "../dlq/explain.ts";
import type { BatchItem } from "./batches.ts";

/**
 * What staff read in a notification: how many items wait, by reason, and one line per item
 * with its link on the staff page. Law 10 reaches this far: a chat room or an inbox is a log
 * of sorts, so no message text and no full phone number, only the customer's first name (or
 * username) and the number's last digits, enough to recognise them; the rest is one click away.
 */

export interface StaffMessage {
  subject: string;
  text: string;
}

export const itemLink = (publicBaseUrl: string, id: string) => `${publicBaseUrl}/admin#/item/${id}`;

/**
 * A profile name is the customer's to write, so only its letters reach a chat room: no `<`,
 * `|` or `:` that Slack or Teams would read as a ping or a link, no `.` that would make a
 * domain. "José", "Anne-Marie", "O'Brien" survive; `<!channel><https://evil.example|…>` does not.
 */
const nameWord = (name: string | null | undefined) => (name?.trim().split(/\s+/)[0] ?? "").replace(/[^\p{L}\p{M}\p{N}'-]/gu, "").slice(0, 32);

/** Meta's usernames are letters, digits, `.` and `_`; `.` goes for the same reason as above. */
const usernameWord = (username: string | null | undefined) => (username ?? "").replace(/[^\p{L}\p{N}_]/gu, "").slice(0, 32);

/** "José (…1234)", "@ana", "…1234", or "a customer". */
export function customerLabel(contact: BatchItem["contact"]): string {
  const username = usernameWord(contact.username);
  const name = nameWord(contact.name) || (username ? `@${username}` : "");
  const digits = contact.waId ? `…${contact.waId.slice(-4)}` : "";
  if (name && digits) return `${name} (${digits})`;
  return name || digits || "a customer";
}

export function composeStaffMessage(items: readonly BatchItem[], publicBaseUrl: string): StaffMessage {
  const byKind = new Map<ReasonKind, BatchItem[]>();
  for (const item of items) {
    const kind = explain({ source: item.source, code: item.code, reason: "" }).kind;
    byKind.set(kind, [...(byKind.get(kind) ?? []), item]);
  }
  const groups = [...byKind.entries()].sort((a, b) => b[1].length - a[1].length);
  const counts = groups.map(([kind, group]) => `${group.length} ${REASON_KINDS[kind]}`).join(", ");
  const noun = items.length === 1 ? "conversation needs" : "conversations need";
  const lines = [`${items.length} WhatsApp ${noun} a person (${counts}):`];
  for (const [kind, group] of groups) {
    lines.push("", `${REASON_KINDS[kind]} (${group.length})`);
    for (const item of group) {
      const title = explain({ source: item.source, code: item.code, reason: "" }).title;
      const closed = item.state === "open" ? "" : ` [already ${item.state}]`;
      lines.push(`- ${customerLabel(item.contact)}: ${title}${closed} ${itemLink(publicBaseUrl, item.id)}`);
    }
  }
  lines.push("", `The staff queue: ${publicBaseUrl}/admin`);
  return { subject: `${items.length} WhatsApp ${noun} a person (${counts})`, text: lines.join("\n") };
}
