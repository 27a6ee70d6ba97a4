import { readFileSync } from "node:fs";
import { connect, createServer } from "node:net";

/**
 * Ports are chosen below the kernel's ephemeral range. A port the kernel assigns for
 * `listen(0)` comes from that range, and so does the local port of every outgoing connection:
 * between our probe closing and a child process binding the port, a Prisma pool, a Redis
 * replica or a Sentinel connecting somewhere could take it (web-2 once exited EADDRINUSE at
 * start-up that way). Below the range only another listener can, and a random start in a
 * range of thousands makes two tests picking the same port unlikely.
 */
const EPHEMERAL_FROM = ephemeralRangeStart();
const CHOOSE_FROM = 10_000;

function ephemeralRangeStart(): number {
  try {
    const [from] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/);
    const port = Number(from);
    return Number.isInteger(port) && port > CHOOSE_FROM + 1000 ? port : 32_768;
  } catch {
    return 32_768; // not Linux: the IANA range's neighbour, as good a guess as any
  }
}

function bindable(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

const chosen = new Set<number>();

/** A TCP port nothing listens on right now, for a server a test starts itself. */
export async function freePort(): Promise<number> {
  const span = EPHEMERAL_FROM - CHOOSE_FROM;
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = CHOOSE_FROM + Math.floor(Math.random() * span);
    // Never the same port twice in one test process: a server started earlier may not listen yet.
    if (chosen.has(port) || !(await bindable(port))) continue;
    chosen.add(port);
    return port;
  }
  throw new Error(`no free port found between ${CHOOSE_FROM} and ${EPHEMERAL_FROM}`);
}

/** `count` distinct free ports. */
export async function freePorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await freePort());
  return ports;
}

/** Whether something on this host listens on the port (the probe's connection is closed at once). */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: "127.0.0.1" });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}
