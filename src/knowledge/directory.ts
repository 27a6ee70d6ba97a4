import { createHash } from "node:crypto";
import type { BigIntStats, Dirent } from "node:fs";
import { readdir, readFile, realpath, stat } from "node:fs/promises";
import { join, relative, sep } from "node:path";
import type { Logger } from "../logger.ts";
import { estimateTokens } from "./estimate.ts";
import { type ExtractedContent, extractContent, formatOf, type KnowledgeFormat, UnreadableKnowledge } from "./extract.ts";

/**
 * One knowledgeDir, looked at again and again: which knowledge files it holds, what they say,
 * and a version that changes exactly when one of them is changed, added or removed. A file
 * is read again only when its size, times or inode say it changed.
 */

export interface KnowledgeFile {
  /** Relative to the knowledgeDir, with "/" between folders whatever the platform. */
  path: string;
  content: ExtractedContent;
  /** As read: a PDF is sent to Claude as these bytes. */
  bytes: Buffer;
  tokens: number;
}

export interface KnowledgeSnapshot {
  version: string;
  /** The files that could be read, ordered by path. */
  files: readonly KnowledgeFile[];
}

/**
 * Claude takes at most 32 MB a request, PDFs included (as base64, a third larger): a file
 * larger than this could never be sent whole, and is more likely a mistake than knowledge.
 */
export const MAX_KNOWLEDGE_FILE_BYTES = 16 * 1024 * 1024;

/**
 * Mixed into every version: when the way files are read or split changes, a deploy changes
 * the versions, so passages indexed by older code are not taken for the new code's.
 */
const READER_REVISION = "knowledge-reader-1";

interface Seen {
  /** Inode, size, modification and change times: a file whose stamp is unchanged is not read again. */
  stamp: string;
  /** What the version is made of: the bytes' hash, or a mark for a file that could not be read. */
  fingerprint: string;
  file: KnowledgeFile | undefined;
}

interface Found {
  path: string;
  absolute: string;
  format: KnowledgeFormat;
}

export class KnowledgeDirectory {
  private readonly seen = new Map<string, Seen>();
  private readonly ignored = new Set<string>();
  private missingLogged = false;
  private snapshot: KnowledgeSnapshot = { version: "", files: [] };

  constructor(
    readonly dir: string,
    private readonly logger: Logger,
  ) {}

  /** The directory as it is now; the very same object as last time when nothing changed. */
  async scan(): Promise<KnowledgeSnapshot> {
    const { found, notKnowledge } = await this.list();
    const present = new Set(found.map((entry) => entry.path));
    for (const path of this.seen.keys()) if (!present.has(path)) this.seen.delete(path);
    // A file ignored, removed, then put back is named again.
    for (const path of this.ignored) if (!notKnowledge.has(path)) this.ignored.delete(path);
    for (const entry of found) await this.look(entry);

    const paths = [...this.seen.keys()].sort(byCodeUnits);
    const hash = createHash("sha256").update(READER_REVISION);
    for (const path of paths) hash.update(`\n${path}\0${this.seen.get(path)!.fingerprint}`);
    const version = hash.digest("hex").slice(0, 32);
    if (version === this.snapshot.version) return this.snapshot;
    const files = paths.map((path) => this.seen.get(path)!.file).filter((file) => file !== undefined);
    this.snapshot = { version, files };
    return this.snapshot;
  }

  /** Reads a file whose stamp changed; leaves the last reading in place while the file is still being written. */
  private async look(found: Found): Promise<void> {
    try {
      await this.read(found);
    } catch (error) {
      // Whatever went wrong with this one file (a stat refused, PDF.js failing in a way it does not report as a bad PDF), the others still serve.
      const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
      if (this.seen.get(found.path)?.fingerprint !== `failed ${reason}`) this.skip(found.path, `failed ${reason}`, `failed ${reason}`, reason);
    }
  }

