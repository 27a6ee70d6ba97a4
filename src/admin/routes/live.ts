import type { ServerResponse } from "node:http";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { z } from "zod";
import type { Db } from "../../db/client.ts";
import { answer, problem, staffRoute, type ZodParts } from "../schema.ts";

/**
 * `GET /admin/events`: the live queue (issue 21.3). Open staff pages hold a server-sent-events
 * stream and are told "something changed" whenever a dead letter appears or changes (its state,
 * its actions, its conversation's messages, its reply's parts and their status).
 *
 * Why each web process reads a change cursor from Postgres, rather than LISTEN/NOTIFY or a Redis
 * channel: the changes are made by worker processes and by other web processes behind the load
 * balancer (DESIGN.md §5), and Postgres already holds the record of every one of them, so one
 * cheap query a second per web process (not per page) sees them all with no coordination of
 * our own. LISTEN would need a session of its own, which a transaction-mode PgBouncer (a
 * supported set-up) does not give, and triggers on the hot tables; a Redis channel would need
 * every writer to remember to publish. The poll costs at most a second of delay.
 *
 * The cursor is a digest of what the page shows, so equal cursors mean nothing to refresh; it is
 * each event's id, so a page that reconnects (EventSource sends `Last-Event-ID`) is told at once
 * if anything changed while it was away.
 */

const EVENTS_PATH = "/admin/events";
const POLL_MS = 1000;
/** Comment lines keep idle proxies (and the listener's 60-second silent-socket clock) from cutting the stream. */
const HEARTBEAT_MS = 15_000;
/** EventSource's wait before reconnecting after the stream drops. */
const RETRY_MS = 3000;
/**
 * Streams per web process. Each is one idle socket and costs no query of its own, so the bound
 * is there for file descriptors, not Postgres; past it the page falls back to a slow poll.
 */
const MAX_STREAMS = 500;

export interface LiveQueueDeps {
  db: Db;
  /** Tests shorten the clocks. */
  pollMs?: number;
  heartbeatMs?: number;
  maxStreams?: number;
}

/** Closed items change little after this; their state and history are kept live until then. */
const CLOSED_ITEMS_DAYS = 7;
/** A sent reply's parts still gain delivery ticks (delivered, read) for about this long. */
const TICKS_DAYS = 2;

/**
 * What the staff page shows, in one digest: the open items and those closed within
 * CLOSED_ITEMS_DAYS (each one's state and last change) and their history; for open items, their
 * conversations' latest message, their replies not yet sent or sent within TICKS_DAYS, those
 * replies' parts (send state, attempt, delivery status), and the conversations' pause. Every read
 * goes through an index ((state, created_at) for the items, then by item, conversation or reply)
 * and none reads a conversation's whole history: this runs every second in each web process.
 */
async function readCursor(db: Db): Promise<string> {
  const [row] = await db.$queryRaw<{ cursor: string }[]>`
    WITH shown AS (
      SELECT id, conversation_id, state, updated_at FROM dead_letters
      WHERE state = 'open'
         OR (state <> 'open' AND created_at > now() - make_interval(days => ${CLOSED_ITEMS_DAYS}::int))),
    open_conversations AS (SELECT DISTINCT conversation_id AS id FROM shown WHERE state = 'open'),
    letters_v AS (SELECT coalesce(md5(string_agg(id::text || state::text || updated_at::text, ',' ORDER BY id)), '') AS v FROM shown),
    actions_v AS (
      SELECT count(*)::text || '/' || coalesce(max(a.created_at)::text, '') AS v
      FROM dead_letter_actions a WHERE a.dead_letter_id IN (SELECT id FROM shown)),
    inbound_v AS (
      SELECT coalesce(string_agg(last.at::text, ',' ORDER BY oc.id), '') AS v
      FROM open_conversations oc
      CROSS JOIN LATERAL (
        SELECT m.created_at AS at FROM inbound_messages m WHERE m.conversation_id = oc.id ORDER BY m.created_at DESC LIMIT 1) last),
    live_replies AS (
      SELECT r.id, r.state, r.updated_at FROM replies r
      WHERE r.conversation_id IN (SELECT id FROM open_conversations) AND r.state IN ('generating', 'ready', 'dead')
      UNION ALL
      SELECT r.id, r.state, r.updated_at FROM replies r
      WHERE r.conversation_id IN (SELECT id FROM open_conversations) AND r.state = 'sent'
        AND r.sent_at > now() - make_interval(days => ${TICKS_DAYS}::int)),
    replies_v AS (SELECT coalesce(md5(string_agg(id::text || state::text || updated_at::text, ',' ORDER BY id)), '') AS v FROM live_replies),
    parts_v AS (
      SELECT coalesce(md5(string_agg(o.id::text || o.send_state::text || o.send_attempt || '.' || o.status_rank, ',' ORDER BY o.id)), '') AS v
      FROM outbound_messages o JOIN live_replies r ON r.id = o.reply_id),
    paused_v AS (
      SELECT coalesce(max(c.updated_at)::text, '') AS v FROM conversations c WHERE c.id IN (SELECT id FROM open_conversations))
    SELECT left(md5(concat_ws('|', letters_v.v, actions_v.v, inbound_v.v, replies_v.v, parts_v.v, paused_v.v)), 16) AS cursor
    FROM letters_v, actions_v, inbound_v, replies_v, parts_v, paused_v`;
  if (!row) throw new Error("change cursor: no row");
  return row.cursor;
}

