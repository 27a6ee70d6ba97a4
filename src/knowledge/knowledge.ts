import { resolve } from "node:path";
import type { Db } from "../db/client.ts";
import type { Logger } from "../logger.ts";
import { KnowledgeDirectory, type KnowledgeSnapshot } from "./directory.ts";
import { splitIntoPassages } from "./passages.ts";
import { deleteUnusedVersions, indexVersion, isIndexed, openingPassages, type ServedVersion, searchPassages, touchVersions } from "./store.ts";

/**
 * A business number's own knowledge (issue 19): the Markdown, text and PDF files of its
 * knowledgeDir, shown to Claude whole as cited documents while they fit the token budget, and
 * as the passages that best match the customer's words when they do not. Every worker process
 * runs one; they share the passages through Postgres.
 */

export interface KnowledgeDocument {
  /** The file's path relative to knowledgeDir, e.g. "returns.md": Claude's citation names it. */
  title: string;
  /** Markdown and text are sent as text/plain. */
  mediaType: "text/plain" | "application/pdf";
  /** For text/plain. */
  text?: string;
  /** For application/pdf: the file's bytes. */
  base64?: string;
}

export interface KnowledgePassage {
  /** Stable id of the stored passage. */
  id: string;
  /** The file's relative path. */
  source: string;
  /** A human title: the file's path, plus the nearest Markdown heading or "page N" of a PDF. */
  title: string;
  text: string;
}

export type KnowledgeForClaude =
  /**
   * All files fit KNOWLEDGE_TOKEN_BUDGET: sent whole, ordered by path. The documents are the same
   * (frozen) objects for every reply until a file changes: the prompt cache sees the same bytes.
   */
  | { kind: "documents"; version: string; documents: KnowledgeDocument[] }
  /**
   * Too large: the best passages for the customer's words ("search"), or, when none of their
   * words tells passages apart (a greeting, a question in other words than the files'), the
   * opening passage of each file ("openings"), so Claude still knows what the business covers.
   */
  | { kind: "passages"; version: string; match: "search" | "openings"; passages: KnowledgePassage[] };

export interface KnowledgeBase {
  /**
   * What Claude is shown for this number and these customer words; undefined when the number has
   * no knowledgeDir (or it is empty). Rejects when Postgres cannot be reached in passages mode.
   */
  forReply(phoneNumberId: string, query: string): Promise<KnowledgeForClaude | undefined>;
  /** Stops watching the directories. */
  close(): Promise<void>;
}

export interface KnowledgeBaseDeps {
  db: Db;
  logger: Logger;
  /** phone_number_id -> absolute knowledgeDir. */
  dirs: ReadonlyMap<string, string>;
  /** KNOWLEDGE_TOKEN_BUDGET. */
  tokenBudget: number;
  /** How often the directories are looked at (default 1000 ms). */
  pollMs?: number;
  /** Passages returned per reply (default 8). */
  passageLimit?: number;
  /**
   * How long a stored version no process serves is kept (default 10 minutes): long enough for
   * every worker to have seen the same change, so none is left asking for a deleted version.
   */
  keepUnusedVersionsMs?: number;
}

/**
 * Claude's limits for PDFs in one request: 100 pages, and 32 MB a request, base64 included
 * (a third larger than the bytes). Knowledge past these is searched, whatever its tokens.
 */
const MAX_PDF_PAGES_SENT_WHOLE = 100;
const MAX_PDF_BYTES_SENT_WHOLE = 20 * 1024 * 1024;

type Served =
  | { kind: "empty"; version: string }
  | { kind: "documents"; version: string; documents: readonly KnowledgeDocument[] }
  | { kind: "passages"; version: string; snapshot: KnowledgeSnapshot };

interface Watched {
  directory: KnowledgeDirectory;
  phoneNumberIds: string[];
  snapshot: KnowledgeSnapshot | undefined;
  served: Served;
}