  private async read({ path, absolute, format }: Found): Promise<void> {
    const before = await statOrUndefined(absolute);
    if (!before) {
      this.seen.delete(path);
      return;
    }
    const stamp = stampOf(before);
    const previous = this.seen.get(path);
    if (previous?.stamp === stamp) return;
    if (before.size > BigInt(MAX_KNOWLEDGE_FILE_BYTES)) {
      this.skip(path, stamp, `too large ${before.size}`, `larger than ${MAX_KNOWLEDGE_FILE_BYTES} bytes`);
      return;
    }
    let bytes: Buffer;
    try {
      bytes = await readFile(absolute);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "ENOENT") this.seen.delete(path);
      else this.skip(path, stamp, `unreadable ${stamp}`, `cannot be read (${code ?? (error as Error).message})`);
      return;
    }
    const after = await statOrUndefined(absolute);
    // Written to while we read it: what we hold may be half of it. The next look reads it whole.
    if (!after || stampOf(after) !== stamp) return;
    const fingerprint = createHash("sha256").update(bytes).digest("hex");
    if (previous?.fingerprint === fingerprint) {
      this.seen.set(path, { ...previous, stamp });
      return;
    }
    try {
      const content = await extractContent(format, bytes);
      this.seen.set(path, { stamp, fingerprint, file: { path, content, bytes, tokens: estimateTokens(content) } });
    } catch (error) {
      if (!(error instanceof UnreadableKnowledge)) throw error;
      this.skip(path, stamp, fingerprint, error.message);
    }
  }

  /** Law 6 for files: one that cannot serve is named in the log (never its content) and the rest still serve. */
  private skip(path: string, stamp: string, fingerprint: string, reason: string): void {
    this.logger.warn({ event: "knowledge.file_skipped", dir: this.dir, file: path, reason }, "knowledge file skipped");
    this.seen.set(path, { stamp, fingerprint, file: undefined });
  }

  /** Every knowledge file under the directory, following symbolic links (a Kubernetes ConfigMap is made of them). */
  private async list(): Promise<{ found: Found[]; notKnowledge: Set<string> }> {
    const found: Found[] = [];
    const notKnowledge = new Set<string>();
    const visited = new Set<string>();
    const walk = async (dir: string): Promise<void> => {
      let entries: Dirent[];
      try {
        const real = await realpath(dir);
        // A link back up the tree would otherwise be followed forever.
        if (visited.has(real)) return;
        visited.add(real);
        entries = await readdir(dir, { withFileTypes: true });
      } catch (error) {
        if (dir === this.dir) throw error;
        this.logger.warn(
          { event: "knowledge.folder_skipped", dir: this.dir, folder: relativePath(this.dir, dir), reason: (error as NodeJS.ErrnoException).code },
          "knowledge folder skipped",
        );
        return;
      }
      for (const entry of entries) {
        // Hidden: editors' swap files, .git, .DS_Store, and a ConfigMap's own ..data folders
        // (the files it mounts are links into them, found by their own names).
        if (entry.name.startsWith(".")) continue;
        const absolute = join(dir, entry.name);
        const path = relativePath(this.dir, absolute);
        const kind = entry.isSymbolicLink()
          ? await this.linkTargetKind(absolute, path)
          : entry.isDirectory()
            ? "directory"
            : entry.isFile()
              ? "file"
              : undefined;
        if (kind === "directory") await walk(absolute);
        if (kind === undefined) notKnowledge.add(path);
        if (kind !== "file") continue;
        const format = formatOf(entry.name);
        if (format) {
          found.push({ path, absolute, format });
        } else {
          notKnowledge.add(path);
          this.ignore(path);
        }
      }
    };
    try {
      await walk(this.dir);
      this.missingLogged = false;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" && code !== "ENOTDIR" && code !== "EACCES") throw error;
      if (!this.missingLogged) {
        this.logger.warn({ event: "knowledge.dir_unavailable", dir: this.dir, reason: code }, "knowledge directory cannot be read; no knowledge until it can");
        this.missingLogged = true;
      }
      return { found: [], notKnowledge };
    }
    return { found, notKnowledge };
  }

  /** What a symbolic link points at; a dangling one is named in the log once and read as nothing. */
  private async linkTargetKind(absolute: string, path: string): Promise<"file" | "directory" | undefined> {
    try {
      const target = await stat(absolute);
      return target.isDirectory() ? "directory" : target.isFile() ? "file" : undefined;
    } catch (error) {
      if (!this.ignored.has(path)) {
        this.ignored.add(path);
        const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
        this.logger.warn({ event: "knowledge.link_skipped", dir: this.dir, file: path, reason }, "knowledge link points at nothing readable; skipped");
      }
      return undefined;
    }
  }

  private ignore(path: string): void {
    if (this.ignored.has(path)) return;
    this.ignored.add(path);
    this.logger.info(
      { event: "knowledge.file_ignored", dir: this.dir, file: path },
      "not a knowledge file (only .md, .markdown, .txt and .pdf are read); ignored",
    );
  }
}

function stampOf(stats: BigIntStats): string {
  return `${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`;
}

async function statOrUndefined(path: string): Promise<BigIntStats | undefined> {
  try {
    const stats = await stat(path, { bigint: true });
    return stats.isFile() ? stats : undefined;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

function relativePath(root: string, absolute: string): string {
  return relative(root, absolute).split(sep).join("/");
}

/** Locale-free, so every process on every machine orders the files, and so hashes the version, alike. */
function byCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
