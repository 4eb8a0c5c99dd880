// Create / edit partition form. The manager validates with the build-time plan
// check and names the field at fault (`field` in the error JSON): that input
// is highlighted and the error's `detail` shown beside it. Edits send only the
// changed fields, with If-Match (the ETag read with the partition), so two
// operators cannot overwrite each other. Kernel and initrd can be uploaded
// from here (with a progress bar) or picked from the images held.

import { api, ApiError, AuthCancelled, type Image, type ImageKind, type PartitionConfig, type PartitionCreate, type PartitionPatch } from '../api';
import { h, setText, toast } from '../dom';
import { cpuList } from '../format';
import { describeError, progressView, uploadWithProgress } from '../upload';
import type { View } from './view';

/** The plan field names the manager uses (the TOML check's) -> the form's input. */
const FIELD_INPUT: Record<string, string> = {
  name: 'name',
  cpus: 'cpus',
  memory: 'memory_mib',
  memory_mib: 'memory_mib',
  kernel: 'kernel',
  kernel_format: 'kernel_format',
  initrd: 'initrd',
  bootargs: 'bootargs',
  autostart: 'autostart',
  restart: 'restart',
  restart_limit: 'restart_limit',
  watchdog: 'watchdog_s',
  watchdog_s: 'watchdog_s',
  shutdown_timeout: 'shutdown_timeout_s',
  shutdown_timeout_s: 'shutdown_timeout_s',
  pci: 'pci',
  gic: 'gic',
};

/** The form's input for a manager field: `pci[1]` is the PCI functions input. */
function inputFor(fieldName: string): string | undefined {
  if (/^pci\[\d+\]$/.test(fieldName)) return 'pci';
  return FIELD_INPUT[fieldName];
}

/** "0000:00:02.0, 0000:00:03.0" -> the list (the manager checks each entry). */
export function parsePci(text: string): string[] {
  return text.split(/[,\s]+/).filter((x) => x !== '');
}

/** "1, 3-5" -> [1, 3, 4, 5]; null when it is not a CPU list. */
export function parseCpus(text: string): number[] | null {
  const out: number[] = [];
  for (const part of text.split(/[,\s]+/).filter((x) => x !== '')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) return null;
    const a = Number(m[1]);
    const b = m[2] === undefined ? a : Number(m[2]);
    if (b < a || b - a > 512) return null;
    for (let c = a; c <= b; c += 1) out.push(c);
  }
  return out;
}

