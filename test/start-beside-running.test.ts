import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { appendFile, cp, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deleteKeys, dropSchema, eventually, TEST_DATABASE_URL, TEST_REDIS_URL, testEnv, withSchema } from "./support/harness.ts";
import { freePort } from "./support/ports.ts";

/**
 * Starting is not rebuilding under a running process (issue 32.14). `npm start`, `web`,
 * `worker`, `migrate` and `staff` build first, and the README's one-host layout starts several
 * roles at once, or one beside others already running. Each test runs the real npm scripts in
 * a copy of this checkout (its own dist, its own lock), so the checkout's dist, which other
 * test files run, is never touched.
 */

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** What scripts/build.mjs reads, and what the migrate role reads at run time (prisma/migrations). */
const PROJECT_FILES = ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json", "prisma.config.ts", "prisma", "scripts", "src"];

let project: string;
const schema = `start_build_${randomBytes(4).toString("hex")}`;
const prefix = `{start-build-${randomBytes(4).toString("hex")}}`;
const running: ChildProcess[] = [];

beforeAll(async () => {
  project = await mkdtemp(join(tmpdir(), "start-build-"));
  // The checkout's generated client comes along, stamped with its schema's hash (vitest's
  // globalSetup made it): the copy's starts only compile.
  for (const entry of PROJECT_FILES) await cp(join(ROOT, entry), join(project, entry), { recursive: true });
  await symlink(join(ROOT, "node_modules"), join(project, "node_modules"), "dir");
});

afterAll(async () => {
  for (const child of running) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await dropSchema(schema);
  const redis = new Redis(TEST_REDIS_URL);
  await deleteKeys(redis, prefix).finally(() => redis.disconnect());
  await rm(project, { recursive: true, force: true });
});

/** The environment an operator's .env would give, on this test's schema and queue prefix; npm's own variables left out. */
function roleEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const ours = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("npm_")));
  return { ...ours, ...testEnv({ DATABASE_URL: withSchema(TEST_DATABASE_URL, schema), QUEUE_PREFIX: prefix, LOG_LEVEL: "info", ...extra }) };
}

interface Finished {
  code: number | null;
  output: string;
}

/** `npm run <script>` in the copy, as an operator types it. */
function npmRun(script: string): Promise<Finished> {
  const child = spawn("npm", ["run", "--silent", script], { cwd: project, env: roleEnv(), stdio: ["ignore", "pipe", "pipe"] });
  running.push(child);
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, output })));
}

/** How many compiles these outputs report (scripts/build.mjs says `[build] tsc` before one). */
const compiles = (...outputs: Finished[]) =>
  outputs.map((o) => o.output.split("\n").filter((line) => line === "[build] tsc").length).reduce((a, b) => a + b, 0);

const builds = () => readdirSync(project).filter((name) => name.startsWith(".dist-"));

/** Every file and folder under `dir`. */
const listing = (dir: string) => readdirSync(dir, { recursive: true, encoding: "utf8" }).sort();

describe("starting is not rebuilding under a running process", () => {
  it("two roles started at the same moment on a tree never built both start, from one build", async () => {
    expect(existsSync(join(project, "dist"))).toBe(false);
    const [first, second] = await Promise.all([npmRun("migrate"), npmRun("migrate")]);

    expect(first.code, first.output).toBe(0);
    expect(second.code, second.output).toBe(0);
    expect(first.output).toContain('"event":"db.migrated"');
    expect(second.output).toContain('"event":"db.migrated"');
    expect(compiles(first, second), `${first.output}\n${second.output}`).toBe(1);
    expect(builds()).toHaveLength(1);
  }, 180_000);

  it("starts that rebuild beside a running web leave every file the web runs from in place, and the web serves its page", async () => {
    if (!existsSync(join(project, "dist"))) expect((await npmRun("build")).code).toBe(0); // run alone (-t): built first
    const port = await freePort();
    const runningFrom = realpathSync(join(project, "dist"));
    const files = listing(runningFrom);
    const served = readFileSync(join(runningFrom, "admin", "page", "app.js"), "utf8");
    const web = spawn(process.execPath, ["dist/main.js", "web"], { cwd: project, env: roleEnv({ PORT: String(port) }), stdio: "ignore" });
    running.push(web);
    const webExited = new Promise((resolve) => web.once("exit", resolve));
    const asset = () => fetch(`http://127.0.0.1:${port}/admin/assets/app.js`).catch(() => undefined);
    await eventually(async () => (await asset())?.ok, "the web to serve the staff page", 60_000);

    // The page's script changes (the assets are the build's inputs too), and a worker restarted
    // beside the web builds before it starts; twice, so that the web's build is neither the
    // current one nor the one just replaced. Meanwhile, every few ms: the web's files.
    for (const change of ["first", "second"]) {
      await appendFile(join(project, "src", "admin", "page", "app.js"), `\n// ${change} change while the web runs\n`);
      const missing = new Set<string>();
      const watch = setInterval(() => {
        for (const file of ["main.js", "admin/page.js", "admin/page/app.js", "db/migrate.js"]) if (!existsSync(join(runningFrom, file))) missing.add(file);
      }, 2);
      const restart = await npmRun("migrate").finally(() => clearInterval(watch));

      expect([...missing], `files of the running web's build missing during the ${change} build`).toEqual([]);
      expect(restart.code, restart.output).toBe(0);
      expect(compiles(restart), restart.output).toBe(1);
      expect(listing(runningFrom), `the running web's build after the ${change} build`).toEqual(files);
      expect(readFileSync(join(runningFrom, "admin", "page", "app.js"), "utf8")).toBe(served);
      // The start ran the new build; the web is still on its own.
      const current = realpathSync(join(project, "dist"));
      expect(current).not.toBe(runningFrom);
      expect(readFileSync(join(current, "admin", "page", "app.js"), "utf8")).toContain(`${change} change while the web runs`);
    }
    const res = await asset();
    expect(res?.status).toBe(200);
    expect(await res?.text()).toBe(served);
    expect(web.exitCode).toBe(null);
    web.kill("SIGTERM");
    await webExited;
  }, 240_000);

  it("a start on a tree that has not changed builds nothing and leaves the Prisma client as it is", async () => {
    const current = realpathSync(join(project, "dist"));
    const client = join(project, "src", "generated", "prisma", "client.ts");
    const generatedAt = statSync(client).mtimeMs;

    const start = await npmRun("migrate");

    expect(start.code, start.output).toBe(0);
    expect(start.output).not.toContain("[build]");
    expect(realpathSync(join(project, "dist"))).toBe(current);
    expect(statSync(client).mtimeMs).toBe(generatedAt);
  }, 120_000);

  it("npm run build always builds, and removes the builds no process runs from", async () => {
    const replaced = existsSync(join(project, "dist")) ? basename(realpathSync(join(project, "dist"))) : undefined;

    const build = await npmRun("build");

    expect(build.code, build.output).toBe(0);
    expect(compiles(build), build.output).toBe(1);
    const current = basename(realpathSync(join(project, "dist")));
    expect(current).not.toBe(replaced);
    // Kept: the current build and the one just replaced (a process may have started from it a
    // moment ago); nothing runs from the others now that the web has stopped.
    expect(builds().sort()).toEqual([current, replaced].filter((name) => name !== undefined).sort());
  }, 120_000);
});
