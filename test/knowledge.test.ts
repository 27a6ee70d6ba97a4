import { mkdir, mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createDb, type Db } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { KnowledgeDirectory } from "../src/knowledge/directory.ts";
import { type KnowledgeBase, type KnowledgeBaseDeps, type KnowledgeForClaude, startKnowledgeBase } from "../src/knowledge/knowledge.ts";
import { PASSAGE_MAX_WORDS, PASSAGE_MIN_WORDS, splitIntoPassages } from "../src/knowledge/passages.ts";
import type { Logger } from "../src/logger.ts";
import { filler } from "./support/filler.ts";
import { dropSchema, eventually, TEST_DATABASE_URL, withSchema } from "./support/harness.ts";
import { makePdf } from "./support/pdf.ts";

const schema = `k_${Math.random().toString(36).slice(2, 10)}`;
const databaseUrl = withSchema(TEST_DATABASE_URL, schema);
let db: Db;
beforeAll(async () => {
  await migrate(databaseUrl);
  db = createDb(databaseUrl, { poolSize: 4 });
});
afterAll(async () => {
  await db?.$disconnect();
  await dropSchema(schema);
});

let opened: KnowledgeBase[] = [];
let dirs: string[] = [];
let otherDbs: Db[] = [];
afterEach(async () => {
  await Promise.all(opened.map((knowledge) => knowledge.close()));
  await Promise.all(otherDbs.map((other) => other.$disconnect()));
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  opened = [];
  dirs = [];
  otherDbs = [];
});

interface LogLine {
  event?: string;
  file?: string;
  [key: string]: unknown;
}

/** A logger whose lines the test reads back, as they would be written. */
function capturedLogger(): { logger: Logger; lines: LogLine[]; raw: string[] } {
  const lines: LogLine[] = [];
  const raw: string[] = [];
  const logger = pino(
    { level: "debug" },
    {
      write(line: string) {
        raw.push(line);
        lines.push(JSON.parse(line) as LogLine);
      },
    },
  );
  return { logger, lines, raw };
}

async function knowledgeDir(files: Record<string, string | Buffer>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "knowledge-"));
  dirs.push(dir);
  await writeFiles(dir, files);
  return dir;
}

async function writeFiles(dir: string, files: Record<string, string | Buffer>): Promise<void> {
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(dir, path, ".."), { recursive: true });
    await writeFile(join(dir, path), content);
  }
}

/** KNOWLEDGE_MAX_FILES's and KNOWLEDGE_MAX_BYTES's defaults (test/knowledge-folder.test.ts tests them). */
const LIMITS = { maxFiles: 2_000, maxBytes: 50 * 1024 * 1024 };

let numbers = 0;
/** Each test its own business number: passages stored by one test are never another's. */
function phoneNumberId(): string {
  numbers++;
  return `10654035224${String(numbers).padStart(4, "0")}`;
}

async function open(deps: Partial<KnowledgeBaseDeps> & Pick<KnowledgeBaseDeps, "dirs">): Promise<KnowledgeBase> {
  const knowledge = await startKnowledgeBase({
    db,
    logger: pino({ level: "silent" }),
    tokenBudget: 30_000,
    limits: LIMITS,
    language: "simple",
    pollMs: 50,
    ...deps,
  });
  opened.push(knowledge);
  return knowledge;
}

function documentsOf(answer: KnowledgeForClaude | undefined) {
  if (answer?.kind !== "documents") throw new Error(`expected documents, got ${answer?.kind}`);
  return answer.documents;
}

function passagesOf(answer: KnowledgeForClaude | undefined) {
  if (answer?.kind !== "passages") throw new Error(`expected passages, got ${answer?.kind}`);
  return answer;
}

const words = (text: string) => text.match(/\S+/g) ?? [];

