import { z } from "zod";
import type { Clock } from "../clock.ts";
import { utcDay } from "../costs/ledger.ts";
import { problem, requestPart } from "./schema.ts";

/**
 * The range of UTC days the reporting routes read (GET /admin/costs, GET /admin/insights): one
 * querystring, one default, one set of refusals, so the two answer a bad range in the same words.
 */

/** Seven days ending today, by default; at most a year at once. */
export const DEFAULT_DAYS = 7;
export const MAX_DAYS = 366;
const DAY_MS = 86_400_000;

const day = (name: string) => z.iso.date({ error: `${name} must be a day as YYYY-MM-DD (UTC)` });

/** `from`, `to` and `phoneNumberId`: a route's querystring. */
export const dayRangeQuery = requestPart(
  z.strictObject(
    {
      from: day("from")
        .optional()
        .describe(`the first UTC day, YYYY-MM-DD; default ${DEFAULT_DAYS - 1} days before \`to\``),
      to: day("to").optional().describe("the last UTC day, YYYY-MM-DD, included; default today"),
      phoneNumberId: z.string().regex(/^\d+$/, { error: "phoneNumberId must be a phone_number_id (digits)" }).optional(),
    },
    { error: (issue) => (issue.code === "unrecognized_keys" ? `unknown parameter: ${issue.keys.join(", ")}; use from, to, phoneNumberId` : undefined) },
  ),
  { status: 400, error: (error) => `bad range: ${error.issues.map((issue) => issue.message).join("; ")}` },
);

/** The 400 both routes document. */
export const badRange = problem("a bad range: a day that is not YYYY-MM-DD, `from` after `to`, or over a year (the body says which)");

export interface DayRange {
  /** YYYY-MM-DD, UTC, inclusive. */
  from: string;
  to: string;
}

/** The range asked for, with the defaults filled in, or the words of its 400. */
export function resolveDayRange(query: { from?: string | undefined; to?: string | undefined }, clock: Clock): DayRange | { error: string } {
  const to = query.to ?? utcDay(clock.now());
  const from = query.from ?? utcDay(new Date(Date.parse(to) - (DEFAULT_DAYS - 1) * DAY_MS));
  if (from > to) return { error: `bad range: from (${from}) is after to (${to})` };
  if ((Date.parse(to) - Date.parse(from)) / DAY_MS + 1 > MAX_DAYS) return { error: `bad range: at most ${MAX_DAYS} days at once` };
  return { from, to };
}
