import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runEvalCli } from "../src/eval/cli.ts";
import { type Business, citedHours, startBusiness } from "./support/business-fixture.ts";
import { type AnswerBlock, FakeAnthropic } from "./support/fake-anthropic.ts";
import { FakeGraph } from "./support/fake-graph.ts";
import { eventually, startHarness, testEnv } from "./support/harness.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 34.1: `npm run eval` runs the business's questions through the code that answers
 * customers (src/eval/ over src/replies/tool-loop.ts), with the tools stubbed: against the fake
 * Messages API, a file with a cited answer, a stubbed tool, a handoff, a rubric, a case that
 * fails and a tool no stub answers gives the exit codes, the JSON and the JUnit XML it should,
 * while the business's API and the Graph API see no request; and an eval's request to Claude is
 * a live reply's, byte for byte, for the same number and words.
 */

const toolUse = (id: string, name: string, input: unknown): AnswerBlock => ({ type: "tool_use", id, name, input });

let root: string;
let claude: FakeAnthropic;
let graph: FakeGraph;
let business: Business;
let env: Record<string, string>;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "eval-"));
  business = await startBusiness(root, { lookup_order: ["GET", "/orders/{orderId}", ["orderId"]], book_fitting: ["POST", "/fittings", ["day"]] });
  [claude, graph] = await Promise.all([new FakeAnthropic().start(), new FakeGraph().start()]);
  env = testEnv({ ANTHROPIC_BASE_URL: claude.url, GRAPH_API_BASE_URL: graph.url, PHONE_NUMBERS_FILE: business.numbersFile });
});

afterAll(async () => {
  await Promise.all([claude?.stop(), graph?.stop(), business?.stop()]);
  await rm(root, { recursive: true, force: true });
});

/** Runs `npm run eval`'s CLI in this process: what it printed, and its exit code. */
async function evalCli(args: string[], withEnv = env) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runEvalCli(args, withEnv, { out: (line) => out.push(line), err: (line) => err.push(line), tty: false });
  return { code, out, err };
}

const FILE = `number: "${PHONE_NUMBER_ID}"
tools:
  lookup_order:
    - input: { orderId: "A1003" }
      answer: { orderId: "A1003", status: "delivered" }
cases:
  - name: cited
    turns: ["Are you open on Sunday?"]
    expect:
      contains: ["closed"]
      cites: ["hours.md"]
      noTools: true
      handoff: false
  - name: order
    turns: ["Hello", "Where is my order A1003?"]
    expect:
      contains: ["delivered"]
      tools: [{ name: lookup_order, input: { orderId: "A1003" } }]
  - name: handoff
    turns: ["I want a manager"]
    expect:
      handoff: true
  - name: rubric
    turns: ["Do you ship to Porto?"]
    expect:
      rubric: "Says yes, the shop ships to Porto."
  - name: fails
    turns: ["Hi"]
    expect:
      contains: ["discount"]
  - name: unstubbed
    turns: ["Book me a fitting on Monday"]
    expect:
      tools: [{ name: book_fitting }]
`;

