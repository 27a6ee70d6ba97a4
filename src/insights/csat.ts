import type { Db } from "../db/client.ts";
import type { Range } from "./daily.ts";

/**
 * What customers said when asked how it went (CSAT_* settings, issue 33.1), per UTC day and
 * over the range (`day` null). The asks are stored in `csat_asks` (one row per question: its
 * conversation, `asked_at`, and `rating` good | okay | bad with `rated_at` once answered), which
 * is not in this tree yet: until it is, nobody was asked and every figure is 0. Filling this in
 * is one query grouped like src/insights/daily.ts's: by `asked_at`'s day and over the range.
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

export async function csatByDay(_db: Db, _range: Range): Promise<Map<string | null, CsatFigures>> {
  return new Map();
}
