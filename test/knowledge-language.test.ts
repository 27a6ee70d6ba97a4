import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createDb, type Db } from "../src/db/client.ts";
import { migrate } from "../src/db/migrate.ts";
import { type KnowledgeBase, type KnowledgeBaseDeps, type KnowledgeForClaude, startKnowledgeBase } from "../src/knowledge/knowledge.ts";
import { loadSettings } from "../src/settings.ts";
import { problemsOf } from "./support/config-problems.ts";
import { filler } from "./support/filler.ts";
import { dropSchema, eventually, type Harness, startHarness, TEST_DATABASE_URL, testEnv, withSchema } from "./support/harness.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 32.12: KNOWLEDGE_LANGUAGE chooses Postgres's text-search configuration for knowledge
 * too large to send whole. 'simple' (the default) stems no language, so a customer's "returns"
 * finds no passage that only says "return"; 'english' stems both to "return" and finds it.
 */

const schema = `kl_${Math.random().toString(36).slice(2, 10)}`;
const databaseUrl = withSchema(TEST_DATABASE_URL, schema);
let db: Db;
let root: string;
beforeAll(async () => {
  await migrate(databaseUrl);
  db = createDb(databaseUrl, { poolSize: 4 });
  root = await mkdtemp(join(tmpdir(), "knowledge-language-"));
});
afterAll(async () => {
  await db?.$disconnect();
  await dropSchema(schema);
  await rm(root, { recursive: true, force: true });
});

let opened: KnowledgeBase[] = [];
let harness: Harness | undefined;
afterEach(async () => {
  await Promise.all(opened.map((knowledge) => knowledge.close()));
  opened = [];
  await harness?.close();
  harness = undefined;
});

const RETURNS = "You can return unworn shoes within 30 days of delivery for a full refund. The return label is in the box.";

let folders = 0;
/**
 * About 6 000 tokens of a shoe shop's policies: one section says "return", none says "returns"
 * (nor does any title), and the section is no file's first passage.
 */
async function policies(): Promise<string> {
  const dir = join(root, `knowledge-${++folders}`);
  await mkdir(dir, { recursive: true });
  const sections = Array.from({ length: 16 }, (_, index) => `## Topic ${index}\n\n${filler(index, 150)}\n\n${filler(index + 100, 150)}\n`);
  sections.splice(7, 0, `## Sending shoes back\n\n${RETURNS}\n`);
  await writeFile(join(dir, "policies.md"), `# Our policies\n\n${filler(999, 60)}\n\n${sections.join("\n")}`);
  await writeFile(join(dir, "intro.txt"), `${filler(777, 200)}\n\n${filler(778, 200)}`);
  return dir;
}

let numbers = 0;
function phoneNumberId(): string {
  return `10654035226${String(++numbers).padStart(4, "0")}`;
}

async function open(deps: Pick<KnowledgeBaseDeps, "dirs" | "language">): Promise<KnowledgeBase> {
  const knowledge = await startKnowledgeBase({
    db,
    logger: pino({ level: "silent" }),
    tokenBudget: 2_000,
    limits: { maxFiles: 2_000, maxBytes: 50 * 1024 * 1024 },
    pollMs: 50,
    ...deps,
  });
  opened.push(knowledge);
  return knowledge;
}

function passagesOf(answer: KnowledgeForClaude | undefined) {
  if (answer?.kind !== "passages") throw new Error(`expected passages, got ${answer?.kind}`);
  return answer;
}

const QUESTION = "Hi, what about returns?";

