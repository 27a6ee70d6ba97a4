import { createHash, randomUUID } from "node:crypto";
import { cp, mkdtemp, readdir, readFile, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { createDb } from "../src/db/client.ts";
import { MIGRATIONS_DIR, migrate } from "../src/db/migrate.ts";
import { dropSchema, TEST_DATABASE_URL, withSchema } from "./support/harness.ts";

const ALL = (await readdir(MIGRATIONS_DIR, { withFileTypes: true }))
  .filter((e) => e.isDirectory())
  .map((e) => e.name)
  .sort();

const schemas: string[] = [];
function freshSchema(): string {
  const schema = `m_${Math.random().toString(36).slice(2, 10)}`;
  schemas.push(schema);
  return schema;
}
afterAll(async () => {
  await Promise.all(schemas.map((schema) => dropSchema(schema)));
});

async function query<T extends pg.QueryResultRow>(schema: string, sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await client.connect();
  try {
    await client.query(`SET search_path TO ${pg.escapeIdentifier(schema)}`);
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

describe("migrations", () => {
  it("apply once, then a second run changes nothing", async () => {
    const url = withSchema(TEST_DATABASE_URL, freshSchema());
    const first = await migrate(url);
    expect(first.applied).toEqual(ALL);
    expect(ALL[0]).toBe("20261130000000_init");
    const second = await migrate(url);
    expect(second).toEqual({ applied: [], alreadyApplied: ALL });
  });

  it("are recorded in Prisma's _prisma_migrations table with Prisma's checksum", async () => {
    const schema = freshSchema();
    await migrate(withSchema(TEST_DATABASE_URL, schema));
    const rows = await query<{ migration_name: string; checksum: string; finished_at: Date | null; applied_steps_count: number }>(
      schema,
      `SELECT migration_name, checksum, finished_at, applied_steps_count FROM "_prisma_migrations" ORDER BY migration_name`,
    );
    const expected = await Promise.all(
      ALL.map(async (name) => ({
        migration_name: name,
        checksum: createHash("sha256")
          .update(await readFile(join(MIGRATIONS_DIR, name, "migration.sql")))
          .digest("hex"),
        finished_at: expect.any(Date),
        applied_steps_count: 1,
      })),
    );
    expect(rows).toEqual(expected);
  });

  it("two processes migrating at once apply each migration exactly once", async () => {
    const url = withSchema(TEST_DATABASE_URL, freshSchema());
    const results = await Promise.all([migrate(url), migrate(url), migrate(url)]);
    expect(results.flatMap((r) => r.applied).sort()).toEqual(ALL);
  });

  it("refuse to run when an applied migration was edited afterwards", async () => {
    const url = withSchema(TEST_DATABASE_URL, freshSchema());
    const dir = await mkdtemp(join(tmpdir(), "migrations-"));
    await cp(MIGRATIONS_DIR, dir, { recursive: true });
    await migrate(url, { dir });
    const file = join(dir, "20261130000000_init", "migration.sql");
    await writeFile(file, `${await readFile(file, "utf8")}\n-- edited\n`);
    await expect(migrate(url, { dir })).rejects.toThrow(/edited after it was applied/);
  });

  it("a failing migration is rolled back whole and reported by name", async () => {
    const url = withSchema(TEST_DATABASE_URL, freshSchema());
    const dir = await mkdtemp(join(tmpdir(), "migrations-"));
    await cp(MIGRATIONS_DIR, dir, { recursive: true });
    await migrate(url, { dir });
    const broken = join(dir, "20261201000000_broken");
    await cp(join(dir, "20261130000000_init"), broken, { recursive: true });
    await writeFile(join(broken, "migration.sql"), `CREATE TABLE "half_done" ("id" INT);\nSELECT no_such_function();\n`);
    await expect(migrate(url, { dir })).rejects.toThrow(/20261201000000_broken failed/);
    const schema = new URL(url).searchParams.get("schema")!;
    expect(await query(schema, `SELECT to_regclass('half_done') AS t`)).toEqual([{ t: null }]);
  });

  it("match schema.prisma: every index and unique constraint it declares exists, on its columns, under Prisma's name", async () => {
    const schema = freshSchema();
    await migrate(withSchema(TEST_DATABASE_URL, schema));
    const rows = await query<{ indexname: string; indexdef: string }>(schema, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()`);
    const actual = new Map(rows.map((row) => [row.indexname, row.indexdef]));
    const declared = declaredIndexes(await readFile(new URL("../prisma/schema.prisma", import.meta.url), "utf8"));
    expect(declared.map((index) => index.name)).toContain("inbound_messages_conversation_id_sent_at_idx"); // the parser reads @@index
    for (const index of declared) {
      const definition = actual.get(index.name);
      expect(definition, index.name).toBeDefined();
      expect(definition, index.name).toMatch(new RegExp(`^CREATE ${index.unique ? "UNIQUE " : ""}INDEX `));
      // pg_indexes quotes only the names that need it (Prisma's camelCase fields kept as columns).
      const columns = index.columns.map((column) => (/^[a-z_][a-z0-9_]*$/.test(column) ? column : `"${column}"`));
      expect(definition, index.name).toContain(`(${columns.join(", ")})`);
    }
  });

  it("match schema.prisma: every model and field round-trips through the Prisma client", async () => {
    const url = withSchema(TEST_DATABASE_URL, freshSchema());
    await migrate(url);
    const db = createDb(url, { poolSize: 2 });
    try {
      const contact = await db.contact.create({
        data: { waId: "15550001111", name: "Ana", userId: "US.1", parentUserId: "US.ENT.1", username: "@ana", marketingOptedOutAt: new Date() },
      });
      const conversation = await db.conversation.create({
        data: {
          phoneNumberId: "106540352242922",
          contactId: contact.id,
          lastInboundAt: new Date(),
          pausedUntil: new Date(),
          pausedBy: "api",
          optedOutAt: new Date(),
          replyFence: 7n,
        },
      });
      const reply = await db.reply.create({
        data: {
          conversationId: conversation.id,
          state: "ready",
          kind: "canned",
          text: "hola",
          model: "claude-haiku-4-5",
          inputTokens: 10,
          outputTokens: 5,
          cacheReadTokens: 7,
          cacheCreationTokens: 3,
          sentAt: new Date(),
        },
      });
      await db.inboundMessage.create({
        data: {
          wamid: "wamid.M1",
          conversationId: conversation.id,
          type: "text",
          text: "hi",
          sentAt: new Date(),
          payload: { a: [1, "é"] },
          replyId: reply.id,
          skipReason: null,
          cannedText: "c",
          control: "opt_out",
          arrival: 5n,
        },
      });
      await db.outboundMessage.create({
        data: {
          replyId: reply.id,
          seq: 0,
          text: "hola",
          template: "follow_up",
          sendState: "accepted",
          wamid: "wamid.O1",
          status: "read",
          statusRank: 3,
          statusAt: new Date(),
          acceptedAt: new Date(),
          sendAttempt: 2,
          resendAfter: new Date(),
        },
      });
      await db.outboundMessage.create({ data: { replyId: reply.id, seq: 1, text: "maybe", sendState: "unconfirmed" } });
      const letter = await db.deadLetter.create({
        data: {
          conversationId: conversation.id,
          replyId: reply.id,
          dedupKey: "k1",
          source: "graph",
          code: "131047",
          reason: "r",
          detail: { x: 1 },
          attempts: 2,
          state: "open",
          actedBy: "api",
          actedAt: new Date(),
          note: "n",
        },
      });
      await db.deadLetterAction.create({ data: { deadLetterId: letter.id, actor: "api", action: "discard", detail: { note: "n" } } });
      await db.staffPresence.create({ data: { deadLetterId: letter.id, actor: "ana@example.com", seenAt: new Date(), answeringAt: new Date() } });
      expect(await db.deadLetter.findUniqueOrThrow({ where: { id: letter.id }, include: { presence: true } })).toMatchObject({
        presence: [{ actor: "ana@example.com", answeringAt: expect.any(Date) }],
      });
      const waiting = await db.deadLetter.create({
        data: { conversationId: conversation.id, dedupKey: "k2", source: "handoff", reason: "r", state: "resolved" },
      });
      expect(waiting).toMatchObject({ replyId: null, state: "resolved" });
      const staff = await db.staffMember.create({ data: { email: "ops@example.com", passwordHash: "$argon2id$x", role: "operator", disabledAt: null } });
      await db.staffSession.create({ data: { tokenHash: "t1", staffId: staff.id, csrfToken: "c1", expiresAt: new Date() } });
      expect(await db.staffMember.findUniqueOrThrow({ where: { id: staff.id }, include: { sessions: true } })).toMatchObject({
        role: "operator",
        sessions: [{ tokenHash: "t1", csrfToken: "c1" }],
      });
      expect((await db.staffMember.create({ data: { email: "ana@example.com", passwordHash: "$argon2id$y" } })).role).toBe("staff");
      await db.knowledgeVersion.create({ data: { phoneNumberId: "106540352242922", version: "v1", passageCount: 1 } });
      await db.knowledgePassage.create({
        data: { id: randomUUID(), phoneNumberId: "106540352242922", version: "v1", source: "returns.md", title: "returns.md › Refunds", seq: 0, text: "t" },
      });
      await db.knowledgeVersion.create({ data: { phoneNumberId: "106540352242922", version: "v2", passageCount: 1 } });
      await db.knowledgePassage.create({
        data: { id: randomUUID(), phoneNumberId: "106540352242922", version: "v2", source: "a.md", title: "a.md", seq: 0, text: "t", language: "english" },
      });
      expect(
        await db.knowledgeVersion.findUniqueOrThrow({
          where: { phoneNumberId_version: { phoneNumberId: "106540352242922", version: "v1" } },
          include: { passages: true },
        }),
      ).toMatchObject({
        passageCount: 1,
        indexedAt: expect.any(Date),
        usedAt: expect.any(Date),
        passages: [{ source: "returns.md", seq: 0, text: "t", language: "simple" }],
      });
      expect((await db.knowledgePassage.findFirstOrThrow({ where: { version: "v2" } })).language).toBe("english");
      const loaded = await db.conversation.findUniqueOrThrow({
        where: { phoneNumberId_contactId: { phoneNumberId: "106540352242922", contactId: contact.id } },
        include: { contact: true, messages: true, replies: { include: { parts: true, deadLetters: true, messages: true } }, deadLetters: true },
      });
      expect(loaded.contact).toMatchObject({ name: "Ana", userId: "US.1", parentUserId: "US.ENT.1", username: "@ana", marketingOptedOutAt: expect.any(Date) });
      expect(loaded).toMatchObject({ pausedUntil: expect.any(Date), pausedBy: "api", optedOutAt: expect.any(Date), replyFence: 7n });
      expect(loaded.messages[0]).toMatchObject({ cannedText: "c", control: "opt_out", arrival: 5n });
      expect(loaded.replies[0]!.parts.map((p) => p.sendState).sort()).toEqual(["accepted", "unconfirmed"]);
      expect(loaded.replies[0]).toMatchObject({ kind: "canned", cacheReadTokens: 7, cacheCreationTokens: 3 });
      expect(loaded.messages[0]).toMatchObject({ wamid: "wamid.M1", payload: { a: [1, "é"] }, replyId: reply.id });
      expect(loaded.replies[0]!.parts[0]).toMatchObject({ wamid: "wamid.O1", sendState: "accepted", statusRank: 3 });
      expect(loaded.replies[0]!.deadLetters[0]).toMatchObject({ code: "131047", state: "open", detail: { x: 1 } });
      expect(await db.deadLetterAction.findFirstOrThrow({ where: { deadLetterId: letter.id } })).toMatchObject({ actor: "api", detail: { note: "n" } });
      await expect(
        db.inboundMessage.create({ data: { wamid: "wamid.M1", conversationId: conversation.id, type: "text", sentAt: new Date(), payload: {} } }),
      ).rejects.toMatchObject({ code: "P2002" });
    } finally {
      await db.$disconnect();
    }
  });
});

/**
 * The indexes schema.prisma declares (`@unique`, `@@unique`, `@@index`), named as Prisma names
 * them: table, columns, then `_key` or `_idx`.
 */
function declaredIndexes(prismaSchema: string): { name: string; unique: boolean; columns: string[] }[] {
  const indexes: { name: string; unique: boolean; columns: string[] }[] = [];
  for (const [, body] of prismaSchema.matchAll(/^model \w+ \{\n([\s\S]*?)^\}/gm)) {
    const lines = body!.split("\n").map((line) => line.trim());
    const table = lines.map((line) => /^@@map\("(\w+)"\)/.exec(line)?.[1]).find(Boolean);
    if (!table) throw new Error(`a model without @@map: ${lines[0]}`);
    const columnOf = new Map<string, string>();
    for (const line of lines) {
      const field = /^(\w+)\s+\S+/.exec(line)?.[1];
      if (field) columnOf.set(field, /@map\("(\w+)"\)/.exec(line)?.[1] ?? field);
    }
    const add = (unique: boolean, fields: string[]) => {
      const columns = fields.map((field) => columnOf.get(field) ?? field);
      indexes.push({ name: `${table}_${columns.join("_")}_${unique ? "key" : "idx"}`, unique, columns });
    };
    for (const line of lines) {
      const field = /^(\w+)\s+\S+.*\s@unique\b/.exec(line)?.[1];
      if (field) add(true, [field]);
      const block = /^@@(unique|index)\(\[([^\]]+)\]/.exec(line);
      if (block)
        add(
          block[1] === "unique",
          block[2]!.split(",").map((f) => f.trim()),
        );
    }
  }
  return indexes;
}
