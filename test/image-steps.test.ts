import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { cp, mkdir, mkdtemp, realpath, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, isAbsolute, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { ENV_VARIABLES } from "../src/config/env.ts";
import { signMetaBody } from "../src/webhook/signature.ts";
import { dockerignore, parseDockerfile, type Stage } from "./support/dockerfile.ts";
import { FakeAnthropic } from "./support/fake-anthropic.ts";
import { FakeGraph } from "./support/fake-graph.ts";
import { deleteKeys, dropSchema, eventually, TEST_DATABASE_URL, TEST_REDIS_URL, testEnv, withSchema } from "./support/harness.ts";
import { freePort } from "./support/ports.ts";
import { textWebhook } from "./support/webhook-bodies.ts";

/**
 * Docker cannot run on our machines, so the image is tested by replaying its steps: the
 * Dockerfile's COPY lines (through .dockerignore) and RUN lines in a directory per stage, the
 * migrate service of compose.yaml, the image's default command and compose's worker with
 * compose's environment, the HEALTHCHECK, and one signed webhook answered and replied to.
 */

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const stages = parseDockerfile(readFileSync(join(ROOT, "Dockerfile"), "utf8"));
const runtime = stages.at(-1)!;
const ignored = dockerignore(readFileSync(join(ROOT, ".dockerignore"), "utf8"));

interface Service {
  build?: unknown;
  image?: string;
  command?: string[];
  environment?: Record<string, string | number>;
  env_file?: { path: string }[];
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { disable?: boolean };
  ports?: string[];
}
const compose = parse(readFileSync(join(ROOT, "compose.yaml"), "utf8"), { merge: true }) as { services: Record<string, Service> };
/** The services that run our image. */
const ours = Object.entries(compose.services).filter(([, s]) => s.build !== undefined);
const ROLES = ["web", "worker", "all", "migrate"];

describe("compose.yaml", () => {
  it("gives our image only variables src/config.ts reads, and the rest of .env through env_file", () => {
    expect(ours.map(([name]) => name).sort()).toEqual(["migrate", "web-1", "web-2", "worker"]);
    for (const [name, service] of ours) {
      const unknown = Object.keys(service.environment ?? {}).filter((v) => !ENV_VARIABLES.includes(v));
      expect(unknown, `${name} sets variables the app does not read`).toEqual([]);
      expect(
        service.env_file?.map((f) => f.path),
        name,
      ).toEqual([".env"]);
      expect(ROLES, `${name}'s command`).toContain(service.command?.[0]);
    }
  });

  it("opens each container's metrics listener (loopback by default) to the compose network, and only there", () => {
    for (const [name, service] of ours) {
      expect(service.environment?.METRICS_HOST, name).toBe("0.0.0.0");
      expect(service.ports ?? [], name).not.toContainEqual(expect.stringMatching(/:9464$/));
    }
  });

  it("runs Redis with AOF and noeviction, as BullMQ needs", () => {
    const command = (compose.services.redis?.command ?? []).join(" ");
    expect(command).toMatch(/--appendonly yes\b/);
    expect(command).toMatch(/--maxmemory-policy noeviction\b/);
  });

  it("starts web and worker only once the migrations ran and Redis and Postgres are healthy", () => {
    expect(compose.services.migrate?.command).toEqual(["migrate"]);
    for (const [name, service] of ours.filter(([n]) => n !== "migrate")) {
      expect(service.depends_on, name).toEqual({
        redis: { condition: "service_healthy" },
        postgres: { condition: "service_healthy" },
        migrate: { condition: "service_completed_successfully" },
      });
    }
  });
});

describe("the Dockerfile's steps, replayed without Docker", () => {
  let root: string | undefined;
  const processes: Running[] = [];
  const cleanups: (() => Promise<unknown>)[] = [];
  afterAll(async () => {
    for (const p of processes) if (p.child.exitCode === null) p.child.kill("SIGKILL");
    await Promise.allSettled(cleanups.map((c) => c()));
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("builds, migrates, starts the default command and compose's worker, passes the HEALTHCHECK and answers a signed webhook", async () => {
    root = await mkdtemp(join(tmpdir(), "image-steps-"));
    const dirs = await replay(stages, root);
    const app = dirs.get(runtime.name)!;

    // What the runtime stage holds: compiled JavaScript and the generated client in it, no
    // sources, no TypeScript loader, no secrets, no dev tools, no demo.
    expect(runtime.user).toBe("node");
    expect(runtime.entrypoint).toEqual(["node", "dist/main.js"]);
    expect(existsSync(join(app, ".env"))).toBe(false);
    expect(existsSync(join(app, "src"))).toBe(false);
    // Nothing of the simulators (sim/): no file of theirs, and no compiled file made from one.
    expect(existsSync(join(app, "sim"))).toBe(false);
    const compiledFrom = readdirSync(join(app, "dist"), { recursive: true, encoding: "utf8" })
      .filter((file) => file.endsWith(".js.map"))
      .flatMap((file) =>
        (JSON.parse(readFileSync(join(app, "dist", file), "utf8")) as { sources: string[] }).sources.map((s) => join("dist", dirname(file), s)),
      );
    expect(compiledFrom.length).toBeGreaterThan(0);
    expect(compiledFrom.filter((source) => !source.startsWith("src/"))).toEqual([]);
    expect(existsSync(join(app, "dist", "generated", "prisma", "client.js"))).toBe(true);
    expect(existsSync(join(app, "dist", "admin", "page", "index.html"))).toBe(true);
    // (typescript itself stays: Prisma's CLI, which migrates at start, lists it as a peer.)
    expect(existsSync(join(app, "node_modules", "tsx"))).toBe(false);
    expect(existsSync(join(app, "node_modules", "vitest"))).toBe(false);

    // The environment compose gives each service, with this machine's addresses and local
    // fakes of Meta and Anthropic where compose names its own network's.
    const [graph, claude] = await Promise.all([new FakeGraph().start(), new FakeAnthropic().start()]);
    cleanups.push(
      () => graph.stop(),
      () => claude.stop(),
    );
    const id = randomBytes(5).toString("hex");
    const schema = `image_${id}`;
    const prefix = `{image-${id}}`;
    cleanups.push(
      () => dropSchema(schema),
      () => forgetPrefix(prefix),
    );
    const secrets = testEnv();
    const dotEnv = {
      // What an operator's .env would add (env_file): the fakes, this run's prefix, quick settings.
      GRAPH_API_BASE_URL: graph.url,
      ANTHROPIC_BASE_URL: claude.url,
      QUEUE_PREFIX: prefix,
      REPLY_DEBOUNCE_MS: "50",
      DATABASE_POOL_SIZE: "5",
      LOG_LEVEL: "info",
    };
    const envOf = async (service: string): Promise<Record<string, string>> => ({
      ...dotEnv,
      ...composeEnvironment(service, { ...secrets, POSTGRES_PASSWORD: "compose-password" }),
      ...(await addresses(schema)),
    });

    const entrypoint = runtime.entrypoint!;
    const migrate = start("migrate", [...entrypoint, ...compose.services.migrate!.command!], await envOf("migrate"), app);
    processes.push(migrate);
    expect(await migrate.exited, migrate.output()).toBe(0);
    expect(migrate.output()).toContain('"event":"db.migrated"');

    const defaultEnv = await envOf("web-1");
    expect(await healthcheck(app, defaultEnv), "the HEALTHCHECK with nothing listening").toBe(1);
    const image = start("default command", [...entrypoint, ...runtime.cmd!], defaultEnv, app);
    const workerEnv = await envOf("worker");
    const worker = start("worker", [...entrypoint, ...compose.services.worker!.command!], workerEnv, app);
    processes.push(image, worker);
    await image.answers(`http://127.0.0.1:${defaultEnv.PORT}/healthz`);
    await worker.answers(`http://127.0.0.1:${workerEnv.METRICS_PORT}/healthz`);
    expect(await healthcheck(app, defaultEnv), "the default command's HEALTHCHECK").toBe(0);
    expect(await healthcheck(app, workerEnv), "the worker's HEALTHCHECK (no web port: the metrics listener's)").toBe(0);

    const { body } = textWebhook({ text: "is the image any good?" });
    const res = await fetch(`http://127.0.0.1:${defaultEnv.PORT}/webhook`, {
      method: "POST",
      body,
      headers: { "content-type": "application/json", "x-hub-signature-256": signMetaBody(body, secrets.WHATSAPP_APP_SECRET!) },
    });
    expect(res.status).toBe(200);
    await eventually(() => graph.sentTexts.length === 1, "the reply (the generated Prisma client at work)", 20_000);
    expect(graph.sentTexts).toEqual(["Reply #1"]);

    image.child.kill("SIGTERM");
    worker.child.kill("SIGTERM");
    expect(await image.exited, image.output()).toBe(0);
    expect(await worker.exited, worker.output()).toBe(0);
  }, 180_000);
});

/** Each stage in a directory of its own (its WORKDIR); returns stage name → directory. */
async function replay(all: Stage[], into: string): Promise<Map<string, string>> {
  const dirs = new Map<string, string>();
  const inStage = (stage: Stage, path: string) => {
    const dir = dirs.get(stage.name)!;
    if (!isAbsolute(path)) return join(dir, path);
    const inside = relative(stage.workdir, path);
    if (inside.startsWith("..")) throw new Error(`Dockerfile: ${path} is outside ${stage.name}'s WORKDIR ${stage.workdir}`);
    return join(dir, inside);
  };
  for (const stage of all) {
    dirs.set(stage.name, join(into, stage.name));
    await mkdir(dirs.get(stage.name)!, { recursive: true });
    for (const step of stage.steps) {
      if (step.kind === "run") {
        await runStep(step.command, dirs.get(stage.name)!);
        continue;
      }
      const { copy } = step;
      const from = copy.from === undefined ? undefined : all.find((s) => s.name === copy.from);
      if (copy.from !== undefined && !from) throw new Error(`Dockerfile: COPY --from=${copy.from}: no such stage`);
      for (const source of copy.sources) {
        if (!from && ignored(source)) throw new Error(`Dockerfile: COPY ${source}, which .dockerignore leaves out of the context`);
        // COPY follows a symbolic link it is named (BuildKit's FollowSymlinks): the build
        // stage's dist is one, to the build scripts/build.mjs made beside it.
        const origin = from ? await realpath(inStage(from, source)) : join(ROOT, source);
        const several = copy.sources.length > 1 || copy.destination.endsWith("/");
        const target = several ? join(inStage(stage, copy.destination), basename(source)) : inStage(stage, copy.destination);
        await cp(origin, target, { recursive: true, filter: from ? undefined : (path) => !ignored(relative(ROOT, path) || ".") });
      }
    }
  }
  return dirs;
}

const exec = promisify(execFile);

async function runStep(command: string, cwd: string): Promise<void> {
  if (/^npm ci\b/.test(command) && !/--omit=dev\b/.test(command)) {
    // The build stage's full install is the one .ci/run made in this checkout from the same
    // package-lock.json: linked rather than made again (half a gigabyte of dev tools).
    if (/[;&|]/.test(command)) throw new Error(`Dockerfile: RUN ${command}: keep the full npm ci alone on its line`);
    await symlink(join(ROOT, "node_modules"), join(cwd, "node_modules"), "dir");
    return;
  }
  // The same install, from npm's cache when it has the packages (this checkout's install filled it).
  const line = command.replace(/^npm ci\b/, "npm ci --prefer-offline");
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("npm_")));
  await exec("sh", ["-c", line], { cwd, env, maxBuffer: 16 * 1024 * 1024 }).catch((error: { stderr?: string }) => {
    throw new Error(`RUN ${command} failed:\n${error.stderr ?? String(error)}`);
  });
}

/** A service's `environment` as compose interpolates it: ${NAME}, ${NAME:-default}, ${NAME:?error}. */
function composeEnvironment(service: string, shell: Record<string, string>): Record<string, string> {
  const environment = compose.services[service]?.environment ?? {};
  return Object.fromEntries(
    Object.entries(environment).map(([name, value]) => [
      name,
      String(value).replace(/\$\{(\w+)(?::([-?])([^}]*))?\}/g, (_, variable: string, op?: string, arg?: string) => {
        if (shell[variable]) return shell[variable];
        if (op === "?") throw new Error(`compose would stop: ${arg}`);
        return op === "-" ? arg! : "";
      }),
    ]),
  );
}