export function partitionForm(editing: string | null): View {
  const ctl = new AbortController();
  const inputs = new Map<string, HTMLInputElement | HTMLSelectElement>();
  const errors = new Map<string, HTMLElement>();
  const formError = h('div', { class: 'notice notice-error', hidden: true, role: 'alert', 'data-testid': 'form-error' });
  let etag: string | null = null;
  let original: PartitionConfig | null = null;
  let originalName = '';

  function field(key: string, label: string, control: HTMLInputElement | HTMLSelectElement, hint?: string, extra?: Node, cls = 'field'): HTMLElement {
    control.id = `f-${key}`;
    control.name = key;
    control.dataset.field = key;
    inputs.set(key, control);
    const err = h('span', { class: 'field-error', 'data-error-for': key, hidden: true, role: 'alert' });
    errors.set(key, err);
    return h('div', { class: cls }, h('label', { for: control.id }, label), extra ? h('div', { class: 'row' }, control, extra) : control, hint ? h('p', { class: 'hint muted' }, hint) : null, err);
  }
  const text = (attrs: Record<string, string | number | boolean> = {}) => h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', ...attrs });
  const num = (min = 0) => h('input', { type: 'number', min, step: 1, inputmode: 'numeric' });
  const select = (options: [string, string][]) => h('select', {}, ...options.map(([v, l]) => h('option', { value: v }, l)));

  const imageSelect = (kind: ImageKind, optional: boolean) => {
    const s = select(optional ? [['', '(none)']] : [['', '(choose an image)']]);
    s.dataset.kind = kind;
    return s;
  };
  const kernelSel = imageSelect('kernel', false);
  const initrdSel = imageSelect('initrd', true);
  let images: Image[] = [];

  function fillImages(): void {
    for (const sel of [kernelSel, initrdSel]) {
      const kind = sel.dataset.kind as ImageKind;
      const keep = sel.value;
      while (sel.options.length > 1) sel.remove(1);
      for (const img of images.filter((i) => i.kind === kind && i.state === 'ready')) {
        sel.append(h('option', { value: img.id }, `${img.name} (#${img.id}${img.boot ? ', boot bundle' : ''})`));
      }
      sel.value = keep;
    }
  }

  /** "Upload…" beside an image select: pick a file, watch the bar, and it is selected. */
  function uploader(kind: ImageKind, sel: HTMLSelectElement): [HTMLElement, HTMLElement] {
    const file = h('input', { type: 'file', hidden: true, 'data-testid': `upload-${kind}` });
    const progress = progressView(`progress-${kind}`);
    const btn = h('button', { type: 'button', class: 'btn btn-small', onclick: () => file.click() }, 'Upload…');
    file.addEventListener('change', async () => {
      const f = file.files?.[0];
      if (!f) return;
      btn.disabled = true;
      clearError(kind);
      try {
        const img = await uploadWithProgress(f, kind, f.name, null, progress);
        images = [...images.filter((i) => i.id !== img.id), img];
        fillImages();
        sel.value = img.id;
        toast(`${f.name} uploaded (image #${img.id}).`);
      } catch (e) {
        progress.reset();
        if (e instanceof ApiError && e.field !== null) showError(e.field === 'kind' || e.field === 'sha256' ? kind : e.field, e.message);
        else showError(kind, describeError(e));
      } finally {
        btn.disabled = false;
        file.value = '';
      }
    });
    return [h('span', { class: 'row' }, btn, file), progress.el];
  }
  const [kernelUp, kernelProgress] = uploader('kernel', kernelSel);
  const [initrdUp, initrdProgress] = uploader('initrd', initrdSel);

  const nameIn = text({ required: true, placeholder: 'gamma' });
  const cpusIn = text({ required: true, placeholder: 'e.g. 4 or 4-5' });
  const memIn = num(1);
  const cpuHint = h('span', {});

  const form = h(
    'form',
    { class: 'form', novalidate: true, 'data-testid': 'partition-form' },
    field('name', 'Name', nameIn, 'a-z, 0-9, - and _, starting with a letter'),
    field('cpus', 'CPUs', cpusIn, undefined, undefined),
    field('memory_mib', 'Memory (MiB)', memIn),
    h('div', { class: 'field field-wide' }, h('p', { class: 'hint muted', 'data-testid': 'free-cpus' }, cpuHint)),
    field('kernel', 'Kernel', kernelSel, 'an arm64 Image', kernelUp),
    field('kernel_format', 'Kernel format', select([['linux', 'Linux arm64 Image'], ['raw', 'raw binary']])),
    field('initrd', 'Initrd', initrdSel, undefined, initrdUp),
    h('div', { class: 'field field-wide' }, kernelProgress, initrdProgress),
    field('bootargs', 'Kernel command line', text({ placeholder: 'console=ttyAMA0' }), undefined, undefined, 'field field-wide'),
    field('restart', 'Restart policy', select([['never', 'never'], ['on-crash', 'on crash'], ['always', 'always']])),
    field('restart_limit', 'Restart limit', num(), 'restarts at most (with a policy that restarts)'),
    field('watchdog_s', 'Watchdog (s)', num(), '0 = off'),
    field('shutdown_timeout_s', 'Shutdown timeout (s)', num(), 'then a hard stop'),
    field('gic', 'Interrupt controller', select([['auto', 'auto (the host’s native kind)'], ['v3', 'GICv3'], ['v5', 'GICv5']]), 'checked against the host’s GIC'),
    field('pci', 'PCI functions', text({ placeholder: '0000:00:03.0' }), 'segment:bus:device.function, comma-separated; empty = none', undefined, 'field field-wide'),
    field('autostart', 'Start now and at boot', h('input', { type: 'checkbox' }), undefined, undefined, 'field field-check'),
    formError,
    h(
      'div',
      { class: 'form-actions' },
      h('a', { class: 'btn', href: editing ? `#/partitions/${encodeURIComponent(editing)}` : '#/' }, 'Cancel'),
      h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'form-submit' }, editing ? 'Save changes' : 'Create partition'),
    ),
  );

  function clearError(key?: string): void {
    for (const [k, err] of errors) {
      if (key !== undefined && k !== key) continue;
      err.hidden = true;
      inputs.get(k)?.classList.remove('invalid');
      inputs.get(k)?.removeAttribute('aria-invalid');
    }
    if (key === undefined) formError.hidden = true;
  }

  /** Show `detail` beside the input for the manager's `field`; at the top when no input matches. */
  function showError(fieldName: string | null, detail: string): void {
    const key = fieldName === null ? undefined : (inputFor(fieldName) ?? (fieldName.startsWith('device') ? undefined : fieldName));
    const input = key ? inputs.get(key) : undefined;
    const err = key ? errors.get(key) : undefined;
    if (input && err) {
      input.classList.add('invalid');
      input.setAttribute('aria-invalid', 'true');
      setText(err, detail);
      err.hidden = false;
      input.focus();
    } else {
      setText(formError, fieldName ? `${fieldName}: ${detail}` : detail);
      formError.hidden = false;
    }
  }
  for (const [k, input] of inputs) input.addEventListener('input', () => clearError(k));

  /** A restart limit means something only with a policy that restarts: off (0) with "never", 3 when one is chosen. */
  function limitFollowsPolicy(): void {
    const limit = inputs.get('restart_limit') as HTMLInputElement;
    const never = inputs.get('restart')?.value === 'never';
    limit.disabled = never;
    if (never) limit.value = '0';
    else if (limit.value === '' || limit.value === '0') limit.value = '3';
  }
  inputs.get('restart')?.addEventListener('change', () => {
    clearError('restart_limit');
    limitFollowsPolicy();
  });

  const get = (k: string) => inputs.get(k) as HTMLInputElement;

  function values(): Record<string, unknown> | null {
    const cpus = parseCpus(get('cpus').value);
    if (cpus === null || cpus.length === 0) {
      showError('cpus', 'Give CPU numbers, e.g. "4" or "4-5" or "4, 6".');
      return null;
    }
    const int = (k: string) => (get(k).value === '' ? undefined : Number(get(k).value));
    return {
      name: get('name').value.trim(),
      cpus,
      memory_mib: int('memory_mib'),
      kernel: get('kernel').value === '' ? null : get('kernel').value,
      kernel_format: get('kernel_format').value,
      initrd: get('initrd').value === '' ? null : get('initrd').value,
      bootargs: get('bootargs').value,
      autostart: get('autostart').checked,
      restart: get('restart').value,
      // The plan check refuses a limit without a policy that restarts.
      restart_limit: get('restart').value === 'never' ? 0 : int('restart_limit'),
      watchdog_s: int('watchdog_s'),
      shutdown_timeout_s: int('shutdown_timeout_s'),
      pci: parsePci(get('pci').value),
      gic: get('gic').value,
    };
  }

  function load(name: string, c: PartitionConfig): void {
    get('name').value = name;
    get('cpus').value = cpuList(c.cpus).replaceAll(' ', '');
    get('memory_mib').value = String(c.memory_mib);
    get('kernel').value = c.kernel ?? '';
    get('kernel_format').value = c.kernel_format;
    get('initrd').value = c.initrd ?? '';
    get('bootargs').value = c.bootargs;
    get('autostart').checked = c.autostart;
    get('restart').value = c.restart;
    get('restart_limit').value = String(c.restart_limit);
    limitFollowsPolicy();
    get('watchdog_s').value = String(c.watchdog_s);
    get('shutdown_timeout_s').value = String(c.shutdown_timeout_s);
    get('pci').value = (c.pci ?? []).join(', ');
    get('gic').value = c.gic ?? 'auto';
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearError();
    const v = values();
    if (v === null) return;
    const submit = form.querySelector<HTMLButtonElement>('[data-testid="form-submit"]');
    if (submit) submit.disabled = true;
    try {
      let name: string;
      if (editing === null) {
        const body = Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined)) as unknown as PartitionCreate;
        name = (await api.createPartition(body)).name;
        toast(`${name} created.`);
      } else {
        // Only what changed, so the manager checks (and logs) just that.
        const patch: Record<string, unknown> = {};
        for (const [k, x] of Object.entries(v)) {
          const was = k === 'name' ? originalName : (original as Record<string, unknown> | null)?.[k];
          if (x !== undefined && JSON.stringify(x) !== JSON.stringify(was)) patch[k] = x;
        }
        name = (await api.updatePartition(editing, patch as PartitionPatch, etag)).name;
        toast(Object.keys(patch).length ? `${name}: ${Object.keys(patch).join(', ')} changed.` : `${name}: nothing changed.`);
      }
      window.location.hash = `#/partitions/${encodeURIComponent(name)}`;
    } catch (e) {
      if (e instanceof ApiError && e.status === 412) showError(null, `${e.message} Reload the page to see the current configuration.`);
      else if (e instanceof ApiError && (e.status === 404 || e.status === 405) && e.field === null && editing === null) showError(null, 'This manager cannot create partitions yet.');
      else if (e instanceof ApiError) showError(e.field, e.message);
      else if (e instanceof AuthCancelled) showError(null, 'Not sent: no token given.');
      else showError(null, String(e));
    } finally {
      if (submit) submit.disabled = false;
    }
  });

  const title = editing ? `Edit ${editing}` : 'New partition';
  const el = h(
    'div',
    { class: 'page', 'data-page': editing ? 'edit' : 'create' },
    h('nav', { class: 'crumbs' }, h('a', { href: '#/' }, 'Overview'), ' / ', editing ? h('a', { href: `#/partitions/${encodeURIComponent(editing)}` }, editing) : null, editing ? ' / ' : null, h('span', {}, editing ? 'edit' : 'new')),
    h('div', { class: 'page-head' }, h('h1', {}, title)),
    h('section', { class: 'card' }, form),
  );

  // Defaults, then what is there: images, free CPUs, and the partition being edited.
  // The manager's defaults for a new partition (LifecyclePlan::default).
  load('', { cpus: [], memory_mib: 256, kernel: null, kernel_format: 'linux', initrd: null, bootargs: 'console=ttyAMA0', autostart: false, restart: 'never', restart_limit: 0, watchdog_s: 0, shutdown_timeout_s: 30, devices: [], pci: [], gic: 'auto' });
  get('cpus').value = '';
  void (async () => {
    try {
      const [imgs, res] = await Promise.all([api.images(ctl.signal), api.resources(ctl.signal).catch(() => null)]);
      images = imgs;
      fillImages();
      if (res) {
        const free = res.cpus.filter((c) => c.partition === null).map((c) => c.cpu);
        setText(cpuHint, `Free CPUs: ${free.length ? cpuList(free) : 'none'} · free RAM: ${Math.floor(res.memory.free_bytes / 1048576)} MiB (largest range ${Math.floor(res.memory.largest_free_bytes / 1048576)} MiB)`);
      }
      if (editing !== null) {
        const tagged = await api.partitionTagged(editing);
        etag = tagged.etag;
        if (!tagged.value.config) throw new Error('This manager does not report partition configurations yet.');
        original = tagged.value.config;
        originalName = tagged.value.name;
        load(originalName, original);
      }
    } catch (e) {
      if (!ctl.signal.aborted) showError(null, describeError(e));
    }
  })();

  return { el, dispose: () => ctl.abort() };
}
