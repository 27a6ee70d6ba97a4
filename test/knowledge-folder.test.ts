import { mkdir, mkdtemp, rename, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { KnowledgeDirectory } from "../src/knowledge/directory.ts";
import type { KnowledgeLimits } from "../src/knowledge/walk.ts";
import type { Logger } from "../src/logger.ts";
import { loadSettings } from "../src/settings.ts";
import { problemsOf } from "./support/config-problems.ts";
import { runEntryPoint } from "./support/entry-point.ts";
import { FakeAnthropic } from "./support/fake-anthropic.ts";
import { eventually, type Harness, startHarness, testEnv } from "./support/harness.ts";
import { logLines } from "./support/log-lines.ts";
import { PHONE_NUMBER_ID, textWebhook } from "./support/webhook-bodies.ts";

/**
 * Issue 32.12: knowledge stays inside its folder. Everything a knowledge file says is shown to
 * Claude, and through Claude to whoever writes to the business: a link in a knowledgeDir that
 * leads outside it (to /proc/self/environ, a home folder) is never followed, and a folder past
 * its caps (KNOWLEDGE_MAX_FILES, KNOWLEDGE_MAX_BYTES) is never read. Start-up refuses both,
 * naming them; a running process that meets one keeps to what it may read, and says so.
 */

const SECRET = "sk-live-do-not-show-claude-4f1e";
const LIMITS: KnowledgeLimits = { maxFiles: 2_000, maxBytes: 50 * 1024 * 1024 };

let root: string;
let outside: string;
let secretFile: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "knowledge-folder-"));
  // Another folder, beside the knowledge: what a link must not reach.
  outside = join(root, "outside");
  await mkdir(join(outside, "private"), { recursive: true });
  secretFile = join(outside, "secrets.env");
  await writeFile(secretFile, `API_KEY=${SECRET}\n`);
  await writeFile(join(outside, "private", "notes.md"), `# Notes\n\n${SECRET}\n`);
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

let folders = 0;
/** A PHONE_NUMBERS_FILE whose number's knowledgeDir holds these files and links (name -> target); both paths. */
async function business(files: Record<string, string>, links: Record<string, string> = {}): Promise<{ numbers: string; knowledge: string }> {
  const dir = join(root, `business-${++folders}`);
  const knowledge = join(dir, "knowledge");
  await mkdir(knowledge, { recursive: true });
  for (const [path, text] of Object.entries(files)) {
    await mkdir(join(knowledge, path, ".."), { recursive: true });
    await writeFile(join(knowledge, path), text);
  }
  for (const [path, target] of Object.entries(links)) await symlink(target, join(knowledge, path));
  const numbers = join(dir, "numbers.json");
  await writeFile(numbers, JSON.stringify({ [PHONE_NUMBER_ID]: { knowledgeDir: "knowledge" } }));
  return { numbers, knowledge };
}

/** A logger whose lines the test reads back. */
function captured(): { logger: Logger; events: (event: string) => Record<string, unknown>[] } {
  const { destination, parsed } = logLines();
  const logger = pino({ level: "debug" }, destination);
  return { logger, events: (event) => parsed().filter((line) => line.event === event) };
}

const setting = `PHONE_NUMBERS_FILE ${PHONE_NUMBER_ID}.knowledgeDir`;