export async function startKnowledgeBase(deps: KnowledgeBaseDeps): Promise<KnowledgeBase> {
  const pollMs = deps.pollMs ?? 1_000;
  const passageLimit = deps.passageLimit ?? 8;
  const keepUnusedVersionsMs = deps.keepUnusedVersionsMs ?? 10 * 60_000;
  // Touched well within the time another process waits before deleting.
  const touchEveryMs = Math.max(pollMs, keepUnusedVersionsMs / 4);
  const logger = deps.logger.child({ module: "knowledge" });

  // Numbers that share a knowledgeDir share its reading.
  const watched = new Map<string, Watched>();
  const byNumber = new Map<string, Watched>();
  for (const [phoneNumberId, dir] of deps.dirs) {
    const absolute = resolve(dir);
    let entry = watched.get(absolute);
    if (!entry) {
      entry = { directory: new KnowledgeDirectory(absolute, logger), phoneNumberIds: [], snapshot: undefined, served: { kind: "empty", version: "" } };
      watched.set(absolute, entry);
    }
    entry.phoneNumberIds.push(phoneNumberId);
    byNumber.set(phoneNumberId, entry);
  }

  /** The version each number's passages are known to be stored at, in Postgres. */
  const indexedVersion = new Map<string, string>();
  const indexing = new Map<string, { version: string; done: Promise<void> }>();
  /** Once per number and version, not once a poll, while Postgres is away. */
  const indexFailureLogged = new Map<string, string>();

  function ensureIndexed(phoneNumberId: string, served: Extract<Served, { kind: "passages" }>): Promise<void> {
    if (indexedVersion.get(phoneNumberId) === served.version) return Promise.resolve();
    const running = indexing.get(phoneNumberId);
    if (running?.version === served.version) return running.done;
    const done = index({ phoneNumberId, version: served.version }, served.snapshot).finally(() => {
      if (indexing.get(phoneNumberId)?.done === done) indexing.delete(phoneNumberId);
    });
    indexing.set(phoneNumberId, { version: served.version, done });
    return done;
  }

  async function index(target: ServedVersion, snapshot: KnowledgeSnapshot): Promise<void> {
    // Most often another process has stored them already: then nothing is split, and no lock taken.
    let outcome: "indexed" | "already" = "already";
    let passages: number | undefined;
    if (!(await isIndexed(deps.db, target))) {
      const drafts = snapshot.files.flatMap((file) => splitIntoPassages(file.path, file.content));
      outcome = await indexVersion(deps.db, target, drafts);
      passages = drafts.length;
    }
    if (outcome === "indexed") logger.info({ event: "knowledge.indexed", ...target, passages }, "knowledge passages stored for search");
    else logger.debug({ event: "knowledge.already_indexed", ...target }, "knowledge passages already stored (by another process, or before a restart)");
    indexedVersion.set(target.phoneNumberId, target.version);
  }

  function serve(snapshot: KnowledgeSnapshot): Served {
    // An empty text file says nothing, and Claude refuses an empty document. A PDF without text
    // (a scan) still shows Claude its pages.
    const files = snapshot.files.filter((file) => file.content.format === "pdf" || file.content.text.trim() !== "");
    if (files.length === 0) return { kind: "empty", version: snapshot.version };
    const tokens = files.reduce((sum, file) => sum + file.tokens, 0);
    const pdfs = files.filter((file) => file.content.format === "pdf");
    const pdfPages = pdfs.reduce((sum, file) => sum + (file.content.format === "pdf" ? file.content.pages.length : 0), 0);
    const pdfBytes = pdfs.reduce((sum, file) => sum + file.bytes.length, 0);
    if (tokens > deps.tokenBudget || pdfPages > MAX_PDF_PAGES_SENT_WHOLE || pdfBytes > MAX_PDF_BYTES_SENT_WHOLE) {
      return { kind: "passages", version: snapshot.version, snapshot: { ...snapshot, files } };
    }
    const documents = files.map(
      (file): KnowledgeDocument =>
        Object.freeze(
          file.content.format === "pdf"
            ? { title: file.path, mediaType: "application/pdf", base64: file.bytes.toString("base64") }
            : { title: file.path, mediaType: "text/plain", text: file.content.text },
        ),
    );
    return { kind: "documents", version: snapshot.version, documents: Object.freeze(documents) };
  }

  async function look(entry: Watched): Promise<void> {
    const snapshot = await entry.directory.scan();
    if (snapshot === entry.snapshot) return;
    entry.snapshot = snapshot;
    entry.served = serve(snapshot);
    logger.info(
      {
        event: "knowledge.loaded",
        dir: entry.directory.dir,
        phoneNumberIds: entry.phoneNumberIds,
        version: snapshot.version,
        files: snapshot.files.length,
        tokens: snapshot.files.reduce((sum, file) => sum + file.tokens, 0),
        mode: entry.served.kind,
      },
      "knowledge loaded",
    );
  }

  let lastTouch = 0;
  async function poll(): Promise<void> {
    for (const entry of watched.values()) {
      try {
        await look(entry);
      } catch (error) {
        logger.error(
          { event: "knowledge.scan_failed", dir: entry.directory.dir, err: error },
          "knowledge directory could not be read; the last reading still serves",
        );
      }
      const served = entry.served;
      if (served.kind !== "passages") continue;
      // Stored ahead of the first reply that needs them; on failure, tried again at every poll and by that reply.
      for (const phoneNumberId of entry.phoneNumberIds) {
        ensureIndexed(phoneNumberId, served).then(
          () => indexFailureLogged.delete(phoneNumberId),
          (error: unknown) => {
            if (indexFailureLogged.get(phoneNumberId) === served.version) return;
            indexFailureLogged.set(phoneNumberId, served.version);
            logger.warn(
              { event: "knowledge.index_failed", phoneNumberId, version: served.version, err: error },
              "knowledge passages not stored yet; tried again every poll",
            );
          },
        );
      }
    }
    if (Date.now() - lastTouch >= touchEveryMs) {
      try {
        // Versions still being stored count too: one committed just before this sweep is not unused.
        const own = [...byNumber].flatMap(([phoneNumberId, entry]) =>
          entry.served.kind === "passages" ? [{ phoneNumberId, version: entry.served.version }] : [],
        );
        await touchVersions(deps.db, own);
        const deleted = await deleteUnusedVersions(deps.db, keepUnusedVersionsMs, own);
        if (deleted > 0) logger.info({ event: "knowledge.versions_deleted", versions: deleted }, "knowledge versions no process serves deleted");
        lastTouch = Date.now();
      } catch (error) {
        logger.warn({ event: "knowledge.touch_failed", err: error }, "could not mark the knowledge in use; tried again next poll");
      }
    }
  }

  async function passagesFor(phoneNumberId: string, served: Extract<Served, { kind: "passages" }>, query: string): Promise<KnowledgeForClaude> {
    const target = { phoneNumberId, version: served.version };
    for (let attempt = 0; ; attempt++) {
      await ensureIndexed(phoneNumberId, served);
      const found = await searchPassages(deps.db, target, query, passageLimit);
      if (found.length > 0) return { kind: "passages", version: served.version, match: "search", passages: found };
      const openings = await openingPassages(deps.db, target, passageLimit);
      // No passage at all: this process was away long enough (a long pause, Postgres out of reach)
      // for another to delete its version. Store it again, once.
      if (openings.length > 0 || attempt > 0 || (await isIndexed(deps.db, target))) {
        return { kind: "passages", version: served.version, match: "openings", passages: openings };
      }
      indexedVersion.delete(phoneNumberId);
    }
  }

  await poll();
  let closed = false;
  let polling: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    timer = setTimeout(() => {
      polling = poll().finally(() => {
        polling = undefined;
        if (!closed) schedule();
      });
    }, pollMs);
    // The poll alone never keeps a process alive.
    timer.unref();
  };
  schedule();

  return {
    async forReply(phoneNumberId, query) {
      const served = byNumber.get(phoneNumberId)?.served;
      if (!served || served.kind === "empty") return undefined;
      if (served.kind === "documents") return { kind: "documents", version: served.version, documents: [...served.documents] };
      return passagesFor(phoneNumberId, served, query);
    },
    async close() {
      closed = true;
      clearTimeout(timer);
      await polling;
      await Promise.allSettled([...indexing.values()].map((running) => running.done));
    },
  };
}