/** Where compose's network names redis, postgres and the container's own ports, this machine's. */
async function addresses(schema: string): Promise<Record<string, string>> {
  const local = {
    DATABASE_URL: withSchema(TEST_DATABASE_URL, schema),
    REDIS_URL: TEST_REDIS_URL,
    HOST: "127.0.0.1",
    PORT: String(await freePort()),
    METRICS_PORT: String(await freePort()),
    METRICS_HOST: "127.0.0.1",
  };
  for (const name of Object.keys(local)) expect(compose.services["web-1"]?.environment, `compose sets ${name}`).toHaveProperty(name);
  return local;
}

interface Running {
  child: ChildProcess;
  exited: Promise<number | null>;
  output(): string;
  /** Resolves once `url` answers 200; fails with the process's output if it exits first. */
  answers(url: string): Promise<void>;
}

/** A process as the container runs it: that command, that environment only, in the WORKDIR. */
function start(name: string, [command, ...args]: string[], env: Record<string, string>, cwd: string): Running {
  let output = "";
  const child = spawn(command!, args, { cwd, env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? "/tmp", ...env }, stdio: ["ignore", "pipe", "pipe"] });
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const running: Running = {
    child,
    exited,
    output: () => `--- ${name} ---\n${output}`,
    async answers(url) {
      await eventually(
        async () => {
          if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}\n${running.output()}`);
          return fetch(url).then(
            (r) => r.ok,
            () => false,
          );
        },
        `${name} to answer ${url}`,
        60_000,
      );
    },
  };
  return running;
}

/** The Dockerfile's HEALTHCHECK, run as Docker runs it inside the container; its exit code. */
async function healthcheck(cwd: string, env: Record<string, string>): Promise<number> {
  const [command, ...args] = runtime.healthcheck!;
  try {
    await exec(command!, args, { cwd, env: { PATH: process.env.PATH!, ...env }, timeout: 10_000 });
    return 0;
  } catch (error) {
    return (error as { code?: number }).code ?? 1;
  }
}

async function forgetPrefix(prefix: string): Promise<void> {
  const redis = new Redis(TEST_REDIS_URL);
  try {
    await deleteKeys(redis, prefix);
  } finally {
    redis.disconnect();
  }
}
