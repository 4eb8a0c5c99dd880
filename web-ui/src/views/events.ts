// Event log: state changes, faults, restarts, config changes, refused logins
// and images, newest first, with a kind filter. Live from the Server-Sent
// Events stream (/api/v1/events/stream, read with fetch() so it carries the
// token; reconnected after a cut with Last-Event-ID); when that cannot be
// opened, by polling /api/v1/events?since=N. Events are kept by `seq`, so a reconnect
// or a poll after the stream never shows one twice.

import { api, ApiError, AuthCancelled, type Event } from '../api';
import { h, setText } from '../dom';
import { clock } from '../format';
import { poll, type Poller } from '../poll';
import type { View } from './view';

const KINDS: readonly Event['kind'][] = ['state', 'fault', 'restart', 'config', 'login_refused', 'image'];
const KIND_LABEL: Record<Event['kind'], string> = { state: 'state', fault: 'fault', restart: 'restart', config: 'config', login_refused: 'login refused', image: 'image' };
/** Events shown at most (the oldest are dropped from the page). */
const KEEP = 500;

export function eventsView(): View {
  const seen = new Map<number, Event>();
  let next = 0;
  const list = h('ol', { class: 'events', 'data-testid': 'events' });
  const status = h('span', { class: 'muted', 'data-testid': 'events-mode' }, 'connecting…');
  const filter = h(
    'select',
    { class: 'input', 'data-testid': 'event-filter', 'aria-label': 'Show events of kind', style: 'width:auto' },
    h('option', { value: '' }, 'All kinds'),
    ...KINDS.map((k) => h('option', { value: k }, KIND_LABEL[k])),
  );
  const missing = h('div', { class: 'notice notice-warn', hidden: true }, 'This manager keeps no event log yet (GET /api/v1/events answers 404).');
  const empty = h('p', { class: 'muted' }, 'No events yet.');
  const el = h(
    'div',
    { class: 'page', 'data-page': 'events' },
    h('div', { class: 'page-head' }, h('h1', {}, 'Events'), status, h('div', { class: 'spacer' }), filter),
    missing,
    h('section', { class: 'card' }, empty, list),
  );

  function row(e: Event): HTMLElement {
    return h(
      'li',
      { class: 'event', 'data-kind': e.kind, 'data-seq': e.seq },
      h('span', { class: 'event-time', title: e.time ?? 'no clock' }, clock(e.time)),
      h('span', { class: 'event-kind' }, KIND_LABEL[e.kind] ?? e.kind),
      h('span', { class: 'event-msg' }, e.partition ? h('a', { href: `#/partitions/${encodeURIComponent(e.partition)}` }, e.partition) : null, e.partition ? ' · ' : null, e.message),
    );
  }

  function applyFilter(): void {
    const k = filter.value;
    let shown = 0;
    for (const li of list.children as HTMLCollectionOf<HTMLElement>) {
      li.hidden = k !== '' && li.dataset.kind !== k;
      if (!li.hidden) shown += 1;
    }
    empty.hidden = shown > 0;
  }
  filter.addEventListener('change', applyFilter);

  function add(events: Event[]): void {
    for (const e of events.sort((a, b) => a.seq - b.seq)) {
      if (seen.has(e.seq)) continue;
      seen.set(e.seq, e);
      next = Math.max(next, e.seq);
      // Newest first: each new event goes on top.
      list.prepend(row(e));
    }
    while (list.children.length > KEEP) list.lastElementChild?.remove();
    applyFilter();
  }

  const stream = new AbortController();
  let poller: Poller | null = null;

  function startPolling(why: string): void {
    stream.abort();
    if (poller) return;
    setText(status, `polling every 2 s (${why})`);
    poller = poll(async (signal) => {
      try {
        const r = await api.events(next, signal);
        missing.hidden = true;
        add(r.events);
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) {
          missing.hidden = false;
          poller?.stop();
          setText(status, '');
          return;
        }
        throw e;
      }
    });
  }

  const onEvent = (data: string) => {
    try {
      add([JSON.parse(data) as Event]);
    } catch {
      // A line that is not an event: ignore it.
    }
  };

  /** Follow the stream; after a cut, reconnect from the last event seen (Last-Event-ID). */
  async function startStream(): Promise<void> {
    let opened = false;
    for (let retry = 0; !stream.signal.aborted; ) {
      try {
        await api.followEvents(next, stream.signal, () => {
          opened = true;
          retry = 0;
          setText(status, 'live (event stream)');
        }, onEvent);
      } catch (e) {
        if (stream.signal.aborted) return;
        // Never opened (404, 503: no stream here, or too many open): poll instead.
        if (!opened || e instanceof AuthCancelled) return startPolling('the event stream is not available');
      }
      if (stream.signal.aborted) return;
      setText(status, 'reconnecting…');
      retry = Math.min(retry + 1, 5);
      await new Promise((r) => setTimeout(r, 1000 * retry));
    }
  }

  // The history first (so a stream that starts at "now" loses nothing), then live.
  void api
    .events(0)
    .then((r) => {
      add(r.events);
      void startStream();
    })
    .catch((e) => {
      if (e instanceof ApiError && e.status === 404) {
        missing.hidden = false;
        setText(status, '');
      } else startPolling(String(e instanceof Error ? e.message : e));
    });

  return {
    el,
    dispose() {
      stream.abort();
      poller?.stop();
    },
  };
}