describe("a link in a knowledgeDir that leads outside it", () => {
  it("stops start-up, naming each link and where it really leads: a file, a folder, /proc/self/environ", async () => {
    const { numbers, knowledge } = await business(
      { "hours.md": "# Hours\n\nOpen 9 to 18." },
      { "keys.md": secretFile, private: join(outside, "private"), "environ.txt": "/proc/self/environ", "up.md": "../numbers.json" },
    );
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: numbers }))).toEqual([
      `${setting}: environ.txt in ${knowledge} is a link to /proc/${process.pid}/environ, outside the folder: only links inside it are followed`,
      `${setting}: keys.md in ${knowledge} is a link to ${secretFile}, outside the folder: only links inside it are followed`,
      `${setting}: private in ${knowledge} is a link to ${join(outside, "private")}, outside the folder: only links inside it are followed`,
      `${setting}: up.md in ${knowledge} is a link to ${join(knowledge, "..", "numbers.json")}, outside the folder: only links inside it are followed`,
    ]);
  });

  it("stops the worker before it starts: it exits 1 naming the link to /proc/self/environ, and Claude never hears of it", async () => {
    const claude = await new FakeAnthropic().start();
    try {
      const { numbers, knowledge } = await business({ "hours.md": "# Hours\n\nOpen 9 to 18." }, { "environ.md": "/proc/self/environ" });
      const worker = runEntryPoint(["worker"], testEnv({ PHONE_NUMBERS_FILE: numbers, ANTHROPIC_BASE_URL: claude.url, [SECRET_VARIABLE]: SECRET }));
      // A worker that starts all the same is not left running after the test.
      const running = setTimeout(() => worker.child.kill("SIGKILL"), 20_000);
      expect(await worker.exited).toBe(1);
      clearTimeout(running);
      expect(worker.output).toMatch(
        new RegExp(
          `${escapeRegExp(setting)}: environ\\.md in ${escapeRegExp(knowledge)} is a link to /proc/\\d+/environ, outside the folder: only links inside it are followed`,
        ),
      );
      expect(worker.output).not.toContain(SECRET);
      expect(claude.requests).toEqual([]);
    } finally {
      await claude.stop();
    }
  });

  it("met while running (a link added later) is never read, named once in the log with its target; Claude sees the rest, and a link inside the folder", async () => {
    const { numbers, knowledge } = await business(
      { "hours.md": "# Hours\n\nOpen 9 to 18.", "..data/returns.md": "# Returns\n\nWithin 30 days." },
      // A Kubernetes ConfigMap: each file a link into its own ..data folder.
      { "returns.md": "..data/returns.md" },
    );
    const { logger, events } = captured();
    harness = await startHarness({ logger, env: { PHONE_NUMBERS_FILE: numbers, REPLY_DEBOUNCE_MS: "0" } });
    await eventually(() => events("knowledge.loaded").length === 1, "the first reading");

    await symlink(secretFile, join(knowledge, "keys.md"));
    await symlink("/proc/self/environ", join(knowledge, "environ.md"));
    // Written aside (a hidden name is never read), then put in place whole.
    await writeFile(join(knowledge, ".delivery.md"), "# Delivery\n\nIn 2 days.");
    await rename(join(knowledge, ".delivery.md"), join(knowledge, "delivery.md"));
    await eventually(() => events("knowledge.loaded").length === 2, "the reading with delivery.md", 10_000);

    await harness.deliver(textWebhook({ text: "When do you open?" }).body);
    await eventually(() => harness!.claude.requests.length === 1, "Claude to be asked", 20_000);
    const request = JSON.stringify(harness.claude.requests[0]);
    expect(documentTitles(harness.claude.requests[0])).toEqual(["delivery.md", "hours.md", "returns.md"]);
    expect(request).toContain("Within 30 days.");
    expect(request).not.toContain(SECRET);
    expect(request).not.toContain("PATH=");
    expect(events("knowledge.link_refused").map(({ file, target }) => ({ file, target }))).toEqual([
      { file: "environ.md", target: expect.stringMatching(/^\/proc\/\d+\/environ$/) },
      { file: "keys.md", target: secretFile },
    ]);
  });
});

describe("links inside a knowledgeDir", () => {
  it("are followed, to files and folders; a loop of links and a link back up the tree end; start-up takes them", async () => {
    const { numbers, knowledge } = await business(
      { "docs/faq.md": "# FAQ\n\nAsk us.", "hours.md": "# Hours\n\nOpen 9 to 18." },
      { "faq.md": "docs/faq.md", manuals: "docs", "docs/again": "..", "a.md": "b.md", "b.md": "a.md" },
    );
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: numbers }))).toEqual([]);
    const { logger, events } = captured();
    const snapshot = await new KnowledgeDirectory(knowledge, logger, LIMITS).scan();
    // "manuals" is docs again: a folder is walked once, under the first name met.
    expect(snapshot.files.map((file) => file.path)).toEqual(["docs/faq.md", "faq.md", "hours.md"]);
    expect(events("knowledge.link_skipped").map((line) => [line.file, line.reason])).toEqual([
      ["a.md", "ELOOP"],
      ["b.md", "ELOOP"],
    ]);
    expect(events("knowledge.link_refused")).toEqual([]);
  });
});

