// Image upload with a progress bar: the browser's upload progress
// (XMLHttpRequest) until the manager reports what it has taken, then the
// manager's own `received` / `size` (polled from GET /api/v1/images, which lists
// an upload in progress), so the bar shows bytes that reached the hypervisor.
// A URL fetch (POST /api/v1/images/fetch) is followed by polling its image.

import { api, ApiError, AuthCancelled, uploadImage, type Image, type ImageKind } from './api';
import { h, setText } from './dom';
import { bytes } from './format';

const POLL_MS = 300;

export interface ProgressView {
  el: HTMLElement;
  set(done: number, total: number, what: string): void;
  reset(): void;
}

export function progressView(testid: string): ProgressView {
  const bar = h('progress', { max: 1, value: 0, 'data-testid': testid });
  const label = h('span', { class: 'muted' });
  const el = h('div', { class: 'progress', hidden: true }, bar, label);
  return {
    el,
    set(done, total, what) {
      el.hidden = false;
      bar.value = total > 0 ? Math.min(1, done / total) : 0;
      setText(label, `${what}: ${bytes(done)} of ${bytes(total)} (${total > 0 ? Math.floor((100 * done) / total) : 0} %)`);
    },
    reset() {
      el.hidden = true;
      bar.value = 0;
    },
  };
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => window.setTimeout(r, ms));
}

/** Upload `file`; the bar follows the manager's `received` once it lists the upload. */
export async function uploadWithProgress(file: File, kind: ImageKind, name: string, sha256: string | null, progress: ProgressView): Promise<Image> {
  let sent = 0;
  let serverSeen = false;
  let done = false;
  progress.set(0, file.size, 'Uploading');
  const before = new Set((await api.images().catch(() => [] as Image[])).map((i) => i.id));
  const follow = (async () => {
    while (!done) {
      await sleep(POLL_MS);
      if (done) break;
      try {
        const mine = (await api.images()).filter((i) => !before.has(i.id) && i.name === name && i.kind === kind && i.state === 'uploading');
        const img = mine[mine.length - 1];
        if (img && !done) {
          serverSeen = true;
          progress.set(img.received, img.size, 'Received by the manager');
        }
      } catch {
        // A missed poll only delays the bar.
      }
    }
  })();
  try {
    const img = await uploadImage(file, kind, name, sha256, (p) => {
      sent = p.sent;
      if (!serverSeen) progress.set(sent, p.total, 'Sent');
    });
    progress.set(img.size, img.size, 'Stored');
    return img;
  } finally {
    done = true;
    await follow;
  }
}

/** Follow a fetch-from-URL image until it is ready or failed. */
export async function followFetch(img: Image, progress: ProgressView): Promise<Image> {
  let cur = img;
  while (cur.state === 'uploading') {
    progress.set(cur.received, cur.size, 'Fetched by the manager');
    await sleep(POLL_MS);
    cur = await api.image(cur.id);
  }
  if (cur.state === 'failed') throw new ApiError(0, 'failed', cur.error ?? 'the fetch failed');
  progress.set(cur.size, cur.size, 'Stored');
  return cur;
}

export function describeError(e: unknown): string {
  if (e instanceof AuthCancelled) return 'Not sent: no token given.';
  if (e instanceof ApiError) return e.message;
  return String(e);
}
