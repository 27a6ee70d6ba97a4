import type { ServerResponse } from "node:http";
import type { FastifyBaseLogger, FastifyInstance } from "fastify";
import { z } from "zod";
import type { Clock } from "../../clock.ts";
import type { Db } from "../../db/client.ts";
import { liveSessionIds } from "../../staff/accounts.ts";
import { answer, problem, staffRoute, type ZodParts } from "../schema.ts";

/**
 * `GET /admin/events`: the live queue (issue 21.3). Open staff pages hold a server-sent-events
 * stream and are told "something changed" whenever a dead letter appears or changes (its state,
 * its actions, its conversation's messages, its reply's parts and their status), and whenever
 * any conversation gains a message or a rating (the Conversations view, issue 33).
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
 *
 * A stream belongs to the session that opened it (issue 32.11): a session holds a few at most,
 * and its streams end when it does. Signing out here ends them at once; a session signed out
 * through another web process, disabled (`npm run staff -- disable`) or expired is found by
 * reading the open streams' sessions from Postgres every SESSION_CHECK_MS, one query for all.
 * A stream so ended is told why (`event: end`), so the page does not reconnect at once.
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
/**
 * Streams per session (and for the ADMIN_TOKEN bearer, which has one bucket: it has no
 * session). One per tab is normal, and a person has a few tabs open; past that it is a page
 * reconnecting in a loop, or a copied cookie, holding sockets of this process's MAX_STREAMS.
 * A browser speaking HTTP/1.1 also keeps six connections per host for all its tabs: more
 * streams would starve the page's own API calls. The oldest ends first: the newest is the tab
 * the person is looking at. Counted per web process.
 */
const STREAMS_PER_SESSION = 3;
/**
 * How long a stream may outlive a session ended elsewhere (another web process's sign-out, a
 * disabled person, expiry). One query per web process each time, whatever the streams.
 */
const SESSION_CHECK_MS = 15_000;

/** The live queue's clocks and bounds; tests shorten them (buildApp's `liveQueue`). */
export interface LiveQueueSettings {
  pollMs?: number;
  heartbeatMs?: number;
  maxStreams?: number;
  streamsPerSession?: number;
  sessionCheckMs?: number;
}

export interface LiveQueueDeps extends LiveQueueSettings {
  db: Db;
  clock: Clock;
}

/** Why the server ended a stream, told to the page before it ends (`event: end`). */
type EndReason = "replaced" | "session_ended";

/** Closed items change little after this; their state and history are kept live until then. */
const CLOSED_ITEMS_DAYS = 7;
/** A sent reply's parts still gain delivery ticks (delivered, read) for about this long. */
const TICKS_DAYS = 2;

/**
 * What the staff page shows, in one digest: the open items and those closed within
 * CLOSED_ITEMS_DAYS (each one's state and last change) and their history; for open items, their
 * conversations' latest message, their replies not yet sent or sent within TICKS_DAYS, those
 * replies' parts (send state, attempt, delivery status), and the conversations' pause. For the
 * Conversations view, the latest activity of any conversation and the latest CSAT rating: a new
 * message or rating anywhere moves the cursor (a delivery tick on a conversation without an item
 * shows on its next read). Every read goes through an index ((state, created_at) for the items,
 * then by item, conversation or reply; the maxima read an index's end) and none reads a
 * conversation's whole history: this runs every second in each web process.
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
      SELECT coalesce(max(c.updated_at)::text, '') AS v FROM conversations c WHERE c.id IN (SELECT id FROM open_conversations)),
    activity_v AS (
      SELECT coalesce((SELECT max(last_message_at) FROM conversations)::text, '') || '/' ||
             coalesce((SELECT max(rated_at) FROM csat_asks)::text, '') AS v)
    SELECT left(md5(concat_ws('|', letters_v.v, actions_v.v, inbound_v.v, replies_v.v, parts_v.v, paused_v.v, activity_v.v)), 16) AS cursor
    FROM letters_v, actions_v, inbound_v, replies_v, parts_v, paused_v, activity_v`;
  if (!row) throw new Error("change cursor: no row");
  return row.cursor;
}

interface Stream {
  raw: ServerResponse;
  /** The cursor this page last heard (its Last-Event-ID); told of a change when the current one differs. */
  heard: string | undefined;
  /** The session that opened it; null: the ADMIN_TOKEN bearer. */
  session: string | null;
}

/**
 * One per web process: polls the cursor only while some page listens, and tells each page that
 * is behind; keeps each session to its few streams, and ends them with it.
 */
export class ChangeFeed {
  /** In the order they opened: a Set iterates in insertion order, so a session's first is its oldest. */
  readonly streams = new Set<Stream>();
  private pollTimer: NodeJS.Timeout | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private sessionTimer: NodeJS.Timeout | undefined;
  private polling = false;
  private failing = false;
  private checking = false;
  private checkFailing = false;
  readonly settings: Required<LiveQueueDeps>;

