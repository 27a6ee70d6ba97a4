import { readdir, readFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { fmt, table } from "./stats.ts";

/**
 * Issue 22's target 5: the frames a worker spends its CPU in, read from the `.cpuprofile` that
 * `node --cpu-prof` writes at exit (V8's format: a call tree of nodes, and which node was on
 * top at each sample). Only the samples inside the measured rounds count, so start-up (module
 * loading, tsx's compiling) and idle waits between rounds do not crowd out the reply path.
 */

interface CallFrame {
  functionName: string;
  url: string;
  /** 0-based; -1 for V8's pseudo-frames ("(program)", "(garbage collector)"). */
  lineNumber: number;
}

interface CpuProfile {
  nodes: { id: number; callFrame: CallFrame }[];
  /** µs on the monotonic clock. */
  startTime: number;
  /** The node on top of the stack at each sample. */
  samples: number[];
  /** µs from the previous sample (the first: from startTime). */
  timeDeltas: number[];
}

export interface Frame {
  name: string;
  /** "file.ts:12" (a dependency's with its package), or "" for V8's pseudo-frames. */
  where: string;
  /** Share of the busy samples (not idle) with this frame on top, 0–1. */
  share: number;
}

export interface ProfileSummary {
  /** Busy samples inside the windows: the denominator of each share. */
  samples: number;
  top: Frame[];
}

/**
 * The main thread's profile in `dir`, written by one process as it exits. Node writes one per
 * thread, `CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile`; tsx's module hooks run on a
 * thread of their own (thread 1), the jobs on the main one (thread 0).
 */
export async function readProfile(dir: string): Promise<CpuProfile> {
  const files = (await readdir(dir)).filter((f) => /^CPU\.\d+\.\d+\.\d+\.0\.\d+\.cpuprofile$/.test(f));
  if (files.length !== 1) throw new Error(`expected one main-thread .cpuprofile in ${dir}, found ${files.length}`);
  return JSON.parse(await readFile(join(dir, files[0]!), "utf8")) as CpuProfile;
}

/** The `count` frames with the most self time among the samples taken inside `windows`. */
export function topFrames(profile: CpuProfile, windows: { fromUs: number; toUs: number }[], count = 10): ProfileSummary {
  const frames = new Map(profile.nodes.map((n) => [n.id, n.callFrame]));
  const selfSamples = new Map<string, { frame: CallFrame; samples: number }>();
  let busy = 0;
  let at = profile.startTime;
  for (const [i, node] of profile.samples.entries()) {
    at += profile.timeDeltas[i] ?? 0;
    if (!windows.some((w) => at >= w.fromUs && at <= w.toUs)) continue;
    const frame = frames.get(node);
    // "(idle)" is the event loop waiting: no CPU spent.
    if (!frame || frame.functionName === "(idle)") continue;
    busy++;
    // One line of one file is one frame, however many closures V8 made of it.
    const key = `${frame.functionName}\u0000${frame.url}\u0000${frame.lineNumber}`;
    const entry = selfSamples.get(key) ?? { frame, samples: 0 };
    entry.samples++;
    selfSamples.set(key, entry);
  }
  const top = [...selfSamples.values()]
    .sort((a, b) => b.samples - a.samples)
    .slice(0, count)
    .map(({ frame, samples }) => ({
      name: frame.functionName || "(anonymous)",
      where: locationOf(frame),
      share: samples / busy,
    }));
  return { samples: busy, top };
}

/** "file.ts:12", with its package before it when it is a dependency's ("pg-protocol serializer.js:80"): basenames alone repeat (index.js, client.js). */
function locationOf(frame: CallFrame): string {
  if (!frame.url) return "";
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(frame.url)?.[1];
  return `${dependency ? `${dependency} ` : ""}${basename(frame.url)}:${frame.lineNumber + 1}`;
}

export function formatFrames(summary: ProfileSummary): string {
  return table(
    ["function", "where", "self"],
    summary.top.map((f) => [f.name, f.where, `${fmt(f.share * 100, 1)}%`]),
  );
}
