import http from "node:http";

/**
 * `GET /admin/events` read over a real socket as a browser's EventSource reads it: events parsed,
 * comment lines (the heartbeat) skipped, and whether the server ended the stream.
 */

/** A bound for a loaded machine, not a timing assertion: the stream polls once a second. */
const WITHIN_MS = 8000;

export interface ServerEvent {
  event: string;
  id: string;
  data: string;
}

export interface EventStream {
  status: number;
  contentType: string | undefined;
  /** The next event, or the first one already received and not yet taken. */
  next(timeoutMs?: number): Promise<ServerEvent>;
  /** Whether the server ended the stream. */
  ended(): boolean;
  close(): void;
}

/** Opens the stream and parses it as EventSource does (comments skipped). */
export function openStream(base: string, headers: Record<string, string>): Promise<EventStream> {
  return new Promise((resolve, reject) => {
    const request = http.get(`${base}/admin/events`, { headers: { accept: "text/event-stream", ...headers } }, (response) => {
      const queued: ServerEvent[] = [];
      let waiting: ((event: ServerEvent) => void) | undefined;
      let buffer = "";
      let done = false;
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        buffer += chunk;
        let end = buffer.indexOf("\n\n");
        while (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          end = buffer.indexOf("\n\n");
          const fields = Object.fromEntries(
            block
              .split("\n")
              .filter((line) => line && !line.startsWith(":"))
              .map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1).trimStart()]),
          );
          if (!fields.event) continue; // the retry: line
          const event = { event: fields.event, id: fields.id ?? "", data: fields.data ?? "" };
          if (waiting) {
            waiting(event);
            waiting = undefined;
          } else queued.push(event);
        }
      });
      response.on("end", () => {
        done = true;
      });
      response.on("close", () => {
        done = true;
      });
      resolve({
        status: response.statusCode ?? 0,
        contentType: response.headers["content-type"],
        next(timeoutMs = WITHIN_MS) {
          const first = queued.shift();
          if (first) return Promise.resolve(first);
          return new Promise((resolveEvent, rejectEvent) => {
            const timer = setTimeout(() => rejectEvent(new Error(`no event within ${timeoutMs} ms`)), timeoutMs);
            waiting = (event) => {
              clearTimeout(timer);
              resolveEvent(event);
            };
          });
        },
        ended: () => done,
        close: () => request.destroy(),
      });
    });
    request.on("error", reject);
  });
}
