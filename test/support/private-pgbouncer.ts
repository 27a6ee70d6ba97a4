import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { appendFile, chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./ports.ts";
import { killAndWait } from "./private-redis.ts";

/**
 * A PgBouncer of the test's own (Debian's `pgbouncer`), in transaction pooling, in front of
 * the machine's Postgres: every transaction may run on another server connection, and there
 * are fewer of those (`serverConnections`) than the system opens. It connects to Postgres as
 * a role of its own whose search_path is the test's schema, since PgBouncer drops the
 * `options` startup parameter that carries `?schema=` (see the README's Operations).
 */
export class PrivatePgBouncer {
  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly child: ChildProcess,
    private readonly admin: pg.Client,
    private readonly roles: string[],
  ) {}

  static async start(postgresUrl: string, options: { serverConnections: number }): Promise<PrivatePgBouncer> {
    const postgres = new URL(postgresUrl);
    const [port, dir] = [await freePort(), await mkdtemp(join(tmpdir(), "pgbouncer-"))];
    // Its files must be readable (and its log writable) by the user it runs as.
    await chmod(dir, 0o777);
    const config = [
      "[databases]",
      `* = host=${postgres.hostname} port=${postgres.port || 5432}`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      // No passwords on this machine's Postgres either; the names must still be listed.
      "auth_type = trust",
      `auth_file = ${join(dir, "users.txt")}`,
      "admin_users = pgbouncer",
      "pool_mode = transaction",
      `default_pool_size = ${options.serverConnections}`,
      "max_client_conn = 500",
      "ignore_startup_parameters = options",
      `logfile = ${join(dir, "pgbouncer.log")}`,
      "",
    ].join("\n");
    await writeFile(join(dir, "pgbouncer.ini"), config, { mode: 0o644 });
    await writeFile(join(dir, "users.txt"), '"pgbouncer" ""\n', { mode: 0o644 });
    // PgBouncer will not run as root: then it runs as the postgres user.
    const user = process.getuid?.() === 0 ? { uid: idOf("-u"), gid: idOf("-g") } : {};
    // Debian installs it in /usr/sbin, which a non-login PATH may lack.
    const binary = existsSync("/usr/sbin/pgbouncer") ? "/usr/sbin/pgbouncer" : "pgbouncer";
    const child = spawn(binary, [join(dir, "pgbouncer.ini")], { stdio: "ignore", ...user });
    const deadline = Date.now() + 10_000;
    while (!(await listening(port))) {
      if (child.exitCode !== null) throw new Error(`pgbouncer exited at start-up (see ${join(dir, "pgbouncer.log")})`);
      if (Date.now() > deadline) throw new Error("pgbouncer did not start");
      await new Promise((r) => setTimeout(r, 50));
    }
    const admin = new pg.Client({ connectionString: postgresUrl });
    await admin.connect();
    return new PrivatePgBouncer(port, dir, child, admin, []);
  }

  /**
   * `direct` (a URL with `?schema=`) as reached through this PgBouncer: a login role of its
   * own, created here, whose search_path is that schema.
   */
  async via(direct: string): Promise<string> {
    const url = new URL(direct);
    const schema = url.searchParams.get("schema");
    if (!schema) throw new Error("PrivatePgBouncer.via needs a URL with ?schema=");
    const role = `pgb_${schema}`;
    await this.admin.query(`CREATE ROLE ${pg.escapeIdentifier(role)} LOGIN SUPERUSER`);
    await this.admin.query(`ALTER ROLE ${pg.escapeIdentifier(role)} SET search_path = ${pg.escapeIdentifier(schema)}`);
    this.roles.push(role);
    await appendFile(join(this.dir, "users.txt"), `"${role}" ""\n`);
    this.child.kill("SIGHUP"); // reread users.txt
    url.username = role;
    url.password = "";
    url.hostname = "127.0.0.1";
    url.port = String(this.port);
    // PgBouncer 1.18 cannot keep named prepared statements: Prisma's convention turns them off.
    url.searchParams.set("pgbouncer", "true");
    await this.untilItLetsIn(url.toString());
    return url.toString();
  }

  private async untilItLetsIn(url: string): Promise<void> {
    const probe = new URL(url);
    probe.search = "";
    const deadline = Date.now() + 5000;
    for (;;) {
      const client = new pg.Client({ connectionString: probe.toString() });
      try {
        await client.connect();
        await client.query("SELECT 1");
        return;
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        await client.end().catch(() => undefined);
      }
    }
  }

  /** How many transactions PgBouncer has passed on, from its own admin console. */
  async transactions(): Promise<number> {
    const console = new pg.Client({ host: "127.0.0.1", port: this.port, user: "pgbouncer", database: "pgbouncer" });
    await console.connect();
    try {
      const { rows } = await console.query<{ database: string; total_xact_count: string }>("SHOW STATS");
      return rows.filter((r) => r.database !== "pgbouncer").reduce((sum, r) => sum + Number(r.total_xact_count), 0);
    } finally {
      await console.end();
    }
  }

  async destroy(): Promise<void> {
    await killAndWait(this.child).catch(() => undefined);
    for (const role of this.roles) await this.admin.query(`DROP ROLE IF EXISTS ${pg.escapeIdentifier(role)}`).catch(() => undefined);
    await this.admin.end();
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** The postgres user's id (`-u`) or group id (`-g`). */
function idOf(flag: "-u" | "-g"): number {
  return Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim());
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
