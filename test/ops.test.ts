import { readFileSync } from "node:fs";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { buildMetricsApp } from "../src/app.ts";
import { graphError } from "./support/fake-graph.ts";
import { eventually, type Harness, startHarness } from "./support/harness.ts";
import { parseSamples, type Sample } from "./support/prometheus-text.ts";
import { statusWebhook, textWebhook } from "./support/webhook-bodies.ts";

/**
 * The alert rules and the dashboard in ops/ cannot rot: every metric and label they name is
 * on a real /metrics answer of a system that has done some work (a reply answered, a dead
 * letter, a duplicate delivery), and what they print ({{ $labels.x }}, {{x}}) survives their
 * aggregation.
 */

interface Rule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: string };
  annotations: { summary: string; description: string };
}

interface Query {
  where: string;
  expr: string;
  /** Labels the result is shown with: an alert's {{ $labels.x }}, a panel's {{x}}. */
  printed: string[];
}

// Shaped as Prometheus rule files are; the first test checks each rule has what it needs.
const rules = (parse(readFileSync("ops/prometheus/alerts.yml", "utf8")) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const dashboard = JSON.parse(readFileSync("ops/grafana/dashboard.json", "utf8")) as { panels: Panel[] };
interface Panel {
  title: string;
  panels?: Panel[];
  targets?: { expr: string; legendFormat?: string }[];
}

const ruleQueries: Query[] = rules.map((rule) => ({
  where: `alert ${rule.alert}`,
  expr: rule.expr,
  printed: [...`${rule.annotations.summary} ${rule.annotations.description}`.matchAll(/\{\{\s*\$labels\.(\w+)\s*\}\}/g)].map((m) => m[1]!),
}));
const panelQueries: Query[] = dashboard.panels
  .flatMap((panel) => [panel, ...(panel.panels ?? [])])
  .flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({
      where: `panel "${panel.title}"`,
      expr: target.expr,
      printed: [...(target.legendFormat ?? "").matchAll(/\{\{\s*(\w+)\s*\}\}/g)].map((m) => m[1]!),
    })),
  );

/** Our series an expression names, with the label names its selector matches on. */
function selectors(expr: string): { metric: string; labels: string[] }[] {
  return [...expr.matchAll(/\b(wa_[a-zA-Z0-9_]+)(\{[^}]*\})?/g)].map((m) => ({
    metric: m[1]!,
    labels: [...(m[2] ?? "").matchAll(/([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)/g)].map((l) => l[1]!),
  }));
}

/** The labels the expression groups by (sum by (a, b) ...). */
const groupedBy = (expr: string) =>
  [...expr.matchAll(/\bby\s*\(([^)]*)\)/g)].flatMap((m) =>
    m[1]!
      .split(",")
      .map((l) => l.trim())
      .filter(Boolean),
  );

let h: Harness;
let samples: Sample[];
beforeAll(async () => {
  h = await startHarness({ env: { META_RATES_FILE: "fixtures/meta-rates.example.json" } });
  const metricsApp = buildMetricsApp({ logger: pino({ level: "silent" }), queues: h.queues, db: h.db, metrics: h.metrics });
  try {
    const answered = textWebhook({ text: "what time do you open?" });
    await h.deliver(answered.body);
    await h.deliver(answered.body); // Meta delivers it again
    const sent = await eventually(() => h.db.outboundMessage.findFirst({ where: { wamid: { not: null } } }), "one reply answered");
    // Meta prices it (issue 20's cost series).
    const pricing = { pricing_model: "PMP", type: "regular", category: "service" };
    await h.deliver(statusWebhook({ id: sent.wamid!, status: "sent", recipient_id: "16505551234", pricing }));
    await eventually(async () => (await h.db.outboundMessage.findUniqueOrThrow({ where: { id: sent.id } })).pricedAt, "the reply priced");
    h.graph.answerSends({ status: 400, body: graphError(131026, "Message undeliverable") });
    await h.deliver(textWebhook({ from: "16505550000", text: "hello?" }).body);
    await eventually(() => h.db.deadLetter.findFirst(), "one dead letter");
    const text = await eventually(async () => {
      const body = (await metricsApp.inject({ method: "GET", url: "/metrics" })).body;
      return body.includes("wa_dead_letters_created_total{") && body.includes('wa_jobs_total{queue="reply",outcome="dead_lettered"}') ? body : undefined;
    }, "the dead letter to be counted");
    samples = parseSamples(text);
  } finally {
    await metricsApp.close();
  }
}, 60_000);
afterAll(async () => h?.close());

