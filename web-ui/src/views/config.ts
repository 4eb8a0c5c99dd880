// Configuration as code: export every partition as a plan TOML (download, and
// shown here for editing) and import one (PUT with If-Match, applied by the
// manager as a diff after validating it all), with a dry-run preview first
// (?dry_run=1: the same checks, nothing applied). The answer is the diff
// summary, or the field error of the first invalid value.

import { api, ApiError, type ConfigDiff } from '../api';
import { fill, h, setText, toast } from '../dom';
import { describeError } from '../upload';
import type { View } from './view';

export function configView(): View {
  let etag: string | null = null;
  let downloadUrl: string | null = null;
  const missing = h('div', { class: 'notice notice-warn', hidden: true }, 'This manager cannot export its configuration yet (GET /api/v1/config answers 404).');
  const download = h('a', { class: 'btn', download: 'pinfold-plan.toml', 'data-testid': 'config-download', hidden: true }, '⤓ Download plan');
  const editor = h('textarea', { class: 'input', spellcheck: 'false', 'data-testid': 'config-text', 'aria-label': 'Plan TOML' });
  const fileIn = h('input', { type: 'file', accept: '.toml,text/plain,application/toml', class: 'input', 'data-testid': 'config-file' });
  const onlyIfSame = h('input', { type: 'checkbox', checked: true, id: 'cfg-ifmatch' });
  const etagNote = h('span', { class: 'muted mono' });
  const result = h('div', { class: 'diff', 'data-testid': 'config-diff', hidden: true });
  const error = h('div', { class: 'notice notice-error', hidden: true, role: 'alert', 'data-testid': 'config-error' });
  const importBtn = h('button', { type: 'button', class: 'btn btn-primary', 'data-testid': 'config-import' }, 'Import (apply as a diff)');
  const previewBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'config-preview' }, 'Preview (dry run)');
  const reloadBtn = h('button', { type: 'button', class: 'btn' }, '↻ Reload from manager');

  async function load(): Promise<void> {
    try {
      const cfg = await api.exportConfig();
      etag = cfg.etag;
      editor.value = cfg.value;
      setText(etagNote, etag ? `ETag ${etag}` : '');
      if (downloadUrl) URL.revokeObjectURL(downloadUrl);
      downloadUrl = URL.createObjectURL(new Blob([cfg.value], { type: 'application/toml' }));
      download.href = downloadUrl;
      download.hidden = false;
      missing.hidden = true;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) missing.hidden = false;
      else toast(describeError(e), 'error');
    }
  }

  fileIn.addEventListener('change', async () => {
    const f = fileIn.files?.[0];
    if (f) editor.value = await f.text();
  });
  reloadBtn.addEventListener('click', () => void load());

  async function submit(dryRun: boolean): Promise<void> {
    error.hidden = true;
    result.hidden = true;
    importBtn.disabled = true;
    previewBtn.disabled = true;
    try {
      const diff: ConfigDiff = await api.importConfig(editor.value, onlyIfSame.checked ? etag : null, dryRun);
      const part = (label: string, names: string[]) => h('span', { 'data-diff': label }, h('strong', {}, `${label}: `), names.length ? names.join(', ') : '–');
      fill(
        result,
        ...(dryRun ? [h('span', { 'data-diff': 'dry-run' }, h('strong', {}, 'Dry run: '), 'nothing applied')] : []),
        part('created', diff.created),
        part('changed', diff.changed),
        part('deleted', diff.deleted),
        part('unchanged', diff.unchanged),
      );
      result.hidden = false;
      if (!dryRun) {
        toast('Configuration applied.');
        await load();
      }
    } catch (e) {
      const msg =
        e instanceof ApiError && e.status === 412
          ? `${e.message} Reload, then apply your change again.`
          : e instanceof ApiError && e.field
            ? `${e.field}: ${e.message}`
            : describeError(e);
      setText(error, msg);
      error.dataset.field = e instanceof ApiError ? (e.field ?? '') : '';
      error.hidden = false;
    } finally {
      importBtn.disabled = false;
      previewBtn.disabled = false;
    }
  }
  importBtn.addEventListener('click', () => void submit(false));
  previewBtn.addEventListener('click', () => void submit(true));

  const el = h(
    'div',
    { class: 'page', 'data-page': 'config' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Configuration'), h('div', { class: 'spacer' }), download),
    missing,
    h(
      'section',
      { class: 'card' },
      h('header', { class: 'card-head' }, h('h2', {}, 'Plan TOML'), etagNote),
      h('p', { class: 'muted hint' }, 'Every partition, in the vm-configs plan format. Edit here or load a file, then import: the manager checks the whole plan first and applies nothing if anything is wrong.'),
      editor,
      h('div', { class: 'form-actions', style: 'margin-top:10px;align-items:center' }, fileIn, h('label', { for: 'cfg-ifmatch', class: 'muted' }, onlyIfSame, ' only if unchanged since loaded (If-Match)'), reloadBtn, previewBtn, importBtn),
      error,
      result,
    ),
  );
  void load();
  return {
    el,
    dispose() {
      if (downloadUrl) URL.revokeObjectURL(downloadUrl);
    },
  };
}
