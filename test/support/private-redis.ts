import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports.ts";

/**
 * A redis-server of the test's own on a free port, so a test can kill it for real (SIGKILL)
 * and start it again on the same address, without touching the machine's shared Redis.
 * With `aof`, it keeps every write on disk (appendfsync always), as production Redis does
 * (DESIGN.md §5): a kill loses nothing that was acknowledged.
 */
export class PrivateRedis {
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly aof: boolean,
    private readonly replicaOf: number | undefined,
  ) {}

  /** `replicaOf`: the port of a master on loopback, which this server copies (its replica). */
  static async start(options: { aof?: boolean; replicaOf?: number } = {}): Promise<PrivateRedis> {
    const server = new PrivateRedis(await freePort(), await mkdtemp(join(tmpdir(), "private-redis-")), options.aof ?? false, options.replicaOf);
    await server.resume();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  async resume(): Promise<void> {
    if (this.running) return;
    const persistence = this.aof ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"];
    const replication = this.replicaOf === undefined ? [] : ["--replicaof", "127.0.0.1", String(this.replicaOf)];
    const child = spawn(
      "redis-server",
      ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", ...persistence, "--dir", this.dir, "--maxmemory-policy", "noeviction", ...replication],
      { stdio: "ignore" },
    );
    this.child = child;
    const deadline = Date.now() + 10_000;
    while (!(await pings(this.port))) {
      if (child.exitCode !== null) throw new Error(`redis-server on port ${this.port} exited at start-up`);
      if (Date.now() > deadline) throw new Error(`redis-server on port ${this.port} did not start`);
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  /** SIGSTOP: connections stay open and nothing is answered, as when a host stalls. */
  freeze(): void {
    this.child?.kill("SIGSTOP");
  }

  /** SIGCONT: it answers what waited. */
  thaw(): void {
    this.child?.kill("SIGCONT");
  }

  /** SIGKILL: no shutdown, no final save. */
  async kill(): Promise<void> {
    if (this.running) await killAndWait(this.child!);
  }

  async destroy(): Promise<void> {
    await this.kill();
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** SIGKILL, resolved once the process is gone. */
export async function killAndWait(child: ChildProcess): Promise<void> {
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGKILL");
  await exited;
}

/** True when something on the port answers PING with PONG. */
function pings(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    let answer = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once("error", () => done(false));
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk) => {
      answer += chunk.toString("utf8");
      if (answer.includes("\r\n")) done(answer.startsWith("+PONG"));
    });
  });
}