function labelsOf(metric: string): Set<string> | undefined {
  const found = samples.filter((s) => s.name === metric);
  return found.length === 0 ? undefined : new Set(found.flatMap((s) => Object.keys(s.labels)));
}

/** What is wrong with a query against the scrape, in words; empty when nothing is. */
function problems(query: Query): string[] {
  const found = selectors(query.expr);
  if (found.length === 0) return [`${query.where} names none of our metrics: ${query.expr}`];
  const wrong: string[] = [];
  const available = new Set<string>();
  for (const { metric, labels } of found) {
    const has = labelsOf(metric);
    if (!has) {
      wrong.push(`${query.where}: no metric ${metric} on /metrics`);
      continue;
    }
    for (const label of has) available.add(label);
    for (const label of labels) if (!has.has(label)) wrong.push(`${query.where}: ${metric} has no label "${label}" (it has ${[...has].join(", ") || "none"})`);
  }
  for (const label of groupedBy(query.expr)) if (!available.has(label)) wrong.push(`${query.where}: groups by "${label}", which none of its metrics has`);
  const kept = new Set(groupedBy(query.expr));
  for (const label of query.printed) if (!kept.has(label)) wrong.push(`${query.where}: prints "${label}", which its aggregation drops`);
  return wrong;
}

describe("ops/prometheus/alerts.yml", () => {
  it("every rule has a unique name, an expression, a duration, a severity and words for the person it pages", () => {
    expect(rules.length).toBeGreaterThan(0);
    expect(new Set(rules.map((r) => r.alert)).size).toBe(rules.length);
    for (const rule of rules) {
      expect(rule.alert, JSON.stringify(rule)).toMatch(/^[A-Z][A-Za-z0-9]+$/);
      expect(rule.for, rule.alert).toMatch(/^\d+[smh]$/);
      expect(["page", "warning"], rule.alert).toContain(rule.labels.severity);
      expect(rule.annotations.summary, rule.alert).not.toBe("");
      expect(rule.annotations.description, rule.alert).not.toBe("");
    }
  });

  it("alerts on what on-call needs: DLQ growth, duplicate spikes, old jobs, webhook p99, Claude errors, Meta's 131047 and 130429", () => {
    const exprs = rules.map((r) => r.expr).join("\n");
    for (const needed of [
      "wa_dead_letters_created_total",
      'wa_webhook_items_total{outcome="duplicate"}',
      "wa_queue_oldest_waiting_seconds",
      "histogram_quantile(0.99, sum by (le) (rate(wa_webhook_duration_seconds_bucket",
      'wa_claude_calls_total{outcome!="ok"}',
      'wa_graph_errors_total{code="131047"}',
      'wa_graph_errors_total{code="130429"}',
    ]) {
      expect(exprs).toContain(needed);
    }
  });

  it("every metric and label the rules name is on a real /metrics answer", () => {
    expect(ruleQueries.flatMap(problems)).toEqual([]);
  });
});

describe("ops/grafana/dashboard.json", () => {
  it("every metric and label its panels name is on a real /metrics answer", () => {
    expect(panelQueries.length).toBeGreaterThan(0);
    expect(panelQueries.flatMap(problems)).toEqual([]);
  });

  it("shows every one of our series that /metrics has", () => {
    const family = (name: string) => name.replace(/_(bucket|sum|count)$/, "");
    const shown = new Set(panelQueries.flatMap((q) => selectors(q.expr).map((s) => family(s.metric))));
    const ours = new Set(samples.filter((s) => s.name.startsWith("wa_")).map((s) => family(s.name)));
    expect([...ours].filter((name) => !shown.has(name))).toEqual([]);
  });
});
