// Overview page: the host (CPU ownership map, GIC, RAM, uptime) and the partition list.

import { api, type Host, type PartitionSummary } from '../api';
import { caps } from '../caps';
import { fill, h, setText } from '../dom';
import { bytes, cpuList, duration } from '../format';
import { poll } from '../poll';
import { actionBar, partitionColour, stateLabel, stateView, type ActionBar, type StateView } from '../widgets';
import type { View } from './view';

/** A labelled figure in a stats strip; returns the value element to update. */
export function stat(label: string, field: string): [HTMLElement, HTMLElement] {
  const value = h('div', { class: 'stat-value', 'data-field': field }, '–');
  return [h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), value), value];
}

/** The GIC's features as the host view reports them (ABI 3.3's GIC_INFO); '–' without. */
export function gicFeatures(host: Host): string {
  const g = host.gic;
  if (!g) return '–';
  const yes = (b: boolean) => (b ? 'yes' : 'no');
  const parts = [
    `ITS ${g.its_count}`,
    `LPIs ${yes(g.lpis)}`,
    `direct vLPI ${yes(g.direct_vlpi)}`,
    `direct vSGI ${yes(g.direct_vsgi)}`,
  ];
  if (g.irs_count !== null) parts.push(`IRS ${g.irs_count}`);
  if (g.gcie_legacy !== null) parts.push(`GCIE_LEGACY ${yes(g.gcie_legacy)}`);
  if (!g.probed) parts.push('(from the host description only)');
  return parts.join(' · ');
}

/** The host's CPUs as tiles coloured by owning partition. */
export function renderCpuMap(el: HTMLElement, host: Host, parts: readonly PartitionSummary[]): void {
  const tiles = host.cpus
    .slice()
    .sort((a, b) => a.cpu - b.cpu)
    .map((c) => {
      const owner = c.partition;
      const colour = partitionColour(owner, parts);
      const state = parts.find((p) => p.name === owner)?.state;
      const tile = h(
        owner !== null ? 'a' : 'div',
        {
          class: owner === null ? 'cpu-tile cpu-free' : 'cpu-tile',
          'data-cpu': c.cpu,
          'data-owner': owner ?? '',
          'data-state': state ?? null,
          href: owner !== null ? `#/partitions/${encodeURIComponent(owner)}` : null,
          title: owner === null ? `CPU ${c.cpu}: not assigned` : `CPU ${c.cpu}: ${owner} (${state ?? 'unknown'})`,
          style: owner === null ? null : `--owner:${colour}`,
        },
        h('span', { class: 'cpu-id' }, `CPU ${c.cpu}`),
        h('span', { class: 'cpu-owner' }, owner ?? 'unassigned'),
        h('span', { class: 'cpu-state' }, owner === null ? 'no partition' : state ? stateLabel(state) : 'unknown'),
      );
      return tile;
    });
  fill(el, ...tiles);
}

