import { spawn } from "node:child_process";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { DemoRefusal } from "./environment.ts";

/**
 * Postgres and Redis for the demo: when the local ones are not running, scripts/services.sh
 * starts them (installing them from Debian's packages when missing), as `.ci/run` does.
 * A server elsewhere (DEMO_DATABASE_URL, DEMO_REDIS_URL) is never started, only reported.
 */

const SERVICES_SCRIPT = fileURLToPath(new URL("../scripts/services.sh", import.meta.url));
const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1", "[::1]"]);

interface Service {
  name: string;
  host: string;
  port: number;
  /** scripts/services.sh starts exactly this one: loopback, default port. */
  startable: boolean;
}

function serviceOf(name: string, url: string, defaultPort: number): Service {
  const parsed = new URL(url);
  const port = Number(parsed.port || defaultPort);
  return { name, host: parsed.hostname, port, startable: LOOPBACK.has(parsed.hostname) && port === defaultPort };
}

function reachable(service: Service, timeoutMs = 1500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: service.host.replace(/^\[|\]$/g, ""), port: service.port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

export async function ensureServices(urls: { databaseUrl: string; redisUrl: string }, say: (line: string) => void): Promise<void> {
  const services = [serviceOf("Postgres", urls.databaseUrl, 5432), serviceOf("Redis", urls.redisUrl, 6379)];
  const down = async () => (await Promise.all(services.map(async (s) => ((await reachable(s)) ? [] : [s])))).flat();
  const missing = await down();
  if (missing.length === 0) return;
  const foreign = missing.filter((s) => !s.startable);
  if (foreign.length > 0) throw new DemoRefusal(foreign.map((s) => `cannot reach ${s.name} at ${s.host}:${s.port}`).join("; "));

  say(`${missing.map((s) => s.name).join(" and ")} not running: starting ${missing.length === 1 ? "it" : "them"} with scripts/services.sh`);
  const code = await new Promise<number | null>((resolve, reject) => {
    const child = spawn("bash", [SERVICES_SCRIPT], { stdio: "inherit" });
    child.once("error", reject);
    child.once("exit", resolve);
  });
  const still = await down();
  if (code !== 0 || still.length > 0) {
    throw new DemoRefusal(
      `scripts/services.sh could not start ${(still.length ? still : missing).map((s) => s.name).join(" and ")} (exit code ${code}); see its output above`,
    );
  }
}