describe("knowledge sent whole", () => {
  it("small knowledge is sent as documents in path order: Markdown and text as text/plain, a PDF as its own bytes", async () => {
    const pdf = makePdf([["Opening hours: Monday to Friday, 9 to 18."], ["Closed on public holidays."]]);
    const dir = await knowledgeDir({
      "returns.md": "# Returns\n\nUnworn shoes can be returned within 30 days.\n",
      "faq/delivery.txt": "Delivery takes two working days.\n",
      "hours.pdf": pdf,
    });
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, dir]]) });

    const answer = await knowledge.forReply(number, "when are you open?");
    expect(answer).toMatchObject({ kind: "documents", version: expect.stringMatching(/^[0-9a-f]{32}$/) });
    expect(documentsOf(answer)).toEqual([
      { title: "faq/delivery.txt", mediaType: "text/plain", text: "Delivery takes two working days.\n" },
      { title: "hours.pdf", mediaType: "application/pdf", base64: pdf.toString("base64") },
      { title: "returns.md", mediaType: "text/plain", text: "# Returns\n\nUnworn shoes can be returned within 30 days.\n" },
    ]);
    // The same knowledge, the same bytes: Anthropic's prompt cache holds across replies.
    expect(await knowledge.forReply(number, "something else entirely")).toEqual(answer);
  });

  it("a number without a knowledgeDir, or with an empty one, has no knowledge", async () => {
    const empty = await knowledgeDir({ "blank.md": "  \n" });
    const withEmptyDir = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[withEmptyDir, empty]]) });
    expect(await knowledge.forReply(withEmptyDir, "hello")).toBeUndefined();
    expect(await knowledge.forReply(phoneNumberId(), "hello")).toBeUndefined();
  });

  it("the budget decides: tokens are estimated from characters (3.5 a token), and each PDF page adds 1 500 for its image", async () => {
    const dir = await knowledgeDir({ "a.txt": "x".repeat(350) }); // 100 tokens
    const fits = phoneNumberId();
    const over = phoneNumberId();
    const atBudget = await open({ dirs: new Map([[fits, dir]]), tokenBudget: 100 });
    const overBudget = await open({ dirs: new Map([[over, dir]]), tokenBudget: 99 });
    expect((await atBudget.forReply(fits, "x"))?.kind).toBe("documents");
    expect((await overBudget.forReply(over, "x"))?.kind).toBe("passages");

    const onePage = await knowledgeDir({ "leaflet.pdf": makePdf([["A few words."]]) });
    const pdfNumber = phoneNumberId();
    const small = await open({ dirs: new Map([[pdfNumber, onePage]]), tokenBudget: 1_000 });
    expect((await small.forReply(pdfNumber, "words"))?.kind).toBe("passages");
  });
});

describe("the version", () => {
  it("changes exactly when a file is changed, added or removed, and is the same for every process reading the same files", async () => {
    const dir = await knowledgeDir({ "returns.md": "Returns within 30 days.", "faq/hours.txt": "9 to 18." });
    const logger = pino({ level: "silent" });
    const reader = new KnowledgeDirectory(dir, logger, LIMITS);
    const first = (await reader.scan()).version;

    expect((await reader.scan()).version).toBe(first);
    const later = new Date(Date.now() + 60_000);
    await utimes(join(dir, "returns.md"), later, later); // touched, not changed
    await writeFile(join(dir, "faq/hours.txt"), "9 to 18."); // written again, the same
    await writeFile(join(dir, "notes.docx"), "not knowledge");
    expect((await reader.scan()).version).toBe(first);

    await writeFile(join(dir, "returns.md"), "Returns within 60 days.");
    const changed = (await reader.scan()).version;
    expect(changed).not.toBe(first);
    await writeFile(join(dir, "returns.md"), "Returns within 30 days.");
    expect((await reader.scan()).version).toBe(first);

    await writeFile(join(dir, "faq/more.md"), "More.");
    const added = (await reader.scan()).version;
    expect(new Set([first, changed, added]).size).toBe(3);
    await rm(join(dir, "faq/more.md"));
    expect((await reader.scan()).version).toBe(first);

    // Another process, another copy of the same files at another path: the same version.
    const copy = await knowledgeDir({ "returns.md": "Returns within 30 days.", "faq/hours.txt": "9 to 18." });
    expect((await new KnowledgeDirectory(copy, logger, LIMITS).scan()).version).toBe(first);
  });

  it("a change, an addition and a removal are served without a restart within 5 s (default polling)", async () => {
    const dir = await knowledgeDir({ "returns.md": "Returns within 30 days." });
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, dir]]), pollMs: undefined });
    const titlesAndTexts = async () => documentsOf(await knowledge.forReply(number, "returns")).map((d) => `${d.title}: ${d.text}`);
    expect(await titlesAndTexts()).toEqual(["returns.md: Returns within 30 days."]);

    await writeFile(join(dir, "returns.md"), "Returns within 60 days.");
    await eventually(async () => (await titlesAndTexts()).includes("returns.md: Returns within 60 days."), "the changed file", 5_000);
    await writeFile(join(dir, "hours.txt"), "9 to 18.");
    await eventually(async () => (await titlesAndTexts()).length === 2, "the added file", 5_000);
    await rm(join(dir, "returns.md"));
    await eventually(async () => (await titlesAndTexts()).join() === "hours.txt: 9 to 18.", "the removed file gone", 5_000);
  });

  it("a knowledgeDir that does not exist yet is logged once, and served once it appears", async () => {
    const parent = await knowledgeDir({});
    const dir = join(parent, "later");
    const number = phoneNumberId();
    const { logger, lines } = capturedLogger();
    const knowledge = await open({ dirs: new Map([[number, dir]]), logger });
    expect(await knowledge.forReply(number, "hi")).toBeUndefined();
    await writeFiles(dir, { "hours.txt": "9 to 18." });
    await eventually(async () => (await knowledge.forReply(number, "hi"))?.kind === "documents", "the directory's files", 5_000);
    expect(lines.filter((line) => line.event === "knowledge.dir_unavailable")).toHaveLength(1);
  });
});

