// npm run build: the Prisma client generated, src/ compiled to JavaScript (tsconfig.build.json)
// and the files beside the sources that the code reads at run time (the staff page) copied next
// to it, so dist/ runs on plain node: npm start, the image, the worker child. Types are checked
// by npm test (tsc --noEmit), not here: the build only has to emit.
//
// Every start (npm start, web, worker, migrate, staff) runs it with --if-stale, and the README
// starts several roles on one host at once, beside ones already running. So a build never
// writes or deletes where a process may be running from:
// - dist is a symbolic link to a complete build, `.dist-<inputs hash>-<time>`, made in a folder
//   of its own and swapped in with one rename. A running process resolved the link when it
//   started and keeps its files (page assets, the worker child it forks again) to the end.
//   The builds sit beside dist, at its depth, since dist/db/migrate.js finds prisma/ at ../../.
// - --if-stale compares a hash of the inputs' contents (src/, the build's configuration,
//   the lockfile, this script) with the one in the current build's name, and the Prisma
//   schema's with the one stamped beside the generated client: an unchanged tree costs a
//   read of ~3 MB, and the client (which a running tsx process or a compile reads) is
//   rewritten only when its schema or Prisma's version changed.
// - Builds take a lock, and --if-stale looks again once it holds it: two starts at the same
//   moment make one build, and the second runs it. The lock only saves work: safety comes
//   from the folders, so a lock taken over by mistake costs a second build, never a file.
// - An old build is removed once no process holds it open (src/main.ts holds its own entry
//   point; this reads /proc/<pid>/fd), except the current and the one just replaced (a
//   process may have started from it a moment ago and not be holding it yet).
//
//   node scripts/build.mjs                              always: generate, compile, swap (npm run build)
//   node scripts/build.mjs --if-stale                   each step only when its inputs changed (starts)
//   node scripts/build.mjs --if-stale --client-only     the Prisma client alone (npm test, demo, bench)
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { hostname } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/** A step that failed, said in one line (its own output is above it). */
class BuildError extends Error {}

const root = realpathSync(fileURLToPath(new URL("..", import.meta.url)));
const require = createRequire(import.meta.url);
const options = new Set(process.argv.slice(2));
const unknown = [...options].filter((o) => !["--if-stale", "--client-only"].includes(o));
if (unknown.length > 0) fail(`unknown option ${unknown.join(" ")}: use --if-stale, --client-only`);
const ifStale = options.has("--if-stale");
const clientOnly = options.has("--client-only");

const DIST = join(root, "dist");
const SRC = join(root, "src");
const CLIENT = join(SRC, "generated", "prisma");
/** The hash of the inputs the client was generated from; not an input of the compile, nor copied. */
const CLIENT_STAMP = join(SRC, "generated", ".prisma-inputs.sha256");
const LOCK = join(root, ".dist.lock");
const BUILD_NAME = /^\.dist-([0-9a-f]{16})-[0-9a-z]+$/;
/** A lock older than this is taken over even if its pid lives (a reused pid); a build takes seconds. */
const LOCK_STALE_MS = 10 * 60_000;
/** Without /proc to tell which builds are in use, this many of the newest are kept besides those two. */
const OTHERS_KEPT_WITHOUT_PROC = 3;

if (ifStale && !clientStale() && (clientOnly || builtHash() === distInputsHash())) process.exit(0);

const release = await lock();
try {
  if (!ifStale || clientStale()) generate();
  if (!clientOnly) {
    const hash = distInputsHash();
    if (!ifStale || builtHash() !== hash) {
      const previous = swapTo(compile(hash));
      removeUnused([currentBuild(), previous]);
    }
  }
} catch (error) {
  fail(error instanceof BuildError ? error.message : (error?.stack ?? String(error)));
} finally {
  release();
}

// --- the Prisma client -------------------------------------------------------------------

function clientInputsHash() {
  const hash = createHash("sha256");
  for (const file of ["prisma/schema.prisma", "prisma.config.ts"]) add(hash, file, readFileSync(join(root, file)));
  for (const pkg of ["prisma", "@prisma/client"]) add(hash, pkg, JSON.parse(readFileSync(require.resolve(`${pkg}/package.json`), "utf8")).version);
  return hash.digest("hex");
}

function clientStale() {
  return !existsSync(join(CLIENT, "client.ts")) || readOrUndefined(CLIENT_STAMP) !== clientInputsHash();
}

function generate() {
  const hash = clientInputsHash();
  const prisma = require.resolve("prisma/build/index.js");
  // Prisma's CLI wants a schema engine it never runs for generate (TOOLCHAIN.md).
  run("prisma generate", [prisma, "generate"], { PRISMA_SCHEMA_ENGINE_BINARY: "/bin/true" });
  writeFileSync(CLIENT_STAMP, hash);
}

// --- the compile -------------------------------------------------------------------------

/** What the compile reads: every file of src/ (the generated client too), its configuration, this script. 64 bits of its hash. */
function distInputsHash() {
  const hash = createHash("sha256");
  for (const file of ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json", "scripts/build.mjs"]) {
    add(hash, file, readFileSync(join(root, file)));
  }
  for (const file of filesUnder(SRC)) if (file !== CLIENT_STAMP) add(hash, relative(root, file), readFileSync(file));
  return hash.digest("hex").slice(0, 16);
}

/** The inputs hash of the build dist links to, if it is a complete one. */
function builtHash() {
  const name = currentBuild();
  const hash = name === undefined ? undefined : BUILD_NAME.exec(name)?.[1];
  return hash !== undefined && existsSync(join(root, name, "main.js")) ? hash : undefined;
}