describe("KNOWLEDGE_LANGUAGE", () => {
  it("english: a customer's 'returns' finds the passage that says 'return'", async () => {
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, await policies()]]), language: "english" });
    const answer = passagesOf(await knowledge.forReply(number, QUESTION));
    expect(answer.match).toBe("search");
    expect(answer.passages[0]).toMatchObject({ title: "policies.md › Sending shoes back", text: RETURNS });
  });

  it("simple (the default): 'returns' is not 'return', so no passage matches and each file's opening passage is shown instead", async () => {
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, await policies()]]), language: loadSettings(testEnv()).searchLanguage });
    const answer = passagesOf(await knowledge.forReply(number, QUESTION));
    expect(answer.match).toBe("openings");
    expect(answer.passages.map((passage) => passage.title)).toEqual(["intro.txt", "policies.md › Our policies"]);
    expect(passagesOf(await knowledge.forReply(number, "Can I return them?")).passages[0]).toMatchObject({ text: RETURNS });
  });

  it("each language indexes the files for itself: a process with another language (a change of it) never searches vectors built for the old one", async () => {
    const number = phoneNumberId();
    const dir = await policies();
    const simple = await open({ dirs: new Map([[number, dir]]), language: "simple" });
    expect(passagesOf(await simple.forReply(number, QUESTION)).match).toBe("openings");
    const english = await open({ dirs: new Map([[number, dir]]), language: "english" });
    expect(passagesOf(await english.forReply(number, QUESTION)).passages[0]).toMatchObject({ text: RETURNS });
    expect(passagesOf(await simple.forReply(number, QUESTION)).match).toBe("openings");

    const stored = await db.knowledgePassage.groupBy({ by: ["version", "language"], where: { phoneNumberId: number }, _count: true });
    expect(stored.map((row) => row.language).sort()).toEqual(["english", "simple"]);
    expect(new Set(stored.map((row) => row.version)).size).toBe(2);
  });

  it("a configuration of the database's own, named with its schema, is used as it is", async () => {
    await db.$executeRawUnsafe(`CREATE TEXT SEARCH CONFIGURATION ${schema}.shop (COPY = english)`);
    expect(loadSettings(testEnv({ KNOWLEDGE_LANGUAGE: `${schema}.shop` })).searchLanguage).toBe(`${schema}.shop`);
    const number = phoneNumberId();
    const knowledge = await open({ dirs: new Map([[number, await policies()]]), language: `${schema}.shop` });
    expect(passagesOf(await knowledge.forReply(number, QUESTION)).passages[0]).toMatchObject({ text: RETURNS });
  });

  it("defaults to simple, takes Postgres's configurations in any case, and a name Postgres has not built in stops start-up naming it", () => {
    expect(loadSettings(testEnv()).searchLanguage).toBe("simple");
    expect(loadSettings(testEnv({ KNOWLEDGE_LANGUAGE: " English " })).searchLanguage).toBe("english");
    expect(loadSettings(testEnv({ KNOWLEDGE_LANGUAGE: "portuguese" })).searchLanguage).toBe("portuguese");
    for (const bad of ["klingon", "english'); DROP TABLE knowledge_passages; --", "en"]) {
      expect(problemsOf(testEnv({ KNOWLEDGE_LANGUAGE: bad }))).toEqual([
        expect.stringMatching(
          new RegExp(
            `^KNOWLEDGE_LANGUAGE must be a Postgres text-search configuration \\(simple, arabic, .*english, .*\\) or one of the database's own .*, got "${escapeRegExp(bad)}"$`,
          ),
        ),
      ]);
    }
  });

  it("set to english, a reply past KNOWLEDGE_TOKEN_BUDGET shows Claude the passage a customer's 'returns' is about", async () => {
    const dir = join(root, `business-${++folders}`);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "numbers.json"), JSON.stringify({ [PHONE_NUMBER_ID]: { knowledgeDir: await policies() } }));
    harness = await startHarness({
      env: { PHONE_NUMBERS_FILE: join(dir, "numbers.json"), KNOWLEDGE_TOKEN_BUDGET: "2000", KNOWLEDGE_LANGUAGE: "english", REPLY_DEBOUNCE_MS: "0" },
    });
    await harness.deliver(textWebhook({ text: QUESTION }).body);
    await eventually(() => harness!.claude.requests.length >= 1, "Claude to be asked", 20_000);
    const turn = harness.claude.requests[0]!.messages.findLast((message) => message.role === "user")!.content as { type: string; title?: string }[];
    expect(turn.find((block) => block.type === "search_result")).toMatchObject({ title: "policies.md › Sending shoes back" });
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