describe("a knowledgeDir's caps", () => {
  it("more than KNOWLEDGE_MAX_FILES knowledge files stops start-up, naming the folder, the cap and what was found", async () => {
    const { numbers, knowledge } = await business({ "a.md": "a", "b.md": "b", "c/d.txt": "d", "e.md": "e", "photo.jpg": "not knowledge" });
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: numbers, KNOWLEDGE_MAX_FILES: "4" }))).toEqual([]);
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: numbers, KNOWLEDGE_MAX_FILES: "3" }))).toEqual([
      `${setting}: ${knowledge} holds more than 3 knowledge files, past KNOWLEDGE_MAX_FILES (3)`,
    ]);
  });

  it("more than KNOWLEDGE_MAX_BYTES stops start-up, naming the folder, the cap and the bytes found", async () => {
    const { numbers, knowledge } = await business({ "a.md": "x".repeat(700), "b/c.txt": "y".repeat(500), "big.jpg": "z".repeat(5000) });
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: numbers, KNOWLEDGE_MAX_BYTES: "1200" }))).toEqual([]);
    expect(problemsOf(testEnv({ PHONE_NUMBERS_FILE: numbers, KNOWLEDGE_MAX_BYTES: "1199" }))).toEqual([
      `${setting}: ${knowledge} holds 1200 bytes of knowledge files, past KNOWLEDGE_MAX_BYTES (1199)`,
    ]);
  });

  it("default to 2000 files and 50 MiB; a cap that is not a number stops start-up naming it", () => {
    expect(loadSettings(testEnv()).knowledge.limits).toEqual({ maxFiles: 2_000, maxBytes: 52_428_800 });
    expect(problemsOf(testEnv({ KNOWLEDGE_MAX_FILES: "many", KNOWLEDGE_MAX_BYTES: "0" }))).toEqual([
      'KNOWLEDGE_MAX_FILES must be an integer from 1 to 1000000, got "many"',
      'KNOWLEDGE_MAX_BYTES must be an integer from 1024 to 4294967296, got "0"',
    ]);
  });

  it("a folder that grows past a cap while running keeps serving its last reading, says so once, and serves again once back within it", async () => {
    const { knowledge } = await business({ "a.md": "a", "b.md": "b" });
    const { logger, events } = captured();
    const directory = new KnowledgeDirectory(knowledge, logger, { maxFiles: 2, maxBytes: 1024 });
    const first = await directory.scan();
    expect(first.files.map((file) => file.path)).toEqual(["a.md", "b.md"]);

    await writeFile(join(knowledge, "c.md"), "c");
    expect(await directory.scan()).toBe(first);
    expect(await directory.scan()).toBe(first);
    await rm(join(knowledge, "c.md"));
    await writeFile(join(knowledge, "b.md"), "b".repeat(2000));
    expect(await directory.scan()).toBe(first);
    expect(events("knowledge.over_limit").map((line) => line.problems)).toEqual([
      ["holds more than 2 knowledge files, past KNOWLEDGE_MAX_FILES (2)"],
      ["holds 2001 bytes of knowledge files, past KNOWLEDGE_MAX_BYTES (1024)"],
    ]);

    await writeFile(join(knowledge, "b.md"), "b, again");
    const mended = await directory.scan();
    expect(mended.files.map((file) => [file.path, file.content.format === "pdf" ? "" : file.content.text])).toEqual([
      ["a.md", "a"],
      ["b.md", "b, again"],
    ]);
  });
});

/** An environment variable the worker of the start-up test holds: it must not reach Claude, or the output, through /proc/self/environ. */
const SECRET_VARIABLE = "KNOWLEDGE_TEST_SECRET";

function documentTitles(request: unknown): string[] {
  const messages = (request as { messages: { content: unknown }[] }).messages;
  return messages.flatMap((message) =>
    Array.isArray(message.content) ? (message.content as { type: string; title?: string }[]).filter((b) => b.type === "document").map((b) => b.title!) : [],
  );
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
