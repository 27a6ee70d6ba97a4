import type { PriceOverrides } from "../ai/pricing.ts";
import { costsByDay, totalOf, utcDay } from "../costs/ledger.ts";
import type { Db } from "../db/client.ts";
import {
  type Citations,
  type DeadLetterReason,
  deadLetterReasons,
  type HandoffReason,
  handoffReasons,
  knowledgeCitations,
  type ToolUse,
  toolUse,
} from "./breakdowns.ts";
import { type CsatFigures, csatByDay, noCsat } from "./csat.ts";
import { type DailyFigures, dailyFigures, empty, type Range } from "./daily.ts";

/**
 * GET /admin/insights's answer (issue 33): whether the bot helps, every day of the range (days
 * with nothing at 0) and in total, with what lies behind it. Costs are the cost ledger's own
 * figures (src/costs/ledger.ts), not counted a second time.
 */

export interface InsightFigures extends Omit<DailyFigures, "day"> {
  /** resolvedByBot ÷ conversations; null without conversations. */
  automationRate: number | null;
  csat: CsatFigures;
  /** Claude's calls, in USD, as GET /admin/costs counts them. */
  claudeUsd: number;
  /** Meta's billed messages, in META_RATES_FILE's currency (0 without a rate card), as GET /admin/costs counts them. */
  meta: number;
}

export interface Insights {
  days: (InsightFigures & { day: string })[];
  total: InsightFigures;
  handoffReasons: HandoffReason[];
  deadLetterReasons: DeadLetterReason[];
  knowledge: Citations[];
  tools: ToolUse[];
}

export interface InsightSources {
  /** The cost ledger's prices for Claude models (MODEL_PRICES_FILE over the built-in table). */
  modelPrices: PriceOverrides;
  /** The knowledge files each number has now, relative to its knowledgeDir (src/knowledge/walk.ts lists them). */
  knowledgeFiles: () => Promise<ReadonlyMap<string, readonly string[]>>;
}

const DAY_MS = 86_400_000;

/** Every day of the range, in order. */
export function daysOf(range: Pick<Range, "from" | "to">): string[] {
  const days: string[] = [];
  for (let at = Date.parse(range.from); at <= Date.parse(range.to); at += DAY_MS) days.push(utcDay(new Date(at)));
  return days;
}

export async function insightsOf(db: Db, range: Range, sources: InsightSources): Promise<Insights> {
  const [daily, csat, costs, handoffs, failures, files, tools] = await Promise.all([
    dailyFigures(db, range),
    csatByDay(db, range),
    costsByDay(db, range, sources.modelPrices),
    handoffReasons(db, range),
    deadLetterReasons(db, range),
    sources.knowledgeFiles(),
    toolUse(db, range),
  ]);
  const figuresOf = (day: string | null): InsightFigures => {
    const { day: _day, ...figures } = daily.find((row) => row.day === day) ?? empty(day);
    const spent = day === null ? totalOf(costs) : totalOf(costs.filter((row) => row.day === day));
    return {
      ...figures,
      automationRate: figures.conversations === 0 ? null : figures.resolvedByBot / figures.conversations,
      csat: csat.get(day) ?? noCsat(),
      claudeUsd: spent.amounts.claudeUsd,
      meta: spent.amounts.meta,
    };
  };
  return {
    days: daysOf(range).map((day) => ({ day, ...figuresOf(day) })),
    total: figuresOf(null),
    handoffReasons: handoffs,
    deadLetterReasons: failures,
    knowledge: await knowledgeCitations(db, range, files),
    tools,
  };
}
