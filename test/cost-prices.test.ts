import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { estimateCostUsd } from "../src/ai/pricing.ts";
import { isBillable, marketOf, metaAmount } from "../src/costs/meta-rates.ts";
import { loadSettings } from "../src/settings.ts";
import { problemsOf } from "./support/config-problems.ts";
import { testEnv } from "./support/harness.ts";

/** Issue 20: the cost ledger's price lists, MODEL_PRICES_FILE and META_RATES_FILE, checked at start-up. */

const dir = mkdtempSync(join(tmpdir(), "prices-"));
const file = (name: string, content: unknown) => {
  const path = join(dir, name);
  writeFileSync(path, typeof content === "string" ? content : JSON.stringify(content));
  return path;
};

const usage = { inputTokens: 1_000_000, outputTokens: 1_000_000, cacheReadTokens: 1_000_000, cacheCreationTokens: 2_000_000, cacheCreation1hTokens: 1_000_000 };

describe("MODEL_PRICES_FILE", () => {
  it("adds a model and overrides a built-in one's prices; cache prices default to Anthropic's multipliers of input", () => {
    const path = file("prices.json", { "claude-new-6": { input: 2, output: 10 }, "claude-haiku-5-5": { input: 1, output: 4, cacheRead: 0.2 } });
    const { modelPrices } = loadSettings(testEnv({ MODEL_PRICES_FILE: path })).costs;
    // 2 input + 10 output + 0.2 read (0.1×) + 2.5 for 5-minute writes (1.25×) + 4 for 1-hour writes (2×)
    expect(estimateCostUsd("claude-new-6", usage, modelPrices)).toBeCloseTo(18.7, 10);
    expect(estimateCostUsd("claude-new-6-20270101", usage, modelPrices)).toBeCloseTo(18.7, 10);
    expect(estimateCostUsd("claude-haiku-5-5", usage, modelPrices)).toBeCloseTo(1 + 4 + 0.2 + 1.25 + 2, 10);
    // Without the file: the built-in table, and nothing for a model it does not know.
    expect(estimateCostUsd("claude-new-6", usage)).toBeUndefined();
    // (its long-prompt band: 4M prompt tokens are over 100,000; the file's prices above have no band)
    expect(estimateCostUsd("claude-haiku-5-5", usage)).toBeCloseTo(0.5 + 2.5 + 0.05 + 0.625 + 1, 10);
  });

  it("start-up refuses a bad file, naming every problem and where it is", () => {
    const path = file("bad-prices.json", {
      "claude-x": { input: -1 },
      "claude-y": { input: 1, output: "5", colour: "red" },
      "bad id!": { input: 1, output: 1 },
    });
    const problems = problemsOf(testEnv({ MODEL_PRICES_FILE: path }));
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^MODEL_PRICES_FILE claude-x\.input: /),
        expect.stringMatching(/^MODEL_PRICES_FILE claude-x\.output: /),
        expect.stringMatching(/^MODEL_PRICES_FILE claude-y\.output: /),
        expect.stringMatching(/^MODEL_PRICES_FILE claude-y: .*colour/),
        expect.stringMatching(/^MODEL_PRICES_FILE bad id!: a model id/),
      ]),
    );
    expect(problemsOf(testEnv({ MODEL_PRICES_FILE: join(dir, "missing.json") }))).toEqual([
      expect.stringMatching(/^MODEL_PRICES_FILE cannot be read as JSON: ENOENT/),
    ]);
    expect(problemsOf(testEnv({ MODEL_PRICES_FILE: file("not-json.json", "{ input: 1 }") }))).toEqual([
      expect.stringMatching(/^MODEL_PRICES_FILE cannot be read as JSON: /),
    ]);
  });
});

describe("META_RATES_FILE", () => {
  it("the sample rate card in the repo loads", () => {
    const { metaRates } = loadSettings(testEnv({ META_RATES_FILE: "fixtures/meta-rates.example.json" })).costs;
    expect(metaRates?.get("service")?.get("44")).toBeGreaterThan(0);
  });

  it("start-up refuses a bad file, naming every problem and where it is", () => {
    const path = file("bad-rates.json", { service: { "44x": 0.01, "1": "cheap", "33": -1 }, Marketing: { "44": 0.05 } });
    const problems = problemsOf(testEnv({ META_RATES_FILE: path }));
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^META_RATES_FILE service\.44x: a country calling code/),
        expect.stringMatching(/^META_RATES_FILE service\.1: /),
        expect.stringMatching(/^META_RATES_FILE service\.33: /),
        expect.stringMatching(/^META_RATES_FILE Marketing: a pricing category in lower case/),
      ]),
    );
    expect(problemsOf(testEnv({ META_RATES_FILE: file("empty-rates.json", {}) }))).toEqual([expect.stringMatching(/^META_RATES_FILE lists no category/)]);
    expect(problemsOf(testEnv({ META_RATES_FILE: join(dir, "missing.json") }))).toEqual([expect.stringMatching(/^META_RATES_FILE cannot be read as JSON/)]);
  });

  it("a recipient's market is the longest calling code of the card that starts their number; without a number it is unknown", () => {
    const rates = new Map([
      [
        "service",
        new Map([
          ["1", 0.02],
          ["44", 0.01],
          ["*", 0.03],
        ]),
      ],
      ["marketing", new Map([["1242", 0.07]])],
    ]);
    expect(marketOf(rates, "service", "447700900123")).toBe("44");
    expect(marketOf(rates, "marketing", "12425550123")).toBe("1242"); // the Bahamas, not the US and Canada
    // Within the message's category (issue 32.8): service prices +1, so +1 242 is priced as 1 there.
    expect(marketOf(rates, "service", "12425550123")).toBe("1");
    expect(metaAmount(rates, { billable: true, category: "service" }, marketOf(rates, "service", "12425550123"))).toBe(0.02);
    expect(marketOf(rates, "service", "16505550123")).toBe("1");
    expect(marketOf(rates, "service", "33612345678")).toBe("unknown");
    expect(marketOf(rates, "utility", "447700900123")).toBe("unknown");
    expect(marketOf(rates, "service", undefined)).toBe("unknown");
    expect(marketOf(undefined, "service", "447700900123")).toBe("unknown");
    // The card's price; `*` for a market it does not list; nothing for a free message.
    expect(metaAmount(rates, { billable: true, category: "service" }, "44")).toBe(0.01);
    expect(metaAmount(rates, { billable: true, category: "service" }, "unknown")).toBe(0.03);
    expect(metaAmount(rates, { billable: true, category: "marketing" }, "44")).toBeUndefined();
    expect(metaAmount(rates, { billable: false, category: "service" }, "44")).toBe(0);
    expect(metaAmount(undefined, { billable: true, category: "service" }, "unknown")).toBeUndefined();
  });

  it("a message is billed when Meta's pricing type is regular, or, in older webhooks, when it says billable", () => {
    expect(isBillable({ type: "regular" })).toBe(true);
    expect(isBillable({ type: "free_customer_service", billable: true })).toBe(false);
    expect(isBillable({ type: "free_entry_point" })).toBe(false);
    expect(isBillable({ billable: true })).toBe(true);
    expect(isBillable({})).toBe(false);
  });
});
