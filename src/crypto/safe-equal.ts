import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Constant-time string comparison that does not leak the expected length through timing: the
 * verify token, the staff bearer token, the metrics token and CSRF tokens are all compared so.
 */
export function safeEqual(given: string, expected: string): boolean {
  const a = createHmac("sha256", "compare").update(given).digest();
  const b = createHmac("sha256", "compare").update(expected).digest();
  return timingSafeEqual(a, b);
}
