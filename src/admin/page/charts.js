// Charts per UTC day for the Insights view, drawn by uPlot (served from node_modules by
// src/admin/page.ts). A chart is a picture for sighted readers: every figure it draws is also
// in the view's tables, and the plot says so to a screen reader instead of being read out.

import uPlot from "./uPlot.esm.js";

/** Colours with a contrast of at least 3:1 on white (WCAG's for graphics), told apart by the legend's words too. */
export const COLOURS = { blue: "#0b57d0", green: "#0b6b3a", red: "#b42318", amber: "#a15c00", grey: "#52606d" };

const charts = new Map();
const DAY_S = 86_400;

/** Days as uPlot's x values: seconds at each UTC midnight. */
const xOf = (days) => days.map((day) => Date.parse(`${day}T00:00:00Z`) / 1000);

/** A tick's amount: cents as cents, and a fraction of a cent to two significant digits rather than "0". */
const small = (value) => value.toLocaleString("en-GB", value !== 0 && Math.abs(value) < 0.01 ? { maximumSignificantDigits: 2 } : { maximumFractionDigits: 2 });

const formatters = {
  count: (value) => (Number.isInteger(value) ? String(value) : ""),
  percent: (value) => `${Math.round(value)}%`,
  seconds: (value) => `${value.toLocaleString("en-GB", { maximumFractionDigits: 1 })} s`,
  usd: (value) => `$${small(value)}`,
  plain: (value) => small(value),
};

const BAR_SLOTS = { left: -1, centre: 0, right: 1 };

/**
 * Draws (or draws again) the chart of `figure` (a <figure> with a .plot inside): one series per
 * entry of `series` ({ label, values, colour, bars: "left" | "centre" | "right" | undefined,
 * scale: "left" | "right" }) over `days`, the left and right axes formatted as `units` names.
 */
export function drawChart(figure, days, series, units, summary) {
  const plot = figure.querySelector(".plot");
  charts.get(figure)?.destroy();
  plot.setAttribute("role", "img");
  plot.setAttribute("aria-label", `${figure.querySelector("figcaption").textContent}: ${summary}`);
  const scales = { x: { time: true, range: (_u, min, max) => [min - DAY_S / 2, max + DAY_S / 2] } };
  const axes = [{ space: 60, values: (_u, ticks) => ticks.map((t) => new Date(t * 1000).toISOString().slice(5, 10)) }];
  for (const [side, unit] of Object.entries(units)) {
    scales[side] = unit === "percent" ? { range: [0, 100] } : { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] };
    axes.push({
      scale: side,
      side: side === "left" ? 3 : 1,
      grid: { show: side === "left" },
      size: unit === "usd" || unit === "plain" ? 76 : 60,
      values: (_u, ticks) => ticks.map(formatters[unit]),
    });
  }
  const bars = series.filter((s) => s.bars).length;
  const options = {
    width: Math.max(280, plot.clientWidth),
    height: 220,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
    scales,
    axes,
    cursor: { show: false },
    legend: { show: true, live: false },
    series: [
      {},
      ...series.map((s) => ({
        label: s.label,
        scale: s.scale ?? "left",
        stroke: s.colour,
        width: s.bars ? 1 : 2,
        fill: s.bars ? `${s.colour}cc` : undefined,
        points: { show: !s.bars, size: 6 },
        spanGaps: false,
        paths: s.bars ? uPlot.paths.bars({ size: [bars > 1 ? 0.35 : 0.6, 48], align: BAR_SLOTS[s.bars] }) : undefined,
      })),
    ],
  };
  const chart = new uPlot(options, [xOf(days), ...series.map((s) => s.values)], plot);
  charts.set(figure, chart);
  fitOnResize(figure, plot);
}

const watched = new WeakSet();

/** A chart follows its box's width (a phone turned, a window resized). */
function fitOnResize(figure, plot) {
  if (watched.has(plot)) return;
  watched.add(plot);
  new ResizeObserver(() => {
    const chart = charts.get(figure);
    const width = Math.max(280, plot.clientWidth);
    if (chart && Math.abs(chart.width - width) > 4) chart.setSize({ width, height: chart.height });
  }).observe(plot);
}