describe("npm run eval", () => {
  it("runs each case through the tool loop with stubs: exit 1 below --min-pass, the JSON and JUnit reports, and no request to the business or to Meta", async () => {
    const file = join(root, "cases.yaml");
    await writeFile(file, FILE);
    claude.answer(
      // cited
      citedHours(),
      // order: a greeting, then the lookup and its answer
      { text: "Hello! How can I help?" },
      { content: [toolUse("toolu_order", "lookup_order", { orderId: "A1003" })] },
      { text: "Your order A1003 was delivered." },
      // handoff
      { content: [toolUse("toolu_handoff", "handoff_to_human", { reason: "The customer asks for a manager." })] },
      // rubric: the answer, then the judge
      { text: "Yes, we ship to Porto in two days." },
      { content: [toolUse("toolu_grade", "grade", { pass: true, reason: "It says yes, to Porto." })] },
      // fails
      { text: "Hello!" },
      // unstubbed: the booking asked for, no stub answers it, Claude says so
      { content: [toolUse("toolu_book", "book_fitting", { orderId: "none", day: "Monday" })] },
      { text: "I cannot book that right now." },
    );
    const before = claude.requests.length;
    const json = join(root, "report.json");
    const junit = join(root, "report.xml");
    const run = await evalCli([file, "--concurrency", "1", "--json", json, "--junit", junit]);
    expect(run.err).toEqual([]);
    expect(run.code).toBe(1);
    expect(claude.requests.length - before).toBe(10);
    expect(run.out.filter((line) => /^[✓✗] /.test(line)).map((line) => line.replace(/ \(.*\)$/, ""))).toEqual([
      "✓ cited",
      "✓ order",
      "✓ handoff",
      "✓ rubric",
      "✗ fails",
      "✗ unstubbed",
    ]);
    expect(run.out).toContain("    contains “discount”: the answer was “Hello!”");
    expect(run.out).toContain('    a stub answers book_fitting {"orderId":"none","day":"Monday"}: no stub in the file matches that input');
    expect(run.out.join("\n")).toMatch(/4 of 6 cases passed \(67%; needed 100%\); failed expectations: contains 1, stub 1/);
    expect(run.out.join("\n")).toMatch(/Claude: 10 calls, tokens in \d+, out \d+/);

    // Nothing left: no request reached the business (the lookup was stubbed, the booking not run) or Meta.
    expect(business.requests).toEqual([]);
    expect(graph.requests).toEqual([]);
    // Claude read the stub's answer as the business's, and the one no stub answered as not run.
    expect(JSON.stringify(claude.requests[before + 3]!.messages)).toContain('{\\"orderId\\":\\"A1003\\",\\"status\\":\\"delivered\\"}');
    expect(JSON.stringify(claude.requests[before + 9]!.messages)).toContain("Not run: book_fitting is not called here");

    const report = JSON.parse(await readFile(json, "utf8"));
    expect(report).toMatchObject({ passed: 4, total: 6, ok: false, claudeCalls: 10, failedByKind: { contains: 1, stub: 1 } });
    const byName = Object.fromEntries(report.cases.map((c: { name: string }) => [c.name, c]));
    expect(byName.cited.answers[0].citations).toEqual([expect.objectContaining({ source: "hours.md", citedText: "Closed on Sundays." })]);
    expect(byName.order.answers.map((a: { text: string }) => a.text)).toEqual(["Hello! How can I help?", "Your order A1003 was delivered."]);
    expect(byName.order.answers[1].toolCalls).toEqual([
      { name: "lookup_order", input: { orderId: "A1003" }, answer: '{"orderId":"A1003","status":"delivered"}', isError: false, how: "stubbed" },
    ]);
    expect(byName.handoff.answers[0].handoff).toBe("The customer asks for a manager.");
    expect(byName.rubric.rubric).toEqual({ pass: true, reason: "It says yes, to Porto." });
    expect(byName.fails.expectations).toEqual([{ kind: "contains", expected: "contains “discount”", pass: false, seen: "the answer was “Hello!”" }]);
    expect(byName.unstubbed.answers[0].toolCalls[0]).toMatchObject({ name: "book_fitting", how: "not_run" });

    const xml = await readFile(junit, "utf8");
    expect(xml).toMatch(/<testsuite name="[^"]*cases\.yaml" tests="6" failures="2" errors="0"/);
    expect(xml.match(/<testcase /g)).toHaveLength(6);
    expect(xml).toMatch(/<testcase [^>]*name="fails"[^>]*>\s*<failure message="contains “discount”: the answer was “Hello!”">/);
    expect(xml).toMatch(/<testcase [^>]*name="cited"[^>]*\/>/);
  });

  it("--case runs one; the share passed against --min-pass decides 0 or 1", async () => {
    const file = join(root, "cases.yaml");
    await writeFile(file, FILE);
    claude.answer({ text: "Hello!" });
    expect((await evalCli([file, "--case", "fails"])).code).toBe(1);
    claude.answer({ text: "Hello!" });
    expect((await evalCli([file, "--case", "fails", "--min-pass", "0"])).code).toBe(0);
  });

  it("a bad file, option or number is exit 2, every problem named with its line, and Claude is never asked", async () => {
    const file = join(root, "bad.yaml");
    await writeFile(
      file,
      `number: "${PHONE_NUMBER_ID}"
tools:
  send_flowers:
    - answer: yes
cases:
  - name: a
    turns: []
    expect: { contains: ["x"], matches: "((" }
`,
    );
    const before = claude.requests.length;
    const bad = await evalCli([file]);
    expect(bad.code).toBe(2);
    expect(bad.err).toEqual([
      `${file}:7: cases.0.turns: a case needs at least one customer turn`,
      `${file}:8: cases.0.expect.matches: matches is not a valid regular expression`,
    ]);
    await writeFile(file, `number: "999"\ntools:\n  send_flowers:\n    - answer: yes\ncases:\n  - name: a\n    turns: ["hi"]\n    expect: {}\n`);
    const unknown = await evalCli([file]);
    expect(unknown.code).toBe(2);
    expect(unknown.err).toEqual([
      `${file}:1: number 999 is not an entry of PHONE_NUMBERS_FILE (${PHONE_NUMBER_ID})`,
      `${file}:4: tools.send_flowers: number 999 has no tool named send_flowers (its toolsFile)`,
    ]);
    expect((await evalCli([file, "--concurrency", "0"])).err[0]).toBe("--concurrency must be a whole number from 1 to 32");
    expect((await evalCli([])).code).toBe(2);
    expect(claude.requests.length).toBe(before);
  });

  it("asks Claude exactly what a live reply asks, for the same number and words", async () => {
    const h = await startHarness({ env: { PHONE_NUMBERS_FILE: business.numbersFile, REPLY_DEBOUNCE_MS: "0" } });
    try {
      h.startWorkers();
      await h.deliver(textWebhook({ text: "Are you open on Sunday?" }).body);
      await eventually(() => h.graph.sentTexts.length > 0, "the live reply");
      const live = h.claude.requests[0]!;
      const file = join(root, "same.yaml");
      await writeFile(file, `number: "${PHONE_NUMBER_ID}"\ncases:\n  - name: same\n    turns: ["Are you open on Sunday?"]\n    expect: {}\n`);
      const before = claude.requests.length;
      expect((await evalCli([file])).code).toBe(0);
      expect(claude.requests[before]).toEqual(live);
    } finally {
      await h.close();
    }
  });
});
