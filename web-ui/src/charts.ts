// Per-vCPU rate charts (uPlot): exits by class and injected interrupts per second,
// derived from the monotonically growing counters the manager reports.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { EXIT_CLASSES, type Vcpu } from './api';
import { h } from './dom';

/** Series in chart order: the six exit classes, then injected interrupts. */
export const SERIES = [...EXIT_CLASSES, 'injected'] as const;

const COLOURS: Record<(typeof SERIES)[number], string> = {
  mmio: '#2f6fde',
  sysreg: '#8b5cf6',
  hvc: '#0e7490',
  irq: '#c2410c',
  abort: '#dc2626',
  other: '#64748b',
  injected: '#1a9a7a',
};

/** Seconds of history a chart keeps; samples older than this are dropped. */
export const WINDOW_S = 180;
/** The narrowest time span drawn, so a young chart's few points are not stretched flat. */
const MIN_SPAN_S = 30;

function counters(v: Vcpu): number[] {
  return [...EXIT_CLASSES.map((c) => v.exits[c]), v.injected];
}

/**
 * Rate history of one vCPU. Counters restart from zero when the partition
 * reboots; such a step down is shown as a gap rather than a negative rate.
 */
export class RateHistory {
  readonly t: number[] = [];
  readonly rates: (number | null)[][] = SERIES.map(() => []);
  private prev: { t: number; c: number[] } | null = null;

  /** Add a reading taken at `tSec` (seconds); returns false when it was not newer. */
  push(tSec: number, v: Vcpu): boolean {
    const c = counters(v);
    const prev = this.prev;
    if (prev !== null && tSec <= prev.t) return false;
    this.prev = { t: tSec, c };
    if (prev === null) return false;
    const dt = tSec - prev.t;
    this.t.push(tSec);
    c.forEach((x, i) => this.rates[i].push(x >= prev.c[i] ? (x - prev.c[i]) / dt : null));
    while (this.t.length > 0 && this.t[0] < tSec - WINDOW_S) {
      this.t.shift();
      this.rates.forEach((r) => r.shift());
    }
    return true;
  }

  /** Forget the last reading, e.g. while the partition is stopped. */
  breakLine(): void {
    this.prev = null;
  }

  data(): uPlot.AlignedData {
    return [this.t, ...this.rates] as uPlot.AlignedData;
  }
}

/** The newest plotted value of a series, shown in the legend while the cursor is away. */
function latest(values: readonly (number | null | undefined)[]): number | null {
  for (let i = values.length - 1; i >= 0; i -= 1) {
    const v = values[i];
    if (v !== null && v !== undefined) return v;
  }
  return null;
}

function rateLabel(v: number | null): string {
  if (v === null || Number.isNaN(v)) return '–';
  if (v >= 10000) return `${(v / 1000).toFixed(1)}k/s`;
  return `${v >= 100 ? v.toFixed(0) : v.toFixed(1)}/s`;
}

/** A small uPlot chart bound to one RateHistory; resizes with its container. */
export class RateChart {
  readonly el: HTMLElement;
  private plot: uPlot | null = null;
  private readonly ro: ResizeObserver;
  private readonly body: HTMLElement;

  constructor(
    title: string,
    private readonly history: RateHistory,
  ) {
    this.body = h('div', { class: 'chart-body' });
    this.el = h('div', { class: 'chart' }, h('div', { class: 'chart-title' }, title), this.body);
    this.ro = new ResizeObserver(() => this.resize());
    this.ro.observe(this.body);
  }

  private make(width: number): uPlot {
    const axisStyle = {
      stroke: '#64748b',
      font: '11px system-ui, sans-serif',
      grid: { stroke: '#eef1f5', width: 1 },
      ticks: { stroke: '#e2e8f0', width: 1 },
    };
    const opts: uPlot.Options = {
      width,
      height: 150,
      cursor: { drag: { x: false, y: false } },
      scales: {
        // The window ends at the newest sample and grows with the history up to
        // WINDOW_S, but never below MIN_SPAN_S (sub-second ticks read badly).
        // Taken from the history itself: uPlot pads a one-sample range by days.
        x: {
          time: true,
          range: () => {
            const t = this.history.t;
            const max = t.length > 0 ? t[t.length - 1] : Date.now() / 1000;
            const min = t.length > 0 ? t[0] : max;
            return [max - Math.min(WINDOW_S, Math.max(MIN_SPAN_S, max - min)), max];
          },
        },
        y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
      },
      series: [
        {},
        ...SERIES.map((name) => ({
          label: name,
          stroke: COLOURS[name],
          width: 1.5,
          spanGaps: false,
          value: (u: uPlot, v: number | null, sidx: number, idx: number | null) =>
            rateLabel(idx === null ? latest(u.data[sidx] as (number | null)[]) : v),
        })),
      ],
      axes: [
        {
          ...axisStyle,
          space: 70,
          size: 28,
          // One line of wall-clock time; uPlot's default adds a date row that crowds a small chart.
          values: (_u, splits) =>
            splits.map((v) => new Date(v * 1000).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false })),
        },
        { ...axisStyle, size: 48, values: (_u, vals) => vals.map((v) => (v >= 1000 ? `${v / 1000}k` : String(v))) },
      ],
      legend: { live: true },
    };
    return new uPlot(opts, this.history.data(), this.body);
  }

  private resize(): void {
    const width = Math.floor(this.body.clientWidth);
    if (width <= 0) return;
    if (this.plot === null) this.plot = this.make(width);
    else if (this.plot.width !== width) this.plot.setSize({ width, height: 150 });
  }

  refresh(): void {
    if (this.plot === null) this.resize();
    else this.plot.setData(this.history.data());
  }

  destroy(): void {
    this.ro.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}