describe("files that cannot serve", () => {
  it("a broken PDF and a file that is not UTF-8 are skipped with a log line naming them; the rest still serve; contents never logged", async () => {
    const dir = await knowledgeDir({
      "broken.pdf": Buffer.from("%PDF-1.4\nSECRET-BROKEN-CONTENT 1 0 obj << /Type /Catalog"),
      "latin1.txt": Buffer.from("SECRET-LATIN1-CONTENT caf\xe9", "latin1"),
      "good.md": "SECRET-GOOD-CONTENT: open 9 to 18.",
      "photo.jpg": Buffer.from([0xff, 0xd8, 0xff]),
    });
    const number = phoneNumberId();
    const { logger, lines, raw } = capturedLogger();
    const knowledge = await open({ dirs: new Map([[number, dir]]), logger });

    expect(documentsOf(await knowledge.forReply(number, "open")).map((d) => d.title)).toEqual(["good.md"]);
    expect(lines.filter((line) => line.event === "knowledge.file_skipped").map((line) => line.file)).toEqual(["broken.pdf", "latin1.txt"]);
    expect(lines.find((line) => line.file === "broken.pdf")?.reason).toMatch(/not a readable PDF/);
    expect(lines.find((line) => line.file === "latin1.txt")?.reason).toBe("not valid UTF-8");

    // Many polls later (one of them saw this change), each file is still named once.
    await writeFile(join(dir, "hours.txt"), "9 to 18.");
    await eventually(async () => documentsOf(await knowledge.forReply(number, "open")).length === 2, "the added file", 5_000);
    expect(lines.filter((line) => line.event === "knowledge.file_skipped")).toHaveLength(2);
    expect(lines.filter((line) => line.event === "knowledge.file_ignored").map((line) => line.file)).toEqual(["photo.jpg"]);
    expect(raw.join("")).not.toMatch(/SECRET/);

    // Mended, it serves.
    await writeFile(join(dir, "broken.pdf"), makePdf([["Mended."]]));
    await eventually(async () => documentsOf(await knowledge.forReply(number, "open")).some((d) => d.title === "broken.pdf"), "the mended PDF", 5_000);
  });
});