export function overviewView(): View {
  const [verStat, ver] = stat('Hypervisor', 'version');
  const [gicStat, gic] = stat('Interrupt controller', 'gic_version');
  // A sentence, not a figure: below the stats strip, where it can wrap.
  const gicFeat = h('p', { class: 'hint muted', 'data-field': 'gic_features' }, '–');
  const [cpuStat, cpus] = stat('CPUs', 'cpu_count');
  const [ramStat, ram] = stat('RAM', 'ram_bytes');
  const [upStat, up] = stat('Uptime', 'uptime');
  const cpuMap = h('div', { class: 'cpu-map', 'data-testid': 'cpu-map' });
  const tbody = h('tbody');
  const rows = new Map<string, { tr: HTMLTableRowElement; cells: HTMLElement[]; state: StateView; bar: ActionBar }>();
  const newBtn = h('a', { class: 'btn btn-primary btn-small', href: '#/new', hidden: true, 'data-testid': 'new-partition' }, '+ New partition');
  void caps().then((c) => (newBtn.hidden = !c.images));

  const hostCard = h(
    'section',
    { class: 'card', 'data-testid': 'host' },
    h('header', { class: 'card-head' }, h('h2', {}, 'Host')),
    h('div', { class: 'stats' }, verStat, gicStat, cpuStat, ramStat, upStat),
    h('h3', { class: 'subhead' }, 'GIC features'),
    gicFeat,
    h('h3', { class: 'subhead' }, 'CPU ownership'),
    cpuMap,
  );

  const partCard = h(
    'section',
    { class: 'card', 'data-testid': 'partitions' },
    h('header', { class: 'card-head' }, h('h2', {}, 'Partitions'), newBtn),
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        { class: 'table table-cards', 'data-testid': 'partition-table' },
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            h('th', {}, 'Name'),
            h('th', {}, 'State'),
            h('th', {}, 'CPUs'),
            h('th', { class: 'num' }, 'RAM'),
            h('th', { class: 'num' }, 'Uptime'),
            h('th', { class: 'num' }, 'Boots'),
            h('th', {}, 'GIC'),
            h('th', { class: 'right' }, 'Actions'),
          ),
        ),
        tbody,
      ),
    ),
  );

  const el = h('div', { class: 'page' }, h('div', { class: 'page-head' }, h('h1', {}, 'Overview')), hostCard, partCard);

  let refreshNow = () => poller.kick();

  function row(p: PartitionSummary) {
    let r = rows.get(p.name);
    if (r === undefined) {
      const state = stateView();
      const bar = actionBar(() => refreshNow(), true);
      const cells = [
        h('td', { class: 'mono', 'data-label': 'CPUs' }),
        h('td', { class: 'num', 'data-label': 'RAM' }),
        h('td', { class: 'num', 'data-label': 'Uptime' }),
        h('td', { class: 'num', 'data-field': 'boot_count', 'data-label': 'Boots' }),
        h('td', { class: 'mono', 'data-field': 'gic_interface', 'data-label': 'GIC' }),
      ];
      const link = h('a', { href: `#/partitions/${encodeURIComponent(p.name)}`, class: 'plink' }, h('span', { class: 'swatch' }), p.name);
      const tr = h(
        'tr',
        { 'data-partition': p.name },
        h('td', { class: 'cell-name' }, link, p.management ? h('span', { class: 'tag' }, 'management') : null),
        h('td', { class: 'cell-state', 'data-label': 'State' }, state.el),
        cells[0],
        cells[1],
        cells[2],
        cells[3],
        cells[4],
        h('td', { class: 'right cell-actions', 'data-label': 'Actions' }, bar.el),
      );
      r = { tr, cells, state, bar };
      rows.set(p.name, r);
    }
    return r;
  }

  let latestParts: PartitionSummary[] = [];

  const poller = poll(async (signal) => {
    const [host, parts] = await Promise.all([api.host(signal), api.partitions(signal)]);
    latestParts = parts;
    setText(ver, `${host.version} · ABI ${host.abi_version}`);
    setText(gic, host.gic ? `GICv${host.gic.version} (${host.gic.revision})` : `GICv${host.gic_version}`);
    setText(gicFeat, gicFeatures(host));
    setText(cpus, String(host.cpu_count));
    setText(ram, bytes(host.ram_bytes));
    setText(up, duration(host.uptime_ms));
    renderCpuMap(cpuMap, host, parts);

    const seen = new Set<string>();
    const ordered: HTMLTableRowElement[] = [];
    for (const p of parts) {
      const r = row(p);
      seen.add(p.name);
      r.state.update(p);
      r.tr.style.setProperty('--owner', partitionColour(p.name, latestParts));
      setText(r.cells[0], cpuList(p.cpus));
      setText(r.cells[1], bytes(p.ram_bytes));
      setText(r.cells[2], p.uptime_ms > 0 ? duration(p.uptime_ms) : '–');
      setText(r.cells[3], String(p.boot_count));
      setText(r.cells[4], p.gic_interface ?? '–');
      r.bar.update(p);
      ordered.push(r.tr);
    }
    for (const name of [...rows.keys()]) if (!seen.has(name)) rows.delete(name);
    // Re-append only when membership or order changed, so hover and focus survive.
    if (ordered.length !== tbody.children.length || ordered.some((tr, i) => tbody.children[i] !== tr)) {
      fill(tbody, ...ordered);
    }
  });

  return { el, dispose: () => poller.stop() };
}
