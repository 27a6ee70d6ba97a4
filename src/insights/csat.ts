import type { Db } from "../db/client.ts";
import { boundsOf, type Range } from "./daily.ts";

/**
 * What customers said when asked how it went (CSAT_* settings, issue 33.3), per UTC day of the
 * question and over the range (`day` null): the asks sent (`csat_asks`, src/state/csat.ts), and
 * of those the ones rated, by rating (the latest tap: a second one replaces the first).
 */

export interface CsatFigures {
  /** Questions sent that day. */
  asked: number;
  /** Of those, answered with a rating. */
  answered: number;
  good: number;
  okay: number;
  bad: number;
}

export const noCsat = (): CsatFigures => ({ asked: 0, answered: 0, good: 0, okay: 0, bad: 0 });

export async function csatByDay(db: Db, range: Range): Promise<Map<string | null, CsatFigures>> {
  const { since, until, number } = boundsOf(range);
  const rows = await db.$queryRaw<(CsatFigures & { day: string | null })[]>`
    SELECT to_char(a.asked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, count(*)::int AS asked,
           (count(*) FILTER (WHERE a.rating IS NOT NULL))::int AS answered, (count(*) FILTER (WHERE a.rating = 'good'))::int AS good,
           (count(*) FILTER (WHERE a.rating = 'okay'))::int AS okay, (count(*) FILTER (WHERE a.rating = 'bad'))::int AS bad
    FROM csat_asks a JOIN conversations c ON c.id = a.conversation_id
    WHERE a.asked_at >= ${since}::timestamptz AND a.asked_at < ${until}::timestamptz
      AND (${number}::text IS NULL OR c.phone_number_id = ${number}::text)
    GROUP BY GROUPING SETS ((to_char(a.asked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')), ())`;
  return new Map(rows.map(({ day, ...figures }) => [day, figures]));
}
