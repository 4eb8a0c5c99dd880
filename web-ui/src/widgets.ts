// Pieces shared by the views: state badges, partition colours, action buttons.

import { api, ApiError, AuthCancelled, type Action, type PartitionState, type PartitionSummary } from './api';
import { confirmAction } from './auth';
import { h, setText, toast } from './dom';

const STATE_LABEL: Record<PartitionState, string> = {
  running: 'Running',
  stopped: 'Stopped',
  stopping: 'Stopping',
};

export function stateBadge(): HTMLSpanElement {
  return h('span', { class: 'badge', 'data-field': 'state' });
}

export function updateStateBadge(el: HTMLElement, state: PartitionState): void {
  setText(el, STATE_LABEL[state] ?? state);
  el.dataset.state = state;
  el.className = `badge badge-${state}`;
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
      return p.state === 'stopped';
    case 'stop':
      return p.state === 'running';
    case 'restart':
      return p.state === 'running';
  }
}

const CONFIRM: Record<Action, { verb: string; text: (n: string) => string; danger: boolean } | null> = {
  start: null,
  stop: { verb: 'Stop', text: (n) => `Partition ${n} will be stopped. Its guest stops running until it is started again.`, danger: true },
  restart: { verb: 'Restart', text: (n) => `Partition ${n} will be stopped and booted again. Its boot count goes up by one.`, danger: false },
};

export interface ActionBar {
  el: HTMLElement;
  update(p: PartitionSummary): void;
}

/** Start / Stop / Restart buttons for one partition; `after` runs once the manager accepted. */
export function actionBar(after: () => void, compact = false): ActionBar {
  let current: PartitionSummary | null = null;
  let busy = false;
  const buttons = new Map<Action, HTMLButtonElement>();
  const el = h('div', { class: compact ? 'actions actions-compact' : 'actions' });

  const run = async (action: Action) => {
    const p = current;
    if (p === null || busy) return;
    const c = CONFIRM[action];
    if (c !== null && !(await confirmAction(`${c.verb} ${p.name}?`, c.text(p.name), c.verb, c.danger))) return;
    busy = true;
    refresh();
    try {
      await api.action(p.name, action);
      toast(`${c?.verb ?? 'Start'} of ${p.name} accepted.`);
      after();
    } catch (e) {
      if (e instanceof AuthCancelled) toast('Action not sent: no token.', 'error');
      else if (e instanceof ApiError) toast(`${p.name}: ${e.message}`, 'error');
      else toast(`${p.name}: ${String(e)}`, 'error');
    } finally {
      busy = false;
      refresh();
    }
  };

  const ICON: Record<Action, string> = { start: '▶', stop: '■', restart: '↻' };
  for (const a of ['start', 'stop', 'restart'] as const) {
    const b = h(
      'button',
      { type: 'button', class: `btn btn-${a}`, 'data-action': a, onclick: () => void run(a) },
      h('span', { class: 'btn-icon', 'aria-hidden': 'true' }, ICON[a]),
      compact ? null : ` ${a[0].toUpperCase()}${a.slice(1)}`,
    );
    if (compact) b.setAttribute('aria-label', a);
    buttons.set(a, b);
    el.append(b);
  }

  function refresh(): void {
    for (const [a, b] of buttons) {
      const ok = current !== null && !busy && allowed(current, a);
      b.disabled = !ok;
      b.title = current?.management
        ? 'The management partition cannot be controlled from itself.'
        : `${a[0].toUpperCase()}${a.slice(1)} ${current?.name ?? ''}`;
    }
  }

  return {
    el,
    update(p) {
      current = p;
      refresh();
    },
  };
}
