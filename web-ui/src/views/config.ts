// Configuration as code: the whole host configuration as a plan TOML
// (GET /api/v1/config: shown here for editing and offered as config.toml),
// and an import (pasted, edited here or loaded from a file) in two steps:
// Preview (PUT ?dry_run=1: the manager validates the whole plan and answers
// the diff it would apply, changing nothing), then Apply (PUT, with If-Match
// = the ETag the plan was loaded with unless unticked). Apply is offered only
// for the text that was previewed; a plan that deletes partitions asks first.
// A refused plan shows the manager's field and sentence.

import { api, ApiError, type ConfigDiff } from '../api';
import { confirmAction } from '../auth';
import { fill, h, setText, toast } from '../dom';
import { describeError } from '../upload';
import type { View } from './view';

const DIFF_PARTS = ['created', 'changed', 'deleted', 'unchanged'] as const;

export function configView(): View {
  let etag: string | null = null;
  let downloadUrl: string | null = null;
  /** The text the shown preview is of (Apply sends exactly this), or null. */
  let previewed: string | null = null;
  let previewDiff: ConfigDiff | null = null;
  const missing = h('div', { class: 'notice notice-warn', hidden: true }, 'This manager cannot export its configuration yet (GET /api/v1/config answers 404).');
  const download = h('a', { class: 'btn', download: 'config.toml', 'data-testid': 'config-download', hidden: true }, '⤓ Download config.toml');
  const editor = h('textarea', { class: 'input', spellcheck: 'false', 'data-testid': 'config-text', 'aria-label': 'Plan TOML' });
  const fileIn = h('input', { type: 'file', accept: '.toml,text/plain,application/toml', class: 'input', 'data-testid': 'config-file' });
  const onlyIfSame = h('input', { type: 'checkbox', checked: true, id: 'cfg-ifmatch' });
  const etagNote = h('span', { class: 'muted mono', 'data-testid': 'config-etag' });
  const result = h('div', { class: 'diff', 'data-testid': 'config-diff', hidden: true });
  const resultHead = h('p', { class: 'hint', 'data-testid': 'config-diff-head', hidden: true });
  const error = h('div', { class: 'notice notice-error', hidden: true, role: 'alert', 'data-testid': 'config-error' });
  const previewBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'config-preview' }, 'Preview changes');
  const applyBtn = h('button', { type: 'button', class: 'btn btn-primary', 'data-testid': 'config-apply', disabled: true, title: 'Preview the changes first' }, 'Apply');
  const reloadBtn = h('button', { type: 'button', class: 'btn' }, '↻ Reload from manager');

  function forgetPreview(): void {
    previewed = null;
    previewDiff = null;
    applyBtn.disabled = true;
    if (result.dataset.mode === 'preview') {
      result.hidden = true;
      resultHead.hidden = true;
    }
  }

  function showDiff(diff: ConfigDiff, mode: 'preview' | 'applied'): void {
    const part = (label: (typeof DIFF_PARTS)[number]) =>
      h('span', { 'data-diff': label, class: label === 'deleted' && diff.deleted.length > 0 ? 'diff-danger' : null }, h('strong', {}, `${label}: `), diff[label].length ? diff[label].join(', ') : '–');
    fill(result, ...DIFF_PARTS.map(part));
    result.dataset.mode = mode;
    const changes = diff.created.length + diff.changed.length + diff.deleted.length;
    setText(resultHead, mode === 'preview' ? (changes === 0 ? 'Preview: the plan is what runs now; applying it changes nothing.' : `Preview: applying this plan makes ${changes} change${changes === 1 ? '' : 's'} (nothing has been changed yet).`) : 'Applied:');
    resultHead.hidden = false;
    result.hidden = false;
  }

  function showError(e: unknown): void {
    const msg =
      e instanceof ApiError && e.status === 412
        ? `${e.message} Reload, then make your change again.`
        : e instanceof ApiError && e.field
          ? `${e.field}: ${e.message}`
          : describeError(e);
    setText(error, msg);
    error.dataset.field = e instanceof ApiError ? (e.field ?? '') : '';
    error.hidden = false;
  }

  async function load(): Promise<void> {
    try {
      const cfg = await api.exportConfig();
      etag = cfg.etag;
      editor.value = cfg.value;
      forgetPreview();
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

  editor.addEventListener('input', forgetPreview);
  fileIn.addEventListener('change', async () => {
    const f = fileIn.files?.[0];
    if (!f) return;
    editor.value = await f.text();
    forgetPreview();
    fileIn.value = '';
  });
  reloadBtn.addEventListener('click', () => void load());

  /** PUT the editor's text (dry run or for real); null when refused (the error is shown). */
  async function put(dryRun: boolean, text: string): Promise<ConfigDiff | null> {
    error.hidden = true;
    previewBtn.disabled = applyBtn.disabled = true;
    try {
      return await api.importConfig(text, onlyIfSame.checked ? etag : null, dryRun);
    } catch (e) {
      showError(e);
      return null;
    } finally {
      previewBtn.disabled = false;
      applyBtn.disabled = previewed === null;
    }
  }

  previewBtn.addEventListener('click', async () => {
    const text = editor.value;
    forgetPreview();
    result.hidden = resultHead.hidden = true;
    const diff = await put(true, text);
    if (diff === null || editor.value !== text) return;
    previewed = text;
    previewDiff = diff;
    applyBtn.disabled = false;
    applyBtn.title = 'Apply the previewed plan';
    showDiff(diff, 'preview');
  });

  applyBtn.addEventListener('click', async () => {
    if (previewed === null || previewDiff === null) return;
    const text = previewed;
    if (previewDiff.deleted.length > 0 && !(await confirmAction('Delete partitions?', `Applying this plan deletes ${previewDiff.deleted.join(', ')} (their RAM is scrubbed and their CPUs become free).`, 'Apply', true))) return;
    const diff = await put(false, text);
    if (diff === null) return;
    previewed = null;
    previewDiff = null;
    applyBtn.disabled = true;
    showDiff(diff, 'applied');
    toast('Configuration applied.');
    await load();
    // The applied diff stays shown after the reload.
    showDiff(diff, 'applied');
  });

  const el = h(
    'div',
    { class: 'page', 'data-page': 'config' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Configuration'), h('div', { class: 'spacer' }), download),
    missing,
    h(
      'section',
      { class: 'card' },
      h('header', { class: 'card-head' }, h('h2', {}, 'Plan TOML'), etagNote),
      h('p', { class: 'muted hint' }, 'Every partition, in the vm-configs plan format. Edit here, paste, or load a file; Preview asks the manager what applying it would change (it checks the whole plan and changes nothing); Apply makes those changes, or none if anything is wrong.'),
      editor,
      h('div', { class: 'form-actions', style: 'margin-top:10px;align-items:center' }, fileIn, h('label', { for: 'cfg-ifmatch', class: 'muted' }, onlyIfSame, ' only if unchanged since loaded (If-Match)'), reloadBtn, previewBtn, applyBtn),
      error,
      resultHead,
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
