/** Meta accepts free-form messages only within 24 h of the customer's last message (WHATSAPP.md §7). */
export const SERVICE_WINDOW_MS = 24 * 60 * 60 * 1000;

/** `lastInboundAt` as read at the moment of use: a message that arrived meanwhile extends the window. */
export function windowOpen(lastInboundAt: Date | null, now: Date): boolean {
  return lastInboundAt !== null && now.getTime() - lastInboundAt.getTime() < SERVICE_WINDOW_MS;
}
