import { createHash } from "node:crypto";

/**
 * The people writing in: known by phone number, or by a username with the number hidden and
 * only a business-scoped user id (BSUID) to reach them by (WHATSAPP.md §9).
 */

export interface Customer {
  /** The chat's key: the phone number, else the BSUID. */
  key: string;
  name: string;
  /** Absent when the customer hides their number behind a username (WHATSAPP.md §9). */
  phone?: string;
  /** The business-scoped user id: Meta always sends one since 2026. */
  userId: string;
  username?: string;
}

export type CustomerMessage = (
  | { text: string }
  | { image: { bytes: Buffer; mimeType: string; caption?: string } }
  | { document: { bytes: Buffer; mimeType: string; filename: string; caption?: string } }
  | { voice: { bytes: Buffer; mimeType: string } }
  | { location: { latitude: number; longitude: number; name?: string; address?: string } }
  | { button: { id: string; title: string } }
) & { replyTo?: string };

export type CustomerInput = { name?: string | undefined; phone?: string | undefined; username?: string | undefined; userId?: string | undefined };

export class DemoInputError extends Error {
  override readonly name = "DemoInputError";
}

export const PHONE = /^\d{6,15}$/;
export const BSUID = /^[A-Z]{2}\.[A-Za-z0-9]{1,128}$/;

export function newCustomer(input: CustomerInput): Customer {
  const phone = input.phone?.replace(/\D/g, "");
  if (phone !== undefined && !PHONE.test(phone)) throw new DemoInputError("a phone number is 6 to 15 digits");
  if (input.userId !== undefined && !BSUID.test(input.userId))
    throw new DemoInputError('a BSUID is a country code, a dot and up to 128 letters or digits, e.g. "US.13491208655302741918"');
  if (!phone && !input.userId) throw new DemoInputError("a customer needs a phone number, or a username with a BSUID");
  const key = phone ?? input.userId!;
  const username = input.username?.trim().replace(/^@/, "") || undefined;
  return {
    key,
    name: input.name?.trim() || (username ? `@${username}` : `Customer ${key.slice(-4)}`),
    ...(phone ? { phone } : {}),
    // With a phone number Meta still names the person by a BSUID (WHATSAPP.md §9): a stable one per number.
    userId: input.userId ?? `US.${BigInt(`0x${createHash("sha256").update(key).digest("hex").slice(0, 16)}`).toString()}`,
    ...(username ? { username } : {}),
  };
}
