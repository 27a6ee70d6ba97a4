import { type EventLoopUtilization, performance } from "node:perf_hooks";
import type { Redis } from "ioredis";

/**
 * What the server side spent during a measured window: the bench process's main thread
 * (where the app and its Redis client run), its total CPU, the commands our Redis client
 * sent, and Redis's own CPU (from INFO), so the app's Redis work can be set against the rest.
 */

/**
 * Counts the commands a client sends. Redis's own counters are server-wide and other
 * processes may share the server; counting at our client keeps the figure ours. Commands
 * queued through a MULTI/pipeline are written without sendCommand and are not counted.
 */
export class CommandCounter {
  count = 0;

  constructor(redis: Redis) {
    const send = redis.sendCommand.bind(redis);
    redis.sendCommand = ((...args: Parameters<Redis["sendCommand"]>) => {
      this.count++;
      return send(...args);
    }) as Redis["sendCommand"];
  }
}

interface Snapshot {
  elu: EventLoopUtilization;
  cpu: NodeJS.CpuUsage;
  commands: number;
  redisCpuSec: number;
}

export interface WindowCost {
  /** Main-thread event-loop utilisation, 0..1: near 1 means the process under test was the limit. */
  busy: number;
  /** CPU of the whole bench process (main thread, libuv, GC), ms. */
  nodeCpuMs: number;
  /** Commands our client sent. */
  redisCommands: number;
  /** Redis's CPU, server-wide: it includes any other client of the same Redis. */
  redisCpuMs: number;
}

export class ServerProbe {
  private start: Snapshot | undefined;
  private cost: WindowCost | undefined;

  /**
   * `infoRedis`: a connection of its own, so INFO never queues behind the app's commands;
   * `commandsSent`: the running total of our clients' commands (see CommandCounter).
   */
  constructor(
    private readonly infoRedis: Redis,
    private readonly commandsSent: () => number,
  ) {}

  readonly open = async (): Promise<void> => {
    this.cost = undefined;
    this.start = await this.snapshot();
  };

  readonly close = async (): Promise<void> => {
    const end = await this.snapshot();
    const start = this.start;
    if (!start) throw new Error("probe closed before it was opened");
    this.cost = {
      busy: performance.eventLoopUtilization(end.elu, start.elu).utilization,
      nodeCpuMs: (end.cpu.user - start.cpu.user + end.cpu.system - start.cpu.system) / 1000,
      redisCommands: end.commands - start.commands,
      redisCpuMs: (end.redisCpuSec - start.redisCpuSec) * 1000,
    };
  };

  result(): WindowCost {
    if (!this.cost) throw new Error("probe window never closed");
    return this.cost;
  }

  private async snapshot(): Promise<Snapshot> {
    // Node's figures first and synchronously, then Redis's (one round trip later).
    const elu = performance.eventLoopUtilization();
    const cpu = process.cpuUsage();
    const commands = this.commandsSent();
    const info = parseInfo(await this.infoRedis.info("cpu"));
    return {
      elu,
      cpu,
      commands,
      redisCpuSec: Number(info.get("used_cpu_user") ?? Number.NaN) + Number(info.get("used_cpu_sys") ?? Number.NaN),
    };
  }
}

function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0 && !line.startsWith("#")) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}
