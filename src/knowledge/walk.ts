import type { Dirent, Stats } from "node:fs";
import { readdirSync, realpathSync, statSync } from "node:fs";
import { readdir, realpath, stat } from "node:fs/promises";
import { join, sep } from "node:path";
import { formatOf, type KnowledgeFormat } from "./formats.ts";

/**
 * Which files a knowledgeDir holds, by one set of rules run two ways: once at start-up,
 * synchronously, where a folder that breaks them stops the start naming what
 * (`knowledgeFolderProblems`, from src/settings.ts); and at every poll, asynchronously, where
 * nothing they refuse is read (`listKnowledge`, from directory.ts). The rules:
 *
 * - Hidden names are skipped: editors' swap files, .git, .DS_Store, and a ConfigMap's own
 *   ..data folders (the files it mounts are links into them, found by their own names).
 * - Symbolic links are followed (a Kubernetes ConfigMap is made of them) only to files and
 *   folders inside the folder. Whatever a knowledge file says is shown to Claude, and so to
 *   whoever asks it: a link to /proc/self/environ or ~/.aws would hand them this machine's
 *   secrets. Each file is read at the real path checked here, never through the link again.
 * - No folder is walked twice: a link back up the tree would otherwise be followed forever.
 * - At most `maxFiles` knowledge files holding `maxBytes` bytes: every byte is held in memory,
 *   indexed and perhaps sent, and a knowledgeDir set to a home folder by mistake must stop
 *   the start, not read a disk. The walk stops at the first file past `maxFiles`.
 */

export interface KnowledgeLimits {
  /** KNOWLEDGE_MAX_FILES: knowledge files (.md, .markdown, .txt, .pdf) in one knowledgeDir. */
  readonly maxFiles: number;
  /** KNOWLEDGE_MAX_BYTES: their bytes together. */
  readonly maxBytes: number;
}

/**
 * Claude takes at most 32 MB a request, PDFs included (as base64, a third larger): a file
 * larger than this could never be sent whole, and is more likely a mistake than knowledge. It
 * is skipped when read (directory.ts), and so does not count toward `maxBytes`.
 */
export const MAX_KNOWLEDGE_FILE_BYTES = 16 * 1024 * 1024;

export interface ListedFile {
  /** Relative to the knowledgeDir, as walked (a link's own name), with "/" between folders whatever the platform. */
  path: string;
  /** Where it really is, inside the knowledgeDir: where it is read. */
  real: string;
  format: KnowledgeFormat;
}

export interface KnowledgeListing {
  /** The knowledge files. */
  files: ListedFile[];
  /** Files that are not knowledge by their extension: never read. */
  notKnowledge: string[];
  /** Links that lead outside the knowledgeDir, with their real target: never followed. */
  outside: { path: string; target: string }[];
  /** Links to nothing that can be read (dangling, a loop of links), with why. */
  broken: { path: string; reason: string }[];
  /** Folders inside that cannot be listed, with why; the rest still serve. */
  unlistable: { path: string; reason: string }[];
  /** The bytes of the knowledge files found (those not too large to be read at all). */
  bytes: number;
  /** More than `maxFiles` knowledge files: the walk stopped at the first one past it. */
  stoppedAtMaxFiles: boolean;
}

/** The knowledgeDir as it is now; rejects only when the knowledgeDir itself cannot be listed. */
export function listKnowledge(dir: string, limits: KnowledgeLimits): Promise<KnowledgeListing> {
  return runAsync(walkKnowledge(dir, limits));
}

/**
 * What start-up refuses in a knowledgeDir: links that lead outside it, and the caps. A folder
 * that cannot be listed is named by the configuration's own check (src/config/numbers.ts);
 * what a running process only logs (a dangling link, a file that is not knowledge) is not a
 * problem here: a ConfigMap being rewritten has such moments.
 */
export function knowledgeFolderProblems(dir: string, limits: KnowledgeLimits): string[] {
  let listing: KnowledgeListing;
  try {
    listing = runSync(walkKnowledge(dir, limits));
  } catch (error) {
    return [`${dir} cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`];
  }
  return [
    ...listing.outside.map(({ path, target }) => `${path} in ${dir} is a link to ${target}, outside the folder: only links inside it are followed`),
    ...limitBreaches(listing, limits).map((breach) => `${dir} ${breach}`),
  ];
}

/** Which caps a listing is past, each naming its variable and what was found. */
export function limitBreaches(listing: KnowledgeListing, limits: KnowledgeLimits): string[] {
  const breaches: string[] = [];
  if (listing.stoppedAtMaxFiles) breaches.push(`holds more than ${limits.maxFiles} knowledge files, past KNOWLEDGE_MAX_FILES (${limits.maxFiles})`);
  if (listing.bytes > limits.maxBytes) {
    const found = `${listing.stoppedAtMaxFiles ? "at least " : ""}${listing.bytes} bytes`;
    breaches.push(`holds ${found} of knowledge files, past KNOWLEDGE_MAX_BYTES (${limits.maxBytes})`);
  }
  return breaches;
}

