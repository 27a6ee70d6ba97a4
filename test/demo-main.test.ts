import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { afterEach, describe, expect, it } from "vitest";
import { demoTestEnv, removeDemoData } from "./support/demo.ts";
import { eventually, TEST_DATABASE_URL } from "./support/harness.ts";

/**
 * `npm run demo` as a newcomer runs it (sim/main.ts), from a directory whose `.env` is a
 * production one: the demo must not read it, must print where to go, serve the chat and stop
 * cleanly; and with GRAPH_API_BASE_URL in its environment it must refuse before touching anything.
 */

const MAIN = fileURLToPath(new URL("../sim/main.ts", import.meta.url));
const TSX = import.meta.resolve("tsx");
const PRODUCTION_ENV = [
  "GRAPH_API_BASE_URL=https://graph.facebook.com",
  "WHATSAPP_ACCESS_TOKEN=EAAG-production-token",
  "DATABASE_URL=postgresql://app@db.production.example/whatsapp",
  "ANTHROPIC_API_KEY=sk-ant-production",
].join("\n");

let child: ChildProcess | undefined;
let cleanup: (() => Promise<void>) | undefined;
afterEach(async () => {
  if (child && child.exitCode === null) child.kill("SIGKILL");
  await cleanup?.();
  cleanup = undefined;
});

function run(cwd: string, env: Record<string, string>) {
  let output = "";
  // Only what a shell would have: nothing of the test's own environment that could point anywhere.
  const base = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" };
  child = spawn(process.execPath, ["--import", TSX, MAIN], { cwd, env: { ...base, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child!.once("exit", (code) => resolve(code)));
  return { output: () => output, exited };
}

async function schemaExists(schema: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await client.connect();
  const { rowCount } = await client.query("SELECT 1 FROM information_schema.schemata WHERE schema_name = $1", [schema]);
  await client.end();
  return (rowCount ?? 0) > 0;
}

describe("npm run demo, the process", () => {
  it("ignores a production .env, prints the chat and staff URLs, answers a customer, and stops on SIGTERM", async () => {
    const id = randomBytes(4).toString("hex");
    const cwd = await mkdtemp(join(tmpdir(), "demo-"));
    await writeFile(join(cwd, ".env"), PRODUCTION_ENV);
    cleanup = async () => {
      await rm(cwd, { recursive: true, force: true });
      await removeDemoData(id);
    };
    const demo = run(cwd, demoTestEnv(id));
    const chatUrl = await eventually(() => /Chat with the bot:\s+(http:\/\/127\.0\.0\.1:\d+\/demo)/.exec(demo.output())?.[1], "the chat URL", 60_000);
    expect(demo.output()).toMatch(/Staff page:\s+http:\/\/127\.0\.0\.1:\d+\/admin/);
    expect(demo.output()).toMatch(/sign in as staff@demo\.localhost, password \S{12,}/);
    expect(demo.output()).toContain("the offline responder");

    const from = "447700900777";
    const sent = await fetch(`${chatUrl}/api/messages`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ from, text: "Anyone there?" }),
    });
    expect(sent.status).toBe(202);
    const reply = await eventually(async () => {
      const chat = (await (await fetch(`${chatUrl}/api/chats/${from}`)).json()) as { messages: { direction: string; text: string }[] };
      return chat.messages.find((m) => m.direction === "out");
    }, "the reply");
    expect(reply.text).toMatch(/^\(offline demo\) You wrote: “Anyone there\?”/);

    child!.kill("SIGTERM");
    expect(await demo.exited).toBe(0);
    expect(demo.output()).toContain("[demo] stopped");
  }, 90_000);

  it("refuses, saying why, when GRAPH_API_BASE_URL points at Meta, before it touches the database", async () => {
    const id = randomBytes(4).toString("hex");
    cleanup = () => removeDemoData(id);
    const demo = run(process.cwd(), { ...demoTestEnv(id), GRAPH_API_BASE_URL: "https://graph.facebook.com" });
    expect(await demo.exited).toBe(1);
    expect(demo.output()).toContain("npm run demo talks only to its own simulated Meta");
    expect(demo.output()).toContain("https://graph.facebook.com");
    expect(await schemaExists(`t_demo_${id}`)).toBe(false);
  }, 30_000);
});
