/** Small numeric and formatting helpers shared by the benchmarks. */

/** Nearest-rank percentile (p in 0..100) of unsorted samples; NaN when there are none. */
export function percentile(samples: ArrayLike<number>, p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = Float64Array.from(samples).sort();
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

export const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Fixed-precision number for a table cell; "-" when there is nothing to show. */
export function fmt(value: number | undefined, digits = 0): string {
  if (value === undefined || Number.isNaN(value)) return "-";
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** A plain-text table: first column left-aligned, the rest right-aligned (they are numbers). */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/**
 * A seeded draw from a log-normal distribution given by its median and 95th percentile (how
 * generation times spread: most near the median, a long tail), so two runs see the same
 * sequence. mulberry32 for the uniform draws, Box–Muller for the normal one.
 */
export function logNormalDraw({ medianMs, p95Ms, seed }: { medianMs: number; p95Ms: number; seed: number }): () => number {
  const sigma = Math.log(p95Ms / medianMs) / 1.6448536269514722; // the standard normal's 95th percentile
  let state = seed >>> 0;
  const uniform = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return () => {
    const normal = Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
    return Math.round(medianMs * Math.exp(sigma * normal));
  };
}
