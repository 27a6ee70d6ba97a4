import { createHash } from "node:crypto";
import { type BigIntStats, constants } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import type { Logger } from "../logger.ts";
import { estimateTokens } from "./estimate.ts";
import { type ExtractedContent, extractContent, UnreadableKnowledge } from "./extract.ts";
import type { KnowledgeFormat } from "./formats.ts";
import { byCodeUnits, type KnowledgeLimits, type KnowledgeListing, limitBreaches, listKnowledge, MAX_KNOWLEDGE_FILE_BYTES } from "./walk.ts";

/**
 * One knowledgeDir, looked at again and again: which knowledge files it holds, what they say,
 * and a version that changes exactly when one of them is changed, added or removed. A file
 * is read again only when its size, times or inode say it changed. Which files are read, and
 * which are refused (a link leading outside the folder, a folder past its caps), is walk.ts's.
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
  /** The real path the walk checked is inside the folder. */
  absolute: string;
  format: KnowledgeFormat;
}

/**
 * Read without following a link: the walk checked this path is no link and inside the folder,
 * and one swapped for a link since (to lead outside) is refused (ELOOP), not followed.
 */
const READ_NO_LINK = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0);

export class KnowledgeDirectory {
  private readonly seen = new Map<string, Seen>();
  /** What the log last said of each path not read (a folder's ends in "/"). */
  private said = new Map<string, string>();
  private limitsSaid = "";
  private missingLogged = false;
  private snapshot: KnowledgeSnapshot = { version: "", files: [] };

  constructor(
    readonly dir: string,
    private readonly logger: Logger,
    private readonly limits: KnowledgeLimits,
  ) {}

  /** The directory as it is now; the very same object as last time when nothing changed, or when this reading is past the caps. */
  async scan(): Promise<KnowledgeSnapshot> {
    const listing = await this.list();
    if (this.pastLimits(listing)) return this.snapshot;
    this.nameTheUnread(listing);
    const found = listing.files.map(({ path, real, format }): Found => ({ path, absolute: real, format }));
    const present = new Set(found.map((entry) => entry.path));
    for (const path of this.seen.keys()) if (!present.has(path)) this.seen.delete(path);
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
      bytes = await readFile(absolute, { flag: READ_NO_LINK });
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

  /** The knowledge files under the directory (walk.ts's rules); none while the directory itself cannot be read. */
  private async list(): Promise<KnowledgeListing> {
    try {
      const listing = await listKnowledge(this.dir, this.limits);
      this.missingLogged = false;
      return listing;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "ENOENT" && code !== "ENOTDIR" && code !== "EACCES") throw error;
      if (!this.missingLogged) {
        this.logger.warn({ event: "knowledge.dir_unavailable", dir: this.dir, reason: code }, "knowledge directory cannot be read; no knowledge until it can");
        this.missingLogged = true;
      }
      return { files: [], notKnowledge: [], outside: [], broken: [], unlistable: [], bytes: 0, stoppedAtMaxFiles: false };
    }
  }

  /**
   * Past a cap, nothing of this reading serves: the last one still does, and the log says why,
   * once for each reading that is past it. Start-up refuses such a folder; this is one that grew since.
   */
  private pastLimits(listing: KnowledgeListing): boolean {
    const breaches = limitBreaches(listing, this.limits);
    const said = breaches.join("\n");
    if (said !== this.limitsSaid && breaches.length > 0) {
      this.logger.error(
        { event: "knowledge.over_limit", dir: this.dir, problems: breaches },
        "knowledge folder past its limits (KNOWLEDGE_MAX_FILES, KNOWLEDGE_MAX_BYTES); its last reading within them still serves",
      );
    }
    this.limitsSaid = said;
    return breaches.length > 0;
  }

  /** What is not read, each named in the log once (again when what is said of it changes), never its content. */
  private nameTheUnread(listing: KnowledgeListing): void {
    const now = new Map<string, { said: string; log: () => void }>();
    for (const path of listing.notKnowledge) {
      now.set(path, {
        said: "not knowledge",
        log: () =>
          this.logger.info(
            { event: "knowledge.file_ignored", dir: this.dir, file: path },
            "not a knowledge file (only .md, .markdown, .txt and .pdf are read); ignored",
          ),
      });
    }
    for (const { path, reason } of listing.broken) {
      now.set(path, {
        said: `broken ${reason}`,
        log: () =>
          this.logger.warn({ event: "knowledge.link_skipped", dir: this.dir, file: path, reason }, "knowledge link points at nothing readable; skipped"),
      });
    }
    for (const { path, target } of listing.outside) {
      now.set(path, {
        said: `outside ${target}`,
        log: () =>
          this.logger.error(
            { event: "knowledge.link_refused", dir: this.dir, file: path, target },
            "knowledge link leads outside its folder; never read (only links inside the folder are followed)",
          ),
      });
    }
    for (const { path, reason } of listing.unlistable) {
      now.set(`${path}/`, {
        said: `unlistable ${reason}`,
        log: () => this.logger.warn({ event: "knowledge.folder_skipped", dir: this.dir, folder: path, reason }, "knowledge folder skipped"),
      });
    }
    for (const [path, { said, log }] of now) if (this.said.get(path) !== said) log();
    // One named, then mended, then broken again is named again.
    this.said = new Map([...now].map(([path, { said }]) => [path, said]));
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