  constructor(
    deps: LiveQueueDeps,
    private readonly log: FastifyBaseLogger,
  ) {
    this.settings = {
      db: deps.db,
      clock: deps.clock,
      pollMs: deps.pollMs ?? POLL_MS,
      heartbeatMs: deps.heartbeatMs ?? HEARTBEAT_MS,
      maxStreams: deps.maxStreams ?? MAX_STREAMS,
      streamsPerSession: deps.streamsPerSession ?? STREAMS_PER_SESSION,
      sessionCheckMs: deps.sessionCheckMs ?? SESSION_CHECK_MS,
    };
  }

  /** Whether a new stream of this session would pass MAX_STREAMS (one that replaces its session's oldest does not). */
  isFull(session: string | null): boolean {
    return this.streams.size >= this.settings.maxStreams && this.streamsOf(session).length < this.settings.streamsPerSession;
  }

  add(stream: Stream): void {
    const own = this.streamsOf(stream.session);
    for (const oldest of own.slice(0, Math.max(0, own.length + 1 - this.settings.streamsPerSession))) this.end(oldest, "replaced");
    this.streams.add(stream);
    if (this.streams.size === 1) {
      this.pollTimer = setInterval(() => void this.poll(), this.settings.pollMs);
      this.heartbeatTimer = setInterval(() => this.heartbeat(), this.settings.heartbeatMs);
      this.sessionTimer = setInterval(() => void this.checkSessions(), this.settings.sessionCheckMs);
    }
  }

  remove(stream: Stream): void {
    this.streams.delete(stream);
    if (this.streams.size === 0) this.stopTimers();
  }

  /** The session signed out in this process: its streams end now. */
  endSession(session: string): void {
    for (const stream of this.streamsOf(session)) this.end(stream, "session_ended");
  }

  /** Ends every stream, so that closing the app is not held by open pages (they reconnect elsewhere). */
  closeAll(): void {
    for (const stream of this.streams) stream.raw.end();
    this.streams.clear();
    this.stopTimers();
  }

  private streamsOf(session: string | null): Stream[] {
    return [...this.streams].filter((stream) => stream.session === session);
  }

  /** Says why, without an `id` (the page's Last-Event-ID stays the last cursor it heard), and ends the stream. */
  private end(stream: Stream, reason: EndReason): void {
    this.remove(stream);
    stream.raw.end(`event: end\ndata: ${JSON.stringify({ reason })}\n\n`);
  }

  private stopTimers(): void {
    clearInterval(this.pollTimer);
    clearInterval(this.heartbeatTimer);
    clearInterval(this.sessionTimer);
  }

  /**
   * Reads the open streams' sessions from Postgres, not from this process's memory: the session
   * may have been signed out through another web process. A database that cannot answer ends
   * nothing: the next check that works does.
   */
  private async checkSessions(): Promise<void> {
    const sessions = [...new Set([...this.streams].flatMap((stream) => (stream.session === null ? [] : [stream.session])))];
    if (this.checking || sessions.length === 0) return;
    this.checking = true;
    try {
      const live = await liveSessionIds(this.settings.db, sessions, this.settings.clock.now());
      if (this.checkFailing) this.log.info({ event: "admin.events_sessions_recovered" }, "the live queue reads its sessions again");
      this.checkFailing = false;
      for (const session of sessions) if (!live.has(session)) this.endSession(session);
    } catch (error) {
      if (!this.checkFailing) this.log.warn({ event: "admin.events_sessions_failing", err: error }, "the live queue cannot read its streams' sessions");
      this.checkFailing = true;
    } finally {
      this.checking = false;
    }
  }

  private async poll(): Promise<void> {
    if (this.polling) return; // a slow database: never two reads at once
    this.polling = true;
    try {
      const cursor = await readCursor(this.settings.db);
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

/** `feed` is made before the routes (admin.ts), so that signing out (auth.ts) can end its session's streams. */
export function registerLiveQueue(scope: FastifyInstance, feed: ChangeFeed): void {
  const settings = feed.settings;
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
          `A session holds at most ${STREAMS_PER_SESSION} streams per web process (so does the bearer): opening another ends its oldest, with \`event: end\` and \`data: { "reason": "replaced" }\`.`,
          `Its streams end, with \`{ "reason": "session_ended" }\`, when it signs out, and within ${SESSION_CHECK_MS / 1000} s when it expires, is signed out elsewhere or its person is disabled.`,
          "After an `end`, open the stream again only later (the page waits a minute); meanwhile, poll.",
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
      if (feed.isFull(request.sessionId)) {
        request.log.warn({ event: "admin.events_full", streams: feed.streams.size }, "too many live-queue streams on this process");
        return reply.code(503).header("retry-after", "60").send({ error: "too many live connections; poll instead" });
      }
      const lastEventId = request.headers["last-event-id"];
      const stream: Stream = {
        raw: reply.raw,
        heard: typeof lastEventId === "string" && lastEventId !== "" ? lastEventId : undefined,
        session: request.sessionId,
      };
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