/** What the walk asks of the file system: answered synchronously at start-up, asynchronously at every poll. */
type Ask = { op: "realpath"; path: string } | { op: "readdir"; path: string } | { op: "stat"; path: string };
type Walk<T> = Generator<Ask, T, unknown>;

function* realpathOf(path: string): Walk<string> {
  return (yield { op: "realpath", path }) as string;
}

function* entriesOf(path: string): Walk<Dirent[]> {
  return (yield { op: "readdir", path }) as Dirent[];
}

function* statOf(path: string): Walk<Stats> {
  return (yield { op: "stat", path }) as Stats;
}

function* walkKnowledge(dir: string, limits: KnowledgeLimits): Walk<KnowledgeListing> {
  const listing: KnowledgeListing = { files: [], notKnowledge: [], outside: [], broken: [], unlistable: [], bytes: 0, stoppedAtMaxFiles: false };
  // The knowledgeDir may itself be a link (a mounted volume, a ConfigMap): inside means inside where it leads.
  const root = yield* realpathOf(dir);
  const within = root.endsWith(sep) ? root : `${root}${sep}`;
  const inside = (real: string) => real === root || real.startsWith(within);
  const visited = new Set<string>();

  function* folder(real: string, relative: string): Walk<void> {
    if (visited.has(real)) return;
    visited.add(real);
    let entries: Dirent[];
    try {
      entries = yield* entriesOf(real);
    } catch (error) {
      if (real === root) throw error;
      listing.unlistable.push({ path: relative, reason: reasonOf(error) });
      return;
    }
    entries.sort((a, b) => byCodeUnits(a.name, b.name));
    for (const entry of entries) {
      if (listing.stoppedAtMaxFiles) return;
      if (entry.name.startsWith(".")) continue;
      const path = relative ? `${relative}/${entry.name}` : entry.name;
      let target = join(real, entry.name);
      let stats: Stats | undefined;
      if (entry.isSymbolicLink()) {
        try {
          target = yield* realpathOf(target);
          stats = yield* statOf(target);
        } catch (error) {
          listing.broken.push({ path, reason: reasonOf(error) });
          continue;
        }
        if (!inside(target)) {
          listing.outside.push({ path, target });
          continue;
        }
      }
      const isDirectory = stats ? stats.isDirectory() : entry.isDirectory();
      const isFile = stats ? stats.isFile() : entry.isFile();
      if (isDirectory) yield* folder(target, path);
      if (!isFile) continue;
      const format = formatOf(entry.name);
      if (!format) {
        listing.notKnowledge.push(path);
        continue;
      }
      if (!stats) {
        try {
          stats = yield* statOf(target);
        } catch {
          // Gone since the folder was listed, or not to be stat'ed: reading it says which (directory.ts).
        }
      }
      listing.files.push({ path, real: target, format });
      if (stats && stats.size <= MAX_KNOWLEDGE_FILE_BYTES) listing.bytes += stats.size;
      if (listing.files.length > limits.maxFiles) listing.stoppedAtMaxFiles = true;
    }
  }

  yield* folder(root, "");
  return listing;
}

function runSync<T>(walk: Walk<T>): T {
  let step = walk.next();
  while (!step.done) {
    let answer: unknown;
    try {
      answer = answerSync(step.value);
    } catch (error) {
      step = walk.throw(error);
      continue;
    }
    step = walk.next(answer);
  }
  return step.value;
}

async function runAsync<T>(walk: Walk<T>): Promise<T> {
  let step = walk.next();
  while (!step.done) {
    let answer: unknown;
    try {
      answer = await answerAsync(step.value);
    } catch (error) {
      step = walk.throw(error);
      continue;
    }
    step = walk.next(answer);
  }
  return step.value;
}

function answerSync(ask: Ask): unknown {
  switch (ask.op) {
    case "realpath":
      return realpathSync(ask.path);
    case "readdir":
      return readdirSync(ask.path, { withFileTypes: true });
    case "stat":
      return statSync(ask.path);
  }
}

function answerAsync(ask: Ask): Promise<unknown> {
  switch (ask.op) {
    case "realpath":
      return realpath(ask.path);
    case "readdir":
      return readdir(ask.path, { withFileTypes: true });
    case "stat":
      return stat(ask.path);
  }
}

function reasonOf(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
}

/** Locale-free, so every process on every machine walks, and stops at the cap, alike. */
export function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
