import { readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { sources } from "./support/sources.ts";

/**
 * Law 13, read from the sources: every change to a conversation's control columns, a message's
 * binding, a reply, a part or a dead letter is a transition in src/state/, which checks
 * its starting state and the fence in the same statement. A write to those tables anywhere else
 * would skip those checks, so this test reads every source file for one.
 */

const ROOT = join(import.meta.dirname, "..");
const STATE = "src/state/";
const TABLES = [
  "conversations",
  "replies",
  "outbound_messages",
  "inbound_messages",
  "dead_letters",
  "dead_letter_actions",
  "claude_steps",
  "tool_calls",
  "claude_calls",
];
const MODELS = [
  "conversation",
  "reply",
  "outboundMessage",
  "inboundMessage",
  "deadLetter",
  "deadLetterAction",
  "claudeStep",
  "toolCall",
  "claudeCall",
  "outboundCopy",
];

const SQL_WRITE = new RegExp(`\\b(UPDATE|INSERT\\s+INTO|DELETE\\s+FROM)\\s+"?(${TABLES.join("|")})\\b`, "gi");
const PRISMA_WRITE = new RegExp(
  `\\.(${MODELS.join("|")})\\.(create|createMany|createManyAndReturn|update|updateMany|updateManyAndReturn|upsert|delete|deleteMany)\\(`,
  "g",
);

function writesIn(text: string): string[] {
  const found = [...text.matchAll(SQL_WRITE)].map((m) => `${m[1]!.replace(/\s+/g, " ").toUpperCase()} ${m[2]}`);
  return [...found, ...[...text.matchAll(PRISMA_WRITE)].map((m) => `.${m[1]}.${m[2]}(`)];
}

describe("one writer for every state change (law 13)", () => {
  it("no module outside src/state/ writes conversations, messages' binding, replies, parts or dead letters", () => {
    const outside = sources(join(ROOT, "src"))
      .map((path) => relative(ROOT, path))
      .filter((path) => !path.startsWith(STATE))
      .flatMap((path) => writesIn(readFileSync(join(ROOT, path), "utf8")).map((write) => `${path}: ${write}`));
    expect(outside).toEqual([]);
  });

  it("the reading finds a write in any of its forms", () => {
    expect(writesIn("await db.$executeRaw`UPDATE replies SET state = 'dead'`;")).toEqual(["UPDATE replies"]);
    expect(writesIn("delete from  dead_letters where id = $1")).toEqual(["DELETE FROM dead_letters"]);
    expect(writesIn("await tx.outboundMessage.updateMany({ where: {} });")).toEqual([".outboundMessage.updateMany("]);
    expect(writesIn("await db.conversation.findMany();")).toEqual([]);
  });

  it("the state folder holds the transitions the README's diagram names", () => {
    const state = sources(join(ROOT, STATE))
      .map((path) => readFileSync(path, "utf8"))
      .join("\n");
    const diagram = readFileSync(join(ROOT, STATE, "README.md"), "utf8");
    const named = [...new Set([...diagram.matchAll(/\b([a-z]+[A-Z][A-Za-z]+)\b/g)].map((m) => m[1]!))];
    const missing = named.filter((name) => !new RegExp(`async function ${name}\\b`).test(state));
    expect(missing).toEqual([]);
  });
});
