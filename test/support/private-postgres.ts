import { execFile, execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { chmod, chown, mkdtemp, rm } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { freePort } from "./ports.ts";

/**
 * A Postgres server of the test's own (initdb + pg_ctl on a free port), so a test can stop it
 * for real (`pg_ctl -m immediate`: a crash, as a failover looks to a client) and start it
 * again, without touching the machine's shared server. As root, the server runs as the
 * `postgres` user, because Postgres refuses to run as root.
 */

const run = promisify(execFile);

function binDir(): string {
  const root = "/usr/lib/postgresql";
  const version = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a))[0] : undefined;
  if (!version) throw new Error("no PostgreSQL server binaries under /usr/lib/postgresql");
  return join(root, version, "bin");
}

const asRoot = userInfo().uid === 0;

/** Runs a server binary, as the postgres user when we are root. */
async function pgCommand(binary: string, args: string[]): Promise<void> {
  const path = join(binDir(), binary);
  const [command, argv] = asRoot ? ["runuser", ["-u", "postgres", "--", path, ...args]] : [path, args];
  await run(command, argv, { timeout: 60_000 });
}

export class PrivatePostgres {
  private constructor(
    readonly port: number,
    private readonly dataDir: string,
    private readonly socketDir: string,
  ) {}

  /** A fresh, running server with trust authentication for user postgres. */
  static async start(): Promise<PrivatePostgres> {
    const root = await mkdtemp(join(tmpdir(), "private-pg-"));
    const dataDir = join(root, "data");
    if (asRoot) {
      await chown(root, uidOf("postgres"), gidOf("postgres"));
      await chmod(root, 0o700);
    }
    await pgCommand("initdb", ["-D", dataDir, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale=C"]);
    const server = new PrivatePostgres(await freePort(), dataDir, root);
    await server.resume();
    return server;
  }

  get url(): string {
    return `postgresql://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** The server's own log (its stderr): what settings such as log_statement write to. */
  get logPath(): string {
    return join(this.socketDir, "log");
  }

  /** Starts (again) on the same port and data: what clients see as the database coming back. */
  async resume(): Promise<void> {
    const options = [
      `-p ${this.port}`,
      "-c listen_addresses=127.0.0.1",
      `-c unix_socket_directories=${this.socketDir}`,
      "-c fsync=off",
      "-c max_connections=200",
    ].join(" ");
    await pgCommand("pg_ctl", ["-D", this.dataDir, "-o", options, "-w", "-t", "60", "-l", join(this.socketDir, "log"), "start"]);
  }

  /** Stops the server abruptly, the way a crash or a failover looks to its clients. */
  async crash(): Promise<void> {
    await pgCommand("pg_ctl", ["-D", this.dataDir, "-m", "immediate", "-w", "stop"]);
  }

  async destroy(): Promise<void> {
    await this.crash().catch(() => undefined);
    await rm(this.socketDir, { recursive: true, force: true });
  }
}

/** The numeric id of a system user or its group (`id -u postgres`). */
function idOf(flag: "-u" | "-g", user: string): number {
  return Number(execFileSync("id", [flag, user], { encoding: "utf8" }).trim());
}
const uidOf = (user: string) => idOf("-u", user);
const gidOf = (user: string) => idOf("-g", user);
