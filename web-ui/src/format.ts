// Human-readable sizes, durations and counts for the operator's eyes.

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n: number): string {
  let v = n;
  let i = 0;
  while (v >= 1024 && i < UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  const digits = i === 0 || Number.isInteger(v) ? 0 : v < 10 ? 2 : 1;
  return `${v.toFixed(digits)} ${UNITS[i]}`;
}

/** Uptime as "3d 4h", "2h 05m", "4m 09s" or "12s": two units are enough to see progress. */
export function duration(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const mm = Math.floor((s % 3600) / 60);
  const ss = s % 60;
  const p = (x: number) => String(x).padStart(2, '0');
  if (d > 0) return `${d}d ${hh}h`;
  if (hh > 0) return `${hh}h ${p(mm)}m`;
  if (mm > 0) return `${mm}m ${p(ss)}s`;
  return `${ss}s`;
}

const grouped = new Intl.NumberFormat('en-US');

export function count(n: number): string {
  return grouped.format(n);
}

/** "1, 2-4, 7": CPU lists stay short when partitions own ranges. */
export function cpuList(cpus: readonly number[]): string {
  const sorted = [...cpus].sort((a, b) => a - b);
  const parts: string[] = [];
  let i = 0;
  while (i < sorted.length) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j += 1;
    parts.push(j > i + 1 ? `${sorted[i]}-${sorted[j]}` : j === i + 1 ? `${sorted[i]}, ${sorted[j]}` : `${sorted[i]}`);
    i = j + 1;
  }
  return parts.join(', ') || '-';
}

/** "12s ago", "4m ago", "2h ago", "3d ago": how long since a state change. */
export function since(t: Date, now = Date.now()): string {
  const ms = Math.max(0, now - t.getTime());
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

/** An RFC 3339 time as the operator's local time, or "–" when there is none. */
export function clock(iso: string | null | undefined): string {
  if (!iso) return '–';
  const t = new Date(iso);
  return Number.isNaN(t.getTime()) ? iso : t.toLocaleString([], { hour12: false });
}

/** "0x4000_0000"-style addresses stay readable as plain hex. */
export function hex(n: number): string {
  return `0x${n.toString(16)}`;
}