interface Stream {
  raw: ServerResponse;
  /** The cursor this page last heard (its Last-Event-ID); told of a change when the current one differs. */
  heard: string | undefined;
}

/** One per web process: polls the cursor only while some page listens, and tells each page that is behind. */
class ChangeFeed {
  readonly streams = new Set<Stream>();
  private pollTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private polling = false;
  private failing = false;

  constructor(
    private readonly deps: Required<LiveQueueDeps>,
    private readonly log: FastifyBaseLogger,
  ) {}

  add(stream: Stream): void {
    this.streams.add(stream);
    if (this.streams.size === 1) {
      this.pollTimer = setInterval(() => void this.poll(), this.deps.pollMs);
      this.heartbeatTimer = setInterval(() => this.heartbeat(), this.deps.heartbeatMs);
    }
  }

  remove(stream: Stream): void {
    this.streams.delete(stream);
    if (this.streams.size === 0) this.stopTimers();
  }

  /** Ends every stream, so that closing the app is not held by open pages (they reconnect elsewhere). */
  closeAll(): void {
    for (const stream of this.streams) stream.raw.end();
    this.streams.clear();
    this.stopTimers();
  }

  private stopTimers(): void {
    clearInterval(this.pollTimer);
    clearInterval(this.heartbeatTimer);
  }

  private async poll(): Promise<void> {
    if (this.polling) return; // a slow database: never two reads at once
    this.polling = true;
    try {
      const cursor = await readCursor(this.deps.db);
      if (this.failing) this.log.info({ event: "admin.events_recovered" }, "the live queue reads changes again");
      this.failing = false;
      for (const stream of this.streams) if (stream.heard !== cursor) send(stream, "change", cursor);
    } catch (error) {
      // Pages keep their stream and what they show; the next read that works tells them.
      if (!this.failing) this.log.warn({ event: "admin.events_failing", err: error }, "the live queue cannot read changes");
      this.failing = true;
    } finally {
      this.polling = false;
    }
  }

  private heartbeat(): void {
    for (const stream of this.streams) stream.raw.write(": keep-alive\n\n");
  }
}

function send(stream: Stream, event: "change" | "ready", cursor: string): void {
  stream.heard = cursor;
  stream.raw.write(`event: ${event}\nid: ${cursor}\ndata: ${JSON.stringify({ cursor })}\n\n`);
}

export function registerLiveQueue(scope: FastifyInstance, deps: LiveQueueDeps): void {
  const settings = { pollMs: POLL_MS, heartbeatMs: HEARTBEAT_MS, maxStreams: MAX_STREAMS, ...deps };
  const feed = new ChangeFeed(settings, scope.log);
  // preClose, not onClose: the server waits for open connections before onClose runs.
  scope.addHook("preClose", async () => feed.closeAll());

  scope.withTypeProvider<ZodParts>().get(
    EVENTS_PATH,
    {
      schema: staffRoute("GET", {
        operationId: "streamQueueChanges",
        summary: "The live queue: a server-sent event whenever a dead letter appears or changes",
        description: [
          "`text/event-stream`. `event: ready` on connecting, then `event: change` whenever an item, its history, its conversation or its reply's parts change;",
          "each event's `id` (and `data.cursor`) is a change cursor. Reconnecting with `Last-Event-ID` sends `change` at once if anything changed meanwhile.",
          `A comment line every ${HEARTBEAT_MS / 1000} s keeps proxies from closing the connection. The event says only that something changed: read the list or the item again.`,
        ].join(" "),
        tags: ["dead letters"],
        produces: "text/event-stream",
        response: {
          200: answer(z.string(), "the event stream (`text/event-stream`); events carry `{ cursor }`"),
          503: problem(`this web process already serves ${MAX_STREAMS} streams (with \`Retry-After\`): poll instead`),
        },
      }),
    },
    async (request, reply) => {
      if (feed.streams.size >= settings.maxStreams) {
        request.log.warn({ event: "admin.events_full", streams: feed.streams.size }, "too many live-queue streams on this process");
        return reply.code(503).header("retry-after", "60").send({ error: "too many live connections; poll instead" });
      }
      const lastEventId = request.headers["last-event-id"];
      const stream: Stream = { raw: reply.raw, heard: typeof lastEventId === "string" && lastEventId !== "" ? lastEventId : undefined };
      // Read before answering: a database that is down is a 5xx the page can fall back on, not a silent stream.
      const cursor = await readCursor(settings.db);
      if (request.raw.socket.destroyed) return reply.hijack(); // the page left while the cursor was read: nothing to hold
      reply.hijack();
      reply.raw.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        // nginx and similar would otherwise hold events back in their buffer.
        "x-accel-buffering": "no",
      });
      reply.raw.write(`retry: ${RETRY_MS}\n\n`);
      send(stream, stream.heard !== undefined && stream.heard !== cursor ? "change" : "ready", cursor);
      reply.raw.on("close", () => feed.remove(stream));
      feed.add(stream);
    },
  );
}
