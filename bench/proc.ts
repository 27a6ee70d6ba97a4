import { readFileSync } from "node:fs";

/** Linux's clock ticks per second, the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on every usual kernel). */
const CLOCK_TICKS = 100;

/** What the benchmarks read of a process in /proc/<pid>/stat; throws if it has exited. */
export interface ProcessStat {
  /** The executable's name, as the kernel shows it (truncated to 15 characters). */
  command: string;
  parentPid: number;
  /** CPU time so far, user + system, all its threads, in ms. */
  cpuMs: number;
}

export function processStat(pid: number | string): ProcessStat {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command sits in parentheses and may itself hold spaces or parentheses: fields follow the last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return {
    command: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")),
    parentPid: Number(fields[1]),
    cpuMs: ((Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS) * 1000,
  };
}
