// Pieces shared by the views: state badges (with the time of the last change
// and a crash's reason), partition colours, action buttons.

import { api, ApiError, AuthCancelled, type Action, type PartitionState, type PartitionSummary } from './api';
import { confirmAction } from './auth';
import { h, setText, toast } from './dom';
import { since } from './format';

const STATE_LABEL: Record<PartitionState, string> = {
  stopped: 'Stopped',
  starting: 'Starting',
  running: 'Running',
  shutting_down: 'Shutting down',
  stopping: 'Stopping',
  crashed: 'Crashed',
};

export function stateLabel(state: PartitionState): string {
  return STATE_LABEL[state] ?? state;
}

/** A state badge, the time of the last change under it and, when crashed, why. */
export interface StateView {
  el: HTMLElement;
  update(p: PartitionSummary): void;
}

export function stateView(): StateView {
  const badge = h('span', { class: 'badge', 'data-field': 'state' });
  const when = h('span', { class: 'state-since muted', 'data-field': 'state_since' });
  const crash = h('span', { class: 'crash-reason', 'data-field': 'last_crash', hidden: true });
  const el = h('span', { class: 'state' }, badge, when, crash);
  return {
    el,
    update(p) {
      setText(badge, stateLabel(p.state));
      badge.dataset.state = p.state;
      badge.className = `badge badge-${p.state}`;
      const t = p.state_since ? new Date(p.state_since) : null;
      const ok = t !== null && !Number.isNaN(t.getTime());
      setText(when, ok ? `since ${t.toLocaleTimeString([], { hour12: false })} · ${since(t)}` : '');
      when.title = ok ? t.toLocaleString() : '';
      when.hidden = !ok;
      const c = p.state === 'crashed' ? p.last_crash : null;
      crash.hidden = !c;
      setText(crash, c ? `✖ ${c.reason}` : '');
      crash.title = c?.time ? `Crashed at ${new Date(c.time).toLocaleString()}` : '';
    },
  };
}

// Fixed palette: colours follow a partition's position in the list, so a host
// with few partitions gets clearly different hues in the CPU map.
const PALETTE = ['#2f6fde', '#1a9a7a', '#c2410c', '#8b5cf6', '#b45309', '#db2777', '#0e7490', '#4d7c0f'];
const MGMT_COLOUR = '#475569';

export function partitionColour(name: string | null, all: readonly PartitionSummary[]): string {
  if (name === null) return 'transparent';
  const p = all.find((x) => x.name === name);
  if (p?.management || name === 'mgmt') return MGMT_COLOUR;
  const guests = all.filter((x) => !x.management);
  const i = guests.findIndex((x) => x.name === name);
  return PALETTE[(i < 0 ? 0 : i) % PALETTE.length];
}

/** Which actions make sense in a state; the manager still has the last word (409). */
function allowed(p: PartitionSummary, action: Action): boolean {
  if (p.management) return false;
  switch (action) {
    case 'start':
      return p.state === 'stopped' || p.state === 'crashed';
    case 'shutdown':
      return p.state === 'running';
    case 'stop':
      return p.state === 'running' || p.state === 'starting' || p.state === 'shutting_down';
    case 'restart':
      return p.state === 'running' || p.state === 'crashed';
  }
}

/** Set once the manager answered 404 to a shutdown: it predates graceful shutdown. */
let shutdownMissing = false;
/** Live action bars, to hide their Shutdown buttons when it turns out missing. */
const bars = new Map<HTMLElement, () => void>();

function refreshBars(): void {
  for (const [el, refresh] of bars) {
    if (el.isConnected) refresh();
    else bars.delete(el);
  }
}

const CONFIRM: Record<Action, { verb: string; text: (n: string, p: PartitionSummary) => string; danger: boolean } | null> = {
  start: null,
  shutdown: {
    verb: 'Shut down',
    text: (n, p) =>
      `Partition ${n} gets a power-button press and shuts itself down; if it has not within ${p.config?.shutdown_timeout_s ?? 'its timeout in'} s, it is stopped hard.`,
    danger: false,
  },
  stop: { verb: 'Stop', text: (n) => `Partition ${n} will be stopped at once, without telling its guest (like pulling the plug).`, danger: true },
  restart: { verb: 'Restart', text: (n) => `Partition ${n} will be stopped and booted again. Its boot count goes up by one.`, danger: false },
};

const LABEL: Record<Action, string> = { start: 'Start', shutdown: 'Shutdown', stop: 'Stop', restart: 'Restart' };
const ICON: Record<Action, string> = { start: '▶', shutdown: '▼', stop: '■', restart: '↻' };

export interface ActionBar {
  el: HTMLElement;
  update(p: PartitionSummary): void;
}

/** Start / Shutdown / Stop / Restart buttons for one partition; `after` runs once the manager accepted. */
export function actionBar(after: () => void, compact = false): ActionBar {
  let current: PartitionSummary | null = null;
  let busy = false;
  const buttons = new Map<Action, HTMLButtonElement>();
  const el = h('div', { class: compact ? 'actions actions-compact' : 'actions' });

  const run = async (action: Action) => {
    const p = current;
    if (p === null || busy) return;
    const c = CONFIRM[action];
    if (c !== null && !(await confirmAction(`${c.verb} ${p.name}?`, c.text(p.name, p), c.verb, c.danger))) return;
    busy = true;
    refresh();
    try {
      await api.action(p.name, action);
      toast(`${c?.verb ?? 'Start'} of ${p.name} accepted.`);
      after();
    } catch (e) {
      if (action === 'shutdown' && e instanceof ApiError && (e.status === 404 || e.status === 405)) {
        shutdownMissing = true;
        refreshBars();
        toast('This manager does not offer a graceful shutdown yet: use Stop.', 'error');
      } else if (e instanceof AuthCancelled) toast('Action not sent: no token.', 'error');
      else if (e instanceof ApiError) toast(`${p.name}: ${e.message}`, 'error');
      else toast(`${p.name}: ${String(e)}`, 'error');
    } finally {
      busy = false;
      refresh();
    }
  };

  for (const a of ['start', 'shutdown', 'stop', 'restart'] as const) {
    const b = h(
      'button',
      { type: 'button', class: `btn btn-${a}`, 'data-action': a, onclick: () => void run(a) },
      h('span', { class: 'btn-icon', 'aria-hidden': 'true' }, ICON[a]),
      compact ? null : ` ${LABEL[a]}`,
    );
    if (compact) b.setAttribute('aria-label', LABEL[a]);
    buttons.set(a, b);
    el.append(b);
  }

  function refresh(): void {
    for (const [a, b] of buttons) {
      const ok = current !== null && !busy && allowed(current, a);
      b.disabled = !ok;
      b.hidden = a === 'shutdown' && shutdownMissing;
      b.title = current?.management
        ? 'The management partition cannot be controlled from itself.'
        : a === 'shutdown'
          ? `Shut ${current?.name ?? ''} down gracefully (power button, then a hard stop after its timeout)`
          : a === 'stop'
            ? `Stop ${current?.name ?? ''} at once (hard)`
            : `${LABEL[a]} ${current?.name ?? ''}`;
    }
  }
  for (const [other] of bars) if (!other.isConnected) bars.delete(other);
  bars.set(el, refresh);
  // Disabled until the partition is known: a click before the first poll
  // answered would otherwise do nothing at all.
  refresh();

  return {
    el,
    update(p) {
      current = p;
      refresh();
    },
  };
}
