import { fmt, table } from "../bench/stats.ts";
import type { DeliveryStats } from "../sim/meta/deliverer.ts";
import { ledgerHolds } from "../test/support/ledger-reading.ts";
import type { Scenario } from "./scenarios.ts";
import type { Settled } from "./settle.ts";

/**
 * The one table, and a few lines per scenario under it. The goals: 0 lost, one Claude call
 * per answer and per stored tool step (a killed worker's call in flight may be paid twice),
 * one send per reply part; with the shop, each key seen at most twice and acted on once.
 */

export interface ScenarioResult {
  scenario: Scenario;
  note: string;
  claudeAllowance: number;
  outcome: Settled;
  delivery: DeliveryStats;
  duplicatesDelivered: number;
  /** Processes that exited without being killed by the scenario, and how. */
  unexpectedExits: string[];
  elapsedMs: number;
  logDir: string;
}

export interface ScenarioError {
  scenario: Scenario;
  error: unknown;
  logDir: string;
}

export function missedGoals(r: ScenarioResult): string[] {
  const t = r.outcome.tally;
  const missed: string[] = [];
  if (t.lost > 0) missed.push("lost");
  if (t.claudeCalls > claudeCallsNeeded(t) + r.claudeAllowance) missed.push("Claude");
  if (t.sendsTaken > t.partsTaken) missed.push("sends");
  const b = t.business;
  const sightings = r.scenario.keySightings ?? 2;
  if (b && (b.maxSightings > sightings || b.bookings !== b.bookingKeys || b.toolCalls !== b.keys || b.toolCallsUnanswered > 0)) missed.push("business");
  if (!ledgerHolds(t.ledger)) missed.push("ledger");
  return missed;
}

/** One call per answer, and one more per answer Claude gave as a stored step (a tool use). */
const claudeCallsNeeded = (t: ScenarioResult["outcome"]["tally"]) => t.aiRepliesDone + t.claudeSteps;

const ratio = (n: number, d: number) => (d === 0 ? (n === 0 ? "-" : `∞ (${n}/0)`) : `${fmt(n / d, 3)} (${n}/${d})`);

export function formatReport(results: (ScenarioResult | ScenarioError)[]): string {
  const rows = results.map((r) => {
    const name = `${r.scenario.id}. ${r.scenario.slug}`;
    if ("error" in r) return [name, "-", "-", "-", "-", "-", "-", "-", `ERROR (logs: ${r.logDir})`];
    const t = r.outcome.tally;
    const missed = missedGoals(r);
    return [
      name,
      fmt(t.sentIn),
      fmt(t.answered),
      fmt(t.deadLettered),
      fmt(t.lost),
      ratio(t.claudeCalls, claudeCallsNeeded(t)),
      ratio(t.sendsTaken, t.partsTaken),
      `${fmt(t.ledger.tokens)}/${fmt(t.ledger.billedTokens)} tokens` + (t.ledger.unsettled ? ` (+${t.ledger.unsettled} unread)` : ""),
      missed.length ? `GOAL MISSED: ${missed.join(", ")}` : "met",
    ];
  });
  const out = [
    table(["scenario", "sent in", "answered", "dead-lettered", "lost", "Claude calls/needed", "sends/part", "ledger", "goal"], rows),
    "",
    "  goal: 0 lost, Claude calls per call needed 1.000 (one per answer, one more per stored tool step; 8: plus the calls in flight",
    "  in the killed worker, whose answers nobody reads), sends per reply part 1.000; 9: the business sees each key at most twice and acts once;",
    "  10: it acts once per key (a key repeated until it answers). ledger: the tokens of the claude_calls rows / the tokens the fake",
    "  Anthropic billed, equal (a call whose answer nobody read stays at its reservation).",
    "  answered: its reply reached the customer (Meta took a send of one of its parts, or the reply is `sent`); dead-lettered: reply",
    "  dead with an open dead letter; lost: everything else (skipped messages aside), counted after the system settled or at the deadline.",
    "",
  ];
  for (const r of results) out.push(...details(r), "");
  return out.join("\n").trimEnd();
}

function details(r: ScenarioResult | ScenarioError): string[] {
  const head = `${r.scenario.id}. ${r.scenario.slug}`;
  if ("error" in r) {
    const message = r.error instanceof Error ? r.error.message : String(r.error);
    return [`${head}: the scenario could not run: ${message}`, `   logs: ${r.logDir}`];
  }
  const t = r.outcome.tally;
  const lines = [`${head}: ${r.note}`];
  const facts: string[] = [];
  facts.push(r.outcome.settled ? `settled after ${fmt(r.elapsedMs / 1000)} s` : `deadline reached after ${fmt(r.elapsedMs / 1000)} s, not settled`);
  if (t.lost > 0) {
    const why = [
      t.lostBecause.neverStored ? `${t.lostBecause.neverStored} never stored` : "",
      t.lostBecause.neverBound ? `${t.lostBecause.neverBound} stored but never given a reply` : "",
      ...Object.entries(t.lostBecause.replyState).map(([state, n]) => `${n} with a reply left "${state}"`),
    ].filter(Boolean);
    facts.push(`lost: ${why.join(", ")}`);
  }
  if (r.unexpectedExits.length) facts.push(`exited by themselves: ${r.unexpectedExits.join(", ")}`);
  if (t.skipped) facts.push(`${t.skipped} skipped on purpose`);
  if (t.answeredYetDeadLettered) facts.push(`${t.answeredYetDeadLettered} answered yet listed as open dead letters`);
  if (t.unfinished) facts.push(`${t.unfinished} replies/parts left unfinished`);
  const b = t.business;
  if (b) {
    facts.push(
      `business: ${b.toolCalls} tool calls (${t.claudeSteps} Claude steps stored), ${b.keys} keys, ${b.repeatedKeys} seen twice or more, at most ${b.maxSightings} times; ` +
        `${b.bookings} bookings for ${b.bookingKeys} booking keys` +
        (b.toolCallsUnanswered ? `; ${b.toolCallsUnanswered} tool calls with no stored answer` : "") +
        (b.toolCallsUnknown ? `; ${b.toolCallsUnknown} left unknown for a person` : ""),
    );
  }
  const failed = Object.entries(r.outcome.failedJobs).filter(([, n]) => n !== 0);
  if (failed.length) facts.push(`BullMQ failed set: ${failed.map(([q, n]) => `${q} ${Number.isNaN(n) ? "?" : n}`).join(", ")}`);
  const refused = Object.entries(r.delivery.refused);
  facts.push(
    `webhooks: ${r.delivery.posts} POSTs (${r.duplicatesDelivered} duplicate deliveries)` +
      (refused.length ? `, refused ${refused.map(([s, n]) => `${s}×${n}`).join(" ")}` : ", all 200 first time") +
      (r.delivery.abandoned ? `, ${r.delivery.abandoned} never acknowledged` : ""),
  );
  lines.push(`   ${facts.join("; ")}`);
  if (missedGoals(r).length || r.unexpectedExits.length || !r.outcome.settled) lines.push(`   logs: ${r.logDir}`);
  return lines;
}
