import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Law 1: X-Hub-Signature-256 is HMAC-SHA256 of the body exactly as it arrived. Meta escapes
 * non-ASCII as \uXXXX and "/" as "\/", so re-serialised JSON would not match: hash the bytes.
 */
export function verifyMetaSignature(raw: Buffer, header: string | undefined, appSecret: string): boolean {
  if (typeof header !== "string" || !header.startsWith("sha256=")) return false;
  const hex = header.slice("sha256=".length).trim();
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return false;
  const got = Buffer.from(hex, "hex");
  const want = createHmac("sha256", appSecret).update(raw).digest();
  return timingSafeEqual(got, want);
}

export function signMetaBody(raw: Buffer | string, appSecret: string): string {
  return `sha256=${createHmac("sha256", appSecret).update(raw).digest("hex")}`;
}