function currentBuild() {
  try {
    return readlinkSync(DIST);
  } catch {
    return undefined; // none yet, or a directory of the build before this one
  }
}

/** A complete build in a new folder beside dist, named after its inputs (hashed before the compile reads them). */
function compile(hash) {
  const name = `.dist-${hash}-${Date.now().toString(36)}`;
  const partial = join(root, `${name}.partial-${process.pid}`);
  try {
    run("tsc", [require.resolve("typescript/bin/tsc"), "-p", join(root, "tsconfig.build.json"), "--noCheck", "--outDir", partial]);
    cpSync(SRC, partial, { recursive: true, filter: (path) => !path.endsWith(".ts") && path !== CLIENT_STAMP });
    renameSync(partial, join(root, name));
  } finally {
    rmSync(partial, { recursive: true, force: true }); // gone by now unless the compile failed
  }
  return name;
}

/** Points dist at the build in one rename; returns what it pointed at before. */
function swapTo(name) {
  let previous = currentBuild();
  const link = join(root, `.dist.link-${process.pid}`);
  rmSync(link, { force: true });
  symlinkSync(name, link);
  try {
    renameSync(link, DIST);
  } catch (error) {
    if (error.code !== "EISDIR" && error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
    // dist/ as a directory, made by the build before this one: moved aside, once.
    previous = `.dist-legacy-${Date.now().toString(36)}`;
    renameSync(DIST, join(root, previous));
    renameSync(link, DIST);
  }
  return previous;
}

/** Old builds no process holds open, and what dead builds left half made (named after their pid). */
function removeUnused(keep) {
  const held = heldBuilds();
  const entries = readdirSync(root)
    .filter((name) => name.startsWith(".dist") && !keep.includes(name))
    .map((name) => ({ name, pid: /(?:\.partial-|^\.dist\.link-|^\.dist\.lock\.)(\d+)$/.exec(name)?.[1] }));
  const builds = entries.filter((entry) => entry.pid === undefined && entry.name.startsWith(".dist-")).sort((a, b) => modified(b.name) - modified(a.name));
  for (const entry of entries) {
    const unused =
      entry.pid !== undefined
        ? !alive(Number(entry.pid))
        : builds.includes(entry) && (held ? !held.has(entry.name) : builds.indexOf(entry) >= OTHERS_KEPT_WITHOUT_PROC);
    if (unused) rmSync(join(root, entry.name), { recursive: true, force: true });
  }
}

/** The builds some process has a file of open, from /proc (Linux); undefined where there is none. */
function heldBuilds() {
  let pids;
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  const held = new Set();
  const prefix = `${root}/.dist-`;
  for (const pid of pids) {
    let fds;
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // ended meanwhile, or another user's
    }
    for (const fd of fds) {
      let target;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (target.startsWith(prefix)) held.add(relative(root, target).split("/")[0]);
    }
  }
  return held;
}

// --- the lock ----------------------------------------------------------------------------

/**
 * One build at a time in this checkout: .dist.lock, a folder holding its owner, made whole
 * elsewhere and renamed into place (a rename onto a folder that is not empty fails). Waits for
 * a live owner; takes over from a dead one's (a build killed midway).
 */
async function lock() {
  const mine = `${LOCK}.${process.pid}`;
  rmSync(mine, { recursive: true, force: true });
  mkdirSync(mine);
  process.once("exit", () => rmSync(mine, { recursive: true, force: true })); // if never renamed into place
  writeFileSync(join(mine, "owner"), JSON.stringify({ pid: process.pid, host: hostname(), since: Date.now() }));
  let said = false;
  for (const deadline = Date.now() + 2 * LOCK_STALE_MS; ; ) {
    try {
      renameSync(mine, LOCK);
      const release = () => {
        if (readOwner(LOCK)?.pid === process.pid) rmSync(LOCK, { recursive: true, force: true });
      };
      process.once("exit", release);
      return release;
    } catch (error) {
      if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
    }
    const owner = readOwner(LOCK);
    if (owner && (Date.now() - owner.since > LOCK_STALE_MS || (owner.host === hostname() && !alive(owner.pid)))) {
      const aside = `${LOCK}.stale-${owner.pid}-${process.pid}`;
      try {
        renameSync(LOCK, aside);
        rmSync(aside, { recursive: true, force: true });
      } catch {
        // taken over by another start meanwhile
      }
      continue;
    }
    if (Date.now() > deadline) fail(`${LOCK} is still held by ${JSON.stringify(owner)}: remove it if no build runs`);
    if (owner && !said) {
      console.error(`[build] waiting for the build of pid ${owner.pid} (${relative(root, LOCK)})`);
      said = true;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function readOwner(lockDir) {
  try {
    return JSON.parse(readFileSync(join(lockDir, "owner"), "utf8"));
  } catch {
    return undefined; // released meanwhile
  }
}

// --- small helpers -----------------------------------------------------------------------

function run(what, args, env = {}) {
  console.error(`[build] ${what}`);
  const result = spawnSync(process.execPath, args, { cwd: root, stdio: "inherit", env: { ...process.env, ...env } });
  if (result.status !== 0) throw new BuildError(`${what} failed (exit ${result.status ?? result.signal}); dist is left as it was`);
}

function add(hash, name, content) {
  hash.update(`${name}\0${Buffer.byteLength(content)}\0`);
  hash.update(content);
}

function filesUnder(dir) {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort();
}

function readOrUndefined(path) {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

function modified(name) {
  try {
    return statSync(join(root, name)).mtimeMs;
  } catch {
    return 0;
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return error.code === "EPERM"; // someone else's process, alive
  }
}

function fail(message) {
  console.error(`[build] ${message}`);
  process.exit(1);
}
