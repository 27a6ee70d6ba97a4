import type { FastifyInstance } from "fastify";
import { DEFAULT_METRICS_PORTS } from "../config/config.ts";
import type { Logger } from "../logger.ts";
import type { Settings } from "../settings.ts";

/** A start-up that cannot go on, said in one line naming the variable to change. */
export class StartupError extends Error {
  override readonly name = "StartupError";
}

/**
 * The metrics listener on METRICS_PORT, or, when it is unset, on the first free port of
 * DEFAULT_METRICS_PORTS: each process on a host takes its own, and says which in its
 * `metrics.listening` line (how a scraper's operator finds it). Tried in turn rather than
 * probed first: two processes starting together must not both find the same port free.
 */
export async function listenForScrapes(app: FastifyInstance, metrics: Settings["metrics"], logger: Logger): Promise<void> {
  const { listen, host } = metrics;
  if (listen.kind === "off") return;
  if (listen.kind === "fixed") {
    await app.listen({ port: listen.port, host }).catch((error: unknown) => {
      if (errorCode(error) !== "EADDRINUSE") throw cannotListen(host, listen.port, error);
      const range = `${DEFAULT_METRICS_PORTS.first}–${DEFAULT_METRICS_PORTS.last}`;
      throw new StartupError(
        `METRICS_PORT=${listen.port}: cannot listen on ${host}:${listen.port} (the port is taken); choose another METRICS_PORT, or unset it to take the first free port of ${range}`,
      );
    });
    logger.info({ event: "metrics.listening", host, port: listen.port }, `metrics on ${host}:${listen.port} (METRICS_PORT)`);
    return;
  }
  const first = DEFAULT_METRICS_PORTS.first;
  for (const port of listen.ports) {
    try {
      await app.listen({ port, host });
    } catch (error) {
      if (errorCode(error) === "EADDRINUSE") continue; // another process's, likely another role of ours
      throw cannotListen(host, port, error);
    }
    const moved = port !== first;
    logger.info(
      { event: "metrics.listening", host, port, ...(moved ? { movedFrom: first } : {}) },
      moved ? `metrics on ${host}:${port}: the default ${first} was taken` : `metrics on ${host}:${port}`,
    );
    return;
  }
  throw new StartupError(
    `no free port for metrics on ${host} from ${first} to ${DEFAULT_METRICS_PORTS.last}: set METRICS_PORT to a free one (0 turns the listener off)`,
  );
}

const errorCode = (error: unknown): unknown => (error instanceof Error ? (error as NodeJS.ErrnoException).code : undefined);

/** Not a port taken: an address this host does not have, most likely. */
const cannotListen = (host: string, port: number, error: unknown) =>
  new StartupError(
    `the metrics listener cannot listen on ${host}:${port} (METRICS_HOST, METRICS_PORT): ${error instanceof Error ? error.message : String(error)}`,
  );
