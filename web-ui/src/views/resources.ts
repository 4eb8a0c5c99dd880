// Resources page: every CPU (free or whose), the RAM map (ranges by owner,
// freed RAM still being zeroed as "scrubbing" with the bytes left) and the
// host devices (free, the hypervisor's, or whose), from GET /api/v1/resources.

import { api, ApiError, type PartitionSummary, type Resources } from '../api';
import { fill, h, setText } from '../dom';
import { bytes, hex } from '../format';
import { poll } from '../poll';
import { partitionColour } from '../widgets';
import { stat } from './overview';
import type { View } from './view';

export function resourcesView(): View {
  const [totalStat, total] = stat('RAM', 'total_bytes');
  const [freeStat, free] = stat('Free RAM', 'free_bytes');
  const [largestStat, largest] = stat('Largest free range', 'largest_free_bytes');
  const [imgStat, img] = stat('Held for images', 'images_bytes');
  const [cpuStat, cpuFree] = stat('Free CPUs', 'free_cpus');
  const cpus = h('div', { class: 'cpu-map', 'data-testid': 'res-cpus' });
  const ramBar = h('div', { class: 'ram-bar', 'data-testid': 'ram-bar' });
  const ranges = h('tbody');
  const devices = h('tbody');
  const missing = h('div', { class: 'notice notice-warn', hidden: true }, 'This manager does not report its resources yet (GET /api/v1/resources answers 404).');

  const table = (testid: string, heads: string[], body: HTMLElement) =>
    h('div', { class: 'table-wrap' }, h('table', { class: 'table table-dense table-cards', 'data-testid': testid }, h('thead', {}, h('tr', {}, ...heads.map((x) => h('th', {}, x)))), body));

  const el = h(
    'div',
    { class: 'page', 'data-page': 'resources' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Resources')),
    missing,
    h('section', { class: 'card' }, h('div', { class: 'stats' }, totalStat, freeStat, largestStat, imgStat, cpuStat)),
    h('section', { class: 'card' }, h('header', { class: 'card-head' }, h('h2', {}, 'CPUs')), cpus),
    h('section', { class: 'card' }, h('header', { class: 'card-head' }, h('h2', {}, 'RAM'), h('span', { class: 'muted' }, 'ranges by owner')), ramBar, table('res-ranges', ['Base', 'Size', 'Owner'], ranges)),
    h('section', { class: 'card' }, h('header', { class: 'card-head' }, h('h2', {}, 'Devices')), table('res-devices', ['Host node', 'MMIO', 'Owner'], devices)),
  );

  const owner = (p: string | null) => (p === null ? h('span', { class: 'muted' }, 'free') : h('a', { href: `#/partitions/${encodeURIComponent(p)}` }, p));
  const ramOwner = (x: Resources['memory']['ranges'][number]) =>
    x.owner === 'partition' ? owner(x.partition) : x.owner === 'scrubbing' ? `scrubbing (${bytes(x.left_bytes ?? x.size)} left)` : x.owner;
  const deviceOwner = (d: Resources['devices'][number]) => (d.owner === 'partition' ? owner(d.partition) : d.owner === 'hypervisor' ? 'hypervisor' : owner(null));

  function render(r: Resources, parts: PartitionSummary[]): void {
    setText(total, bytes(r.memory.total_bytes));
    setText(free, bytes(r.memory.free_bytes));
    setText(largest, bytes(r.memory.largest_free_bytes));
    setText(img, bytes(r.images_bytes));
    const freeCpus = r.cpus.filter((c) => c.partition === null).map((c) => c.cpu);
    setText(cpuFree, freeCpus.length ? freeCpus.join(', ') : 'none');
    fill(
      cpus,
      ...r.cpus.map((c) =>
        h(
          'div',
          { class: c.partition === null ? 'cpu-tile cpu-free' : 'cpu-tile', 'data-cpu': c.cpu, 'data-owner': c.partition ?? '', style: c.partition ? `--owner:${partitionColour(c.partition, parts)}` : null },
          h('span', { class: 'cpu-id' }, `CPU ${c.cpu}`),
          h('span', { class: 'cpu-owner' }, c.partition ?? 'free'),
        ),
      ),
    );
    const sum = r.memory.ranges.reduce((n, x) => n + x.size, 0) || 1;
    fill(
      ramBar,
      ...r.memory.ranges.map((x) =>
        h('div', {
          class: 'ram-seg',
          'data-owner': x.owner,
          style: `flex:${x.size / sum};${x.partition ? `--owner:${partitionColour(x.partition, parts)}` : ''}`,
          title: `${hex(x.base)} · ${bytes(x.size)} · ${x.partition ?? x.owner}`,
        }),
      ),
    );
    fill(
      ranges,
      ...r.memory.ranges.map((x) =>
        h('tr', { 'data-owner': x.owner }, h('td', { class: 'mono', 'data-label': 'Base' }, hex(x.base)), h('td', { class: 'num', 'data-label': 'Size' }, bytes(x.size)), h('td', { 'data-label': 'Owner' }, ramOwner(x))),
      ),
    );
    fill(
      devices,
      ...r.devices.map((d) =>
        h('tr', { 'data-device': d.name, 'data-owner': d.owner }, h('td', { class: 'mono', 'data-label': 'Host node' }, d.name), h('td', { class: 'mono', 'data-label': 'MMIO' }, `${hex(d.base)} + ${hex(d.size)}`), h('td', { 'data-label': 'Owner' }, deviceOwner(d))),
      ),
    );
  }

  const poller = poll(async (signal) => {
    try {
      const [r, parts] = await Promise.all([api.resources(signal), api.partitions(signal)]);
      missing.hidden = true;
      render(r, parts);
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        missing.hidden = false;
        return;
      }
      throw e;
    }
  });
  return { el, dispose: () => poller.stop() };
}