describe("knowledge too large to send whole", () => {
  /** About 8 000 tokens of Markdown and a PDF: passages, at a budget of 2 000. */
  async function largeKnowledge(): Promise<string> {
    const sections = Array.from({ length: 20 }, (_, index) => `## Topic ${index}\n\n${filler(index, 120)}\n\n${filler(index + 100, 120)}\n`);
    sections.splice(
      7,
      0,
      "## Returns\n\nYou can return unworn shoes within 30 days of delivery for a full refund. The return label is in the box.\n",
      "## Shoe care\n\nClean your shoes with a soft brush. Shoes last longer when shoes rest a day between wears; store shoes dry.\n",
    );
    return knowledgeDir({
      "policies.md": `# Our policies\n\n${filler(999, 60)}\n\n${sections.join("\n")}`,
      "manual.pdf": makePdf([[filler(500, 40)], ["The blender warranty lasts two years from purchase."]]),
      "about.txt": `${filler(777, 200)}\n\n${filler(778, 200)}`,
    });
  }

  it("the passage with the customer's words comes first, and several of their words outrank one word repeated", async () => {
    const dir = await largeKnowledge();
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, dir]]), tokenBudget: 2_000 });

    const returns = passagesOf(await knowledge.forReply(number, "Hi! How do I return my shoes? Is there a label?"));
    expect(returns.match).toBe("search");
    expect(returns.passages[0]).toMatchObject({ source: "policies.md", title: "policies.md › Returns", text: expect.stringContaining("full refund") });
    expect(returns.passages[1]).toMatchObject({ title: "policies.md › Shoe care" });
    expect(returns.passages.length).toBeLessThanOrEqual(8);

    const warranty = passagesOf(await knowledge.forReply(number, "what's the WARRANTY on the blender"));
    expect(warranty.passages[0]).toMatchObject({ source: "manual.pdf", title: "manual.pdf › page 2", text: expect.stringContaining("two years") });

    // The title is searched too: "topic 12" is only in a heading.
    const topic = passagesOf(await knowledge.forReply(number, "topic 12"));
    expect(topic.passages[0]?.title).toBe("policies.md › Topic 12");
  });

  it("words that tell no passage apart get each file's opening passage, in path order", async () => {
    const dir = await largeKnowledge();
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, dir]]), tokenBudget: 2_000 });
    for (const query of ["hello!", "is the", "", "🙂 ¿?"]) {
      const answer = passagesOf(await knowledge.forReply(number, query));
      expect(answer.match, query).toBe("openings");
      expect(answer.passages.map((p) => p.title)).toEqual(["about.txt", "manual.pdf › page 1", "policies.md › Our policies"]);
    }
  });

  it("passages keep to 150–400 words, cut between words at sentence ends, and lose no word", async () => {
    const text = Array.from({ length: 9 }, (_, index) => filler(index, 140)).join(" ");
    const [one, ...more] = [
      { text, pieces: splitIntoPassages("long.txt", { format: "text", text }) },
      { text: text.replaceAll(". ", ".\n"), pieces: splitIntoPassages("lines.pdf", { format: "pdf", pages: [text.replaceAll(". ", ".\n")] }) },
    ];
    for (const { text: source, pieces } of [one!, ...more]) {
      expect(pieces.length).toBeGreaterThan(2);
      expect(pieces.flatMap((piece) => words(piece.text))).toEqual(words(source));
      for (const piece of pieces.slice(0, -1)) {
        expect(words(piece.text).length).toBeGreaterThanOrEqual(PASSAGE_MIN_WORDS);
        expect(words(piece.text).length).toBeLessThanOrEqual(PASSAGE_MAX_WORDS);
        expect(piece.text).toMatch(/\.$/);
      }
    }
    const markdown = splitIntoPassages("guide.md", {
      format: "markdown",
      text: "Intro line.\n\n# Setup\n\nStep one.\n\n```sh\n# not a heading\n\nstill code\n```\n\nSizes\n=====\n\nS, M, L.\n",
    });
    expect(markdown.map((p) => [p.title, p.text])).toEqual([
      ["guide.md", "Intro line."],
      ["guide.md › Setup", "Step one.\n\n```sh\n# not a heading\n\nstill code\n```"],
      ["guide.md › Sizes", "S, M, L."],
    ]);
  });

  it("two knowledge bases (two processes) store a number's passages once, and serve the same ones", async () => {
    const dir = await largeKnowledge();
    const number = phoneNumberId();
    const first = capturedLogger();
    const second = capturedLogger();
    const secondDb = createDb(databaseUrl, { poolSize: 4 });
    otherDbs.push(secondDb);
    const [a, b] = await Promise.all([
      open({ dirs: new Map([[number, dir]]), tokenBudget: 2_000, logger: first.logger }),
      open({ dirs: new Map([[number, dir]]), tokenBudget: 2_000, logger: second.logger, db: secondDb }),
    ]);
    const [fromA, fromB] = await Promise.all([a.forReply(number, "return shoes"), b.forReply(number, "return shoes")]);
    expect(fromA).toEqual(fromB);
    expect(passagesOf(fromA).passages[0]?.title).toBe("policies.md › Returns");

    const logged = [...first.lines, ...second.lines];
    const indexed = logged.filter((line) => line.event === "knowledge.indexed");
    expect(indexed).toHaveLength(1);
    expect(logged.filter((line) => line.event === "knowledge.already_indexed")).toHaveLength(1);
    const versions = await db.knowledgeVersion.findMany({ where: { phoneNumberId: number } });
    expect(versions).toEqual([expect.objectContaining({ version: passagesOf(fromA).version, passageCount: indexed[0]!.passages })]);
    expect(await db.knowledgePassage.count({ where: { phoneNumberId: number } })).toBe(indexed[0]!.passages);
  });

  it("a change replaces the passages: the new version serves, and the old one is deleted once no process serves it", async () => {
    const dir = await largeKnowledge();
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, dir]]), tokenBudget: 2_000, keepUnusedVersionsMs: 0 });
    const before = passagesOf(await knowledge.forReply(number, "blender warranty"));
    expect(before.passages[0]?.text).toContain("two years");

    await writeFile(join(dir, "manual.pdf"), makePdf([[filler(500, 40)], ["The blender warranty lasts five years from purchase."]]));
    const after = await eventually(async () => {
      const answer = passagesOf(await knowledge.forReply(number, "blender warranty"));
      return answer.version !== before.version ? answer : undefined;
    }, "the changed PDF's passages");
    expect(after.passages[0]?.text).toContain("five years");
    await eventually(
      async () => (await db.knowledgeVersion.findMany({ where: { phoneNumberId: number } })).map((v) => v.version).join() === after.version,
      "the old version deleted",
    );
    expect(await db.knowledgePassage.count({ where: { phoneNumberId: number, version: before.version } })).toBe(0);
  });
});
