import { Writable } from "node:stream";

/**
 * A logger's destination that keeps what it is given, for tests that read what was logged:
 * `lines`, each line as written (JSON text), and `parsed()`, the same lines as objects.
 */
export function logLines(): { lines: string[]; destination: Writable; parsed: () => Record<string, unknown>[] } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString("utf8").split("\n").filter(Boolean));
      done();
    },
  });
  return { lines, destination, parsed: () => lines.map((line) => JSON.parse(line) as Record<string, unknown>) };
}
