import { table } from "./stats.ts";

/**
 * The targets of issue 10, each beside its figure from this run and its baseline (the figure
 * measured on main before the work on them: bench/BASELINE-issue-10.md). Each
 * benchmark section adds the lines for the targets it measures; run.ts prints them together.
 */

export interface TargetLine {
  /** "1. SQL per answered message (inbound + reply jobs)" */
  target: string;
  /** "≤ 8" */
  goal: string;
  /** This run's figure, formatted. */
  figure: string;
  met: boolean;
  /** The figure on main before the work, formatted; "-" when none was measured. */
  baseline: string;
}

export class Targets {
  readonly lines: TargetLine[] = [];

  add(line: TargetLine): void {
    this.lines.push(line);
  }

  /** One line as a section prints it beside its own table: "target ≥ 150/s: 41/s — not met". */
  static inline(line: TargetLine): string {
    return `  ${line.target}: target ${line.goal}: ${line.figure} — ${line.met ? "met" : "not met"} (baseline ${line.baseline})`;
  }

  format(): string {
    return table(
      ["target", "goal", "this run", "baseline", "met"],
      [...this.lines]
        .sort((x, y) => x.target.localeCompare(y.target, "en", { numeric: true }))
        .map((l) => [l.target, l.goal, l.figure, l.baseline, l.met ? "yes" : "NO"]),
    );
  }
}
