// Partition page: state and actions, vCPU -> pCPU map, counters with rate charts,
// and the live console.

import { api, ApiError, AuthCancelled, EXIT_CLASSES, type PartitionDetail } from '../api';
import { confirmAction } from '../auth';
import { caps } from '../caps';
import { RateChart, RateHistory } from '../charts';
import { ConsolePane } from '../console';
import { fill, h, setText, toast } from '../dom';
import { bytes, clock, count, duration } from '../format';
import { poll } from '../poll';
import { actionBar, stateView } from '../widgets';
import { stat } from './overview';
import type { View } from './view';

// Histories outlive the page, so leaving and coming back keeps the chart's past.
const histories = new Map<string, RateHistory>();

function historyFor(partition: string, vcpu: number): RateHistory {
  const key = `${partition}/${vcpu}`;
  let hist = histories.get(key);
  if (hist === undefined) {
    hist = new RateHistory();
    histories.set(key, hist);
  }
  return hist;
}

const VCPU_STATE: Record<string, string> = { on: 'On', off: 'Off', on_pending: 'Powering on' };

export function partitionView(name: string): View {
  const state = stateView();
  const mgmtTag = h('span', { class: 'tag', hidden: true }, 'management');
  const bar = actionBar(() => poller.kick());
  const [upStat, up] = stat('Uptime', 'uptime');
  const [bootStat, boots] = stat('Boot count', 'boot_count');
  const [faultStat, faults] = stat('Faults', 'faults');
  const [ramStat, ram] = stat('RAM', 'ram_bytes');
  const [mapStat, map] = stat('vCPU → pCPU', 'cpu_map');
  const [restartsStat, restarts] = stat('Policy restarts', 'restarts');
  const [gicStat, gic] = stat('Interrupt controller', 'gic_interface');
  const error = h('div', { class: 'notice notice-error', hidden: true, role: 'alert' });
  const crashNotice = h('div', { class: 'notice notice-error', hidden: true, role: 'status', 'data-testid': 'crash-notice' });
  const editBtn = h('a', { class: 'btn', href: `#/partitions/${encodeURIComponent(name)}/edit`, hidden: true, 'data-testid': 'edit-partition' }, 'Edit');
  const deleteBtn = h('button', { type: 'button', class: 'btn btn-delete', hidden: true, 'data-testid': 'delete-partition' }, 'Delete');
  let current: PartitionDetail | null = null;
  let editable = false;
  let deleting = false;
  void caps().then((c) => {
    editable = c.images;
    if (current) renderEditing(current);
  });
  function renderEditing(p: PartitionDetail): void {
    editBtn.hidden = deleteBtn.hidden = !editable || p.management || p.config === undefined;
    const idle = p.state === 'stopped' || p.state === 'crashed';
    deleteBtn.disabled = !idle || deleting;
    editBtn.classList.toggle('btn-disabled', !idle);
    const why = idle ? '' : ' (stop it first)';
    editBtn.title = `Change ${p.name}'s configuration${why}`;
    deleteBtn.title = `Delete ${p.name}${why}`;
  }
  editBtn.addEventListener('click', (e) => {
    if (editBtn.classList.contains('btn-disabled')) {
      e.preventDefault();
      toast(`${name} can be changed only while stopped or crashed.`, 'error');
    }
  });
  deleteBtn.addEventListener('click', async () => {
    if (!(await confirmAction(`Delete ${name}?`, `Partition ${name} and its configuration are removed; its CPUs and RAM (scrubbed first) become free.`, 'Delete', true))) return;
    // The hypervisor zeroes the partition's RAM before it answers, which
    // takes seconds for a few hundred MiB (more under emulation): say so
    // while the request is out.
    deleting = true;
    deleteBtn.disabled = true;
    setText(deleteBtn, 'Deleting…');
    toast(`Deleting ${name}: its RAM is scrubbed first, this can take a while.`);
    try {
      const tagged = await api.partitionTagged(name);
      await api.deletePartition(name, tagged.etag);
      toast(`${name} deleted.`);
      window.location.hash = '#/';
    } catch (e) {
      toast(e instanceof AuthCancelled ? 'Not deleted: no token.' : `${name}: ${e instanceof Error ? e.message : String(e)}`, 'error');
    } finally {
      deleting = false;
      setText(deleteBtn, 'Delete');
      if (current) renderEditing(current);
    }
  });

  const vcpuBody = h('tbody');
  const charts = h('div', { class: 'charts' });
  const chartMap = new Map<number, RateChart>();

  const consolePane = new ConsolePane(name);

  const el = h(
    'div',
    { class: 'page', 'data-page': 'partition', 'data-name': name },
    h('nav', { class: 'crumbs' }, h('a', { href: '#/' }, 'Overview'), ' / ', h('span', {}, name)),
    h(
      'div',
      { class: 'page-head' },
      h('h1', {}, name),
      state.el,
      mgmtTag,
      h('div', { class: 'spacer' }),
      bar.el,
      editBtn,
      deleteBtn,
    ),
    error,
    crashNotice,
    h('section', { class: 'card' }, h('div', { class: 'stats' }, upStat, bootStat, faultStat, restartsStat, ramStat, mapStat, gicStat)),
    h(
      'div',
      { class: 'split' },
      h(
        'div',
        { class: 'col' },
        h(
          'section',
          { class: 'card' },
          h('header', { class: 'card-head' }, h('h2', {}, 'Virtual CPUs'), h('span', { class: 'muted' }, 'totals since boot')),
          h(
            'div',
            { class: 'table-wrap' },
            h(
              'table',
              { class: 'table table-dense table-cards', 'data-testid': 'vcpus' },
              h(
                'thead',
                {},
                h(
                  'tr',
                  {},
                  h('th', {}, 'vCPU'),
                  h('th', {}, 'pCPU'),
                  h('th', {}, 'State'),
                  ...EXIT_CLASSES.map((c) => h('th', { class: 'num' }, c)),
                  h('th', { class: 'num' }, 'injected'),
                ),
              ),
              vcpuBody,
            ),
          ),
        ),
        h(
          'section',
          { class: 'card' },
          h('header', { class: 'card-head' }, h('h2', {}, 'Rates'), h('span', { class: 'muted' }, 'exits and injected interrupts per second · last 3 min')),
          charts,
        ),
      ),
      h('div', { class: 'col' }, consolePane.el),
    ),
  );

  function render(p: PartitionDetail, tSec: number): void {
    current = p;
    state.update(p);
    renderEditing(p);
    mgmtTag.hidden = !p.management;
    bar.update(p);
    const crash = p.state === 'crashed' ? p.last_crash : null;
    crashNotice.hidden = !crash;
    setText(crashNotice, crash ? `Crashed at ${clock(crash.time)}: ${crash.reason}.${p.config?.restart && p.config.restart !== 'never' ? ` Restart policy: ${p.config.restart} (${p.restarts ?? 0} of ${p.config.restart_limit} restarts made).` : ''}` : '');
    setText(restarts, p.restarts === undefined ? '–' : String(p.restarts));
    setText(up, p.uptime_ms > 0 ? duration(p.uptime_ms) : '–');
    setText(boots, String(p.boot_count));
    setText(faults, count(p.faults));
    faults.classList.toggle('value-bad', p.faults > 0);
    setText(ram, bytes(p.ram_bytes));
    setText(map, p.vcpus.map((v) => `${v.vcpu}→${v.cpu}`).join('  ') || '–');
    setText(gic, `${p.gic_interface ?? '–'}${p.config?.gic ? ` (asked: ${p.config.gic})` : ''}`);

    fill(
      vcpuBody,
      ...p.vcpus.map((v) =>
        h(
          'tr',
          { 'data-vcpu': v.vcpu },
          h('td', { class: 'mono', 'data-label': 'vCPU' }, String(v.vcpu)),
          h('td', { class: 'mono', 'data-label': 'pCPU' }, `CPU ${v.cpu}`),
          h('td', { 'data-label': 'State' }, h('span', { class: `dot dot-${v.state}` }), VCPU_STATE[v.state] ?? v.state),
          ...EXIT_CLASSES.map((c) => h('td', { class: 'num', 'data-label': c }, count(v.exits[c]))),
          h('td', { class: 'num', 'data-label': 'injected' }, count(v.injected)),
        ),
      ),
    );

    for (const v of p.vcpus) {
      const hist = historyFor(p.name, v.vcpu);
      if (p.state === 'running') hist.push(tSec, v);
      else hist.breakLine();
      let chart = chartMap.get(v.vcpu);
      if (chart === undefined) {
        chart = new RateChart(`vCPU ${v.vcpu} on CPU ${v.cpu}`, hist);
        chartMap.set(v.vcpu, chart);
        charts.append(chart.el);
      }
      chart.refresh();
    }
  }

  const poller = poll(async (signal) => {
    try {
      const p = await api.partition(name, signal);
      error.hidden = true;
      render(p, Date.now() / 1000);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        setText(error, `There is no partition named “${name}”.`);
        error.hidden = false;
        return;
      }
      throw e;
    }
  });

  return {
    el,
    dispose() {
      poller.stop();
      consolePane.dispose();
      chartMap.forEach((c) => c.destroy());
    },
  };
}
