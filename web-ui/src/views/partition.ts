// Partition page: state and actions, vCPU -> pCPU map, counters with rate charts,
// and the live console.

import { api, ApiError, EXIT_CLASSES, type PartitionDetail } from '../api';
import { RateChart, RateHistory } from '../charts';
import { ConsolePane } from '../console';
import { fill, h, setText } from '../dom';
import { bytes, count, duration } from '../format';
import { poll } from '../poll';
import { actionBar, stateBadge, updateStateBadge } from '../widgets';
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
  const badge = stateBadge();
  const mgmtTag = h('span', { class: 'tag', hidden: true }, 'management');
  const bar = actionBar(() => poller.kick());
  const [upStat, up] = stat('Uptime', 'uptime');
  const [bootStat, boots] = stat('Boot count', 'boot_count');
  const [faultStat, faults] = stat('Faults', 'faults');
  const [ramStat, ram] = stat('RAM', 'ram_bytes');
  const [mapStat, map] = stat('vCPU → pCPU', 'cpu_map');
  const error = h('div', { class: 'notice notice-error', hidden: true, role: 'alert' });

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
      badge,
      mgmtTag,
      h('div', { class: 'spacer' }),
      bar.el,
    ),
    error,
    h('section', { class: 'card' }, h('div', { class: 'stats' }, upStat, bootStat, faultStat, ramStat, mapStat)),
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
              { class: 'table table-dense', 'data-testid': 'vcpus' },
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
    updateStateBadge(badge, p.state);
    mgmtTag.hidden = !p.management;
    bar.update(p);
    setText(up, p.state === 'stopped' ? '–' : duration(p.uptime_ms));
    setText(boots, String(p.boot_count));
    setText(faults, count(p.faults));
    faults.classList.toggle('value-bad', p.faults > 0);
    setText(ram, bytes(p.ram_bytes));
    setText(map, p.vcpus.map((v) => `${v.vcpu}→${v.cpu}`).join('  ') || '–');

    fill(
      vcpuBody,
      ...p.vcpus.map((v) =>
        h(
          'tr',
          { 'data-vcpu': v.vcpu },
          h('td', { class: 'mono' }, String(v.vcpu)),
          h('td', { class: 'mono' }, `CPU ${v.cpu}`),
          h('td', {}, h('span', { class: `dot dot-${v.state}` }), VCPU_STATE[v.state] ?? v.state),
          ...EXIT_CLASSES.map((c) => h('td', { class: 'num' }, count(v.exits[c]))),
          h('td', { class: 'num' }, count(v.injected)),
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
