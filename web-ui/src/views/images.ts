// Images page: kernels, initrds and DTBs the hypervisor holds, upload (with a
// progress bar) and fetch from an HTTP URL (followed until ready), delete.

import { api, ApiError, type Image, type ImageKind } from '../api';
import { confirmAction } from '../auth';
import { fill, h, setText, toast } from '../dom';
import { bytes } from '../format';
import { poll } from '../poll';
import { describeError, followFetch, progressView, uploadWithProgress } from '../upload';
import type { View } from './view';

const kindSelect = () => h('select', { class: 'input' }, ...['kernel', 'initrd', 'dtb'].map((k) => h('option', { value: k }, k)));

export function imagesView(): View {
  const tbody = h('tbody');
  const missing = h('div', { class: 'notice notice-warn', hidden: true }, 'This manager does not hold images yet (GET /api/v1/images answers 404).');

  // Upload
  const file = h('input', { type: 'file', class: 'input', 'data-testid': 'image-file' });
  const upKind = kindSelect();
  const upName = h('input', { type: 'text', class: 'input', placeholder: 'name (default: the file name)' });
  const upSha = h('input', { type: 'text', class: 'input', placeholder: 'sha256 (optional, 64 hex digits)', spellcheck: 'false' });
  const upProgress = progressView('image-progress');
  const upError = h('div', { class: 'field-error', hidden: true, role: 'alert', 'data-testid': 'upload-error' });
  const upBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Upload');
  const upForm = h(
    'form',
    { class: 'form' },
    h('div', { class: 'field' }, h('label', {}, 'File'), file),
    h('div', { class: 'field' }, h('label', {}, 'Kind'), upKind),
    h('div', { class: 'field' }, h('label', {}, 'Name'), upName),
    h('div', { class: 'field' }, h('label', {}, 'SHA-256'), upSha),
    h('div', { class: 'field field-wide' }, upProgress.el, upError),
    h('div', { class: 'form-actions' }, upBtn),
  );
  upForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = file.files?.[0];
    upError.hidden = true;
    if (!f) {
      setText(upError, 'Choose a file first.');
      upError.hidden = false;
      return;
    }
    upBtn.disabled = true;
    try {
      const img = await uploadWithProgress(f, upKind.value as ImageKind, upName.value.trim() || f.name, upSha.value.trim() || null, upProgress);
      toast(`${img.name} stored as image #${img.id}.`);
      poller.kick();
    } catch (err) {
      upProgress.reset();
      setText(upError, err instanceof ApiError && err.field ? `${err.field}: ${err.message}` : describeError(err));
      upError.hidden = false;
    } finally {
      upBtn.disabled = false;
    }
  });

  // Fetch from a URL
  const url = h('input', { type: 'url', class: 'input', placeholder: 'http://10.0.2.2:8000/vmlinuz', 'data-testid': 'fetch-url' });
  const fKind = kindSelect();
  const fName = h('input', { type: 'text', class: 'input', placeholder: 'name', 'data-testid': 'fetch-name' });
  const fSha = h('input', { type: 'text', class: 'input', placeholder: 'sha256 (optional)', spellcheck: 'false' });
  const fProgress = progressView('fetch-progress');
  const fError = h('div', { class: 'field-error', hidden: true, role: 'alert', 'data-testid': 'fetch-error' });
  const fBtn = h('button', { type: 'submit', class: 'btn btn-primary' }, 'Fetch');
  const fForm = h(
    'form',
    { class: 'form' },
    h('div', { class: 'field field-wide' }, h('label', {}, 'URL (http only; the manager downloads it)'), url),
    h('div', { class: 'field' }, h('label', {}, 'Kind'), fKind),
    h('div', { class: 'field' }, h('label', {}, 'Name'), fName),
    h('div', { class: 'field' }, h('label', {}, 'SHA-256'), fSha),
    h('div', { class: 'field field-wide' }, fProgress.el, fError),
    h('div', { class: 'form-actions' }, fBtn),
  );
  fForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    fError.hidden = true;
    fBtn.disabled = true;
    try {
      const name = fName.value.trim() || url.value.split('/').pop() || 'image';
      const body = { url: url.value.trim(), kind: fKind.value as ImageKind, name, ...(fSha.value.trim() ? { sha256: fSha.value.trim() } : {}) };
      const img = await followFetch(await api.fetchImage(body), fProgress);
      toast(`${img.name} fetched as image #${img.id}.`);
      poller.kick();
    } catch (err) {
      fProgress.reset();
      setText(fError, err instanceof ApiError && err.field ? `${err.field}: ${err.message}` : describeError(err));
      fError.hidden = false;
    } finally {
      fBtn.disabled = false;
    }
  });

  const el = h(
    'div',
    { class: 'page', 'data-page': 'images' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Images')),
    missing,
    h(
      'section',
      { class: 'card' },
      h('header', { class: 'card-head' }, h('h2', {}, 'Held by the hypervisor'), h('span', { class: 'muted' }, 'copied into a partition’s RAM at each of its starts')),
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          { class: 'table table-dense table-cards', 'data-testid': 'images' },
          h('thead', {}, h('tr', {}, ...['#', 'Name', 'Kind', 'Size', 'State', 'SHA-256', 'Used by', ''].map((x) => h('th', {}, x)))),
          tbody,
        ),
      ),
    ),
    h('section', { class: 'card' }, h('header', { class: 'card-head' }, h('h2', {}, 'Upload')), upForm),
    h('section', { class: 'card' }, h('header', { class: 'card-head' }, h('h2', {}, 'Fetch from a URL')), fForm),
  );

  async function remove(img: Image): Promise<void> {
    if (!(await confirmAction(`Delete image ${img.name}?`, `Image #${img.id} (${bytes(img.size)}) is removed from the hypervisor's RAM.`, 'Delete', true))) return;
    try {
      await api.deleteImage(img.id);
      toast(`Image #${img.id} deleted.`);
      poller.kick();
    } catch (e) {
      toast(describeError(e), 'error');
    }
  }

  function render(list: Image[]): void {
    fill(
      tbody,
      ...list.map((i) =>
        h(
          'tr',
          { 'data-image': i.id, 'data-state': i.state },
          h('td', { class: 'mono', 'data-label': '#' }, i.id),
          h('td', { 'data-label': 'Name' }, i.name, i.boot ? h('span', { class: 'tag' }, 'boot bundle') : null),
          h('td', { 'data-label': 'Kind' }, i.kind),
          h('td', { class: 'num', 'data-label': 'Size' }, bytes(i.size)),
          h(
            'td',
            { 'data-label': 'State' },
            i.state === 'uploading' ? h('progress', { max: i.size || 1, value: i.received }) : null,
            i.state === 'uploading' ? ` ${Math.floor((100 * i.received) / (i.size || 1))} %` : i.state,
            i.error ? h('span', { class: 'field-error' }, ` ${i.error}`) : null,
          ),
          h('td', { class: 'mono', 'data-label': 'SHA-256', title: i.sha256 ?? '' }, i.sha256 ? `${i.sha256.slice(0, 12)}…` : '–'),
          h('td', { 'data-label': 'Used by' }, i.used_by.join(', ') || '–'),
          h('td', { class: 'right cell-actions' }, h('button', { type: 'button', class: 'btn btn-small btn-delete', disabled: i.used_by.length > 0 || i.state === 'uploading', title: i.used_by.length ? 'In use' : 'Delete', onclick: () => void remove(i) }, 'Delete')),
        ),
      ),
    );
  }

  const poller = poll(async (signal) => {
    try {
      render(await api.images(signal));
      missing.hidden = true;
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
