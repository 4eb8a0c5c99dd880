// Live partition console: xterm.js fed by reading the manager's console ring from
// an offset and following `next`; keystrokes are batched and POSTed back.
// xterm.js is kept from answering terminal queries in the output
// (silenceReports), the hypervisor's boot markers (`=== pinfold: NAME boot N
// at TIME ===`) are shown in the header as "boot N at TIME" (the marker itself
// soon scrolls off under a booting kernel's log), and the whole history is
// offered as a download when the manager serves it.

import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';
import { api, ApiError, apiPath, AuthCancelled, saveBlob, serves } from './api';
import { h, setText, toast } from './dom';
import { count } from './format';

/** Wait between reads when the ring had nothing new. */
const IDLE_MS = 400;
/** Wait after a failed read before trying again. */
const RETRY_MS = 2000;
/**
 * UTF-16 units per console POST. The contract allows 4 KiB of body; one unit is
 * at most 3 bytes of UTF-8, so 1024 units stay well inside it with the JSON around.
 */
const MAX_INPUT = 1024;
/** Keystrokes typed within this window go out in one POST. */
const INPUT_BATCH_MS = 25;
/** POSTs in a row the partition may take nothing of (each after the manager's own 2 s wait) before the input is given up. */
const INPUT_STALLS = 3;

/** The hypervisor's line where a boot starts (hv::system::boot_marker). */
const BOOT_MARKER = /=== pinfold: (\S+) boot (\d+) at (\S+) ===/g;
/** Longest marker kept back across reads (a name is at most 32 bytes). */
const MARKER_TAIL = 128;

/** The last boot marker of `partition` in `text`: its boot number and time, or null. */
export function lastBootMarker(text: string, partition: string): { boot: number; at: string } | null {
  let found: { boot: number; at: string } | null = null;
  for (const m of text.matchAll(BOOT_MARKER)) if (m[1] === partition) found = { boot: Number(m[2]), at: m[3] };
  return found;
}

/** UTF-8 length of one code point. */
function utf8Len(cp: number): number {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

/**
 * The part of `sent` after its first `accepted` UTF-8 bytes. A character the
 * partition took only part of (it stopped reading inside it) cannot be resent
 * as text: the rest starts at the next character.
 */
export function unsentRest(sent: string, accepted: number): string {
  let bytes = 0;
  let i = 0;
  while (i < sent.length && bytes < accepted) {
    const cp = sent.codePointAt(i) ?? 0;
    bytes += utf8Len(cp);
    i += cp > 0xffff ? 2 : 1;
  }
  return sent.slice(i);
}

/** At most `max` UTF-16 units of `s`, not splitting a surrogate pair. */
function head(s: string, max: number): string {
  if (s.length <= max) return s;
  const code = s.charCodeAt(max - 1);
  return s.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max);
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = window.setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      window.clearTimeout(t);
      resolve();
    });
  });
}

/**
 * Stop xterm.js from answering terminal queries found in the output. It would
 * answer through onData, i.e. as console input: busybox ash asks for the
 * cursor position (ESC[6n) after every prompt, and the output being shown may
 * be minutes old (or replayed history), so the answer (`ESC[50;1R`) would
 * reach the guest as stray typing, and with no token stored it would pop the
 * token dialog by itself. Claiming the query sequences in the parser means no
 * answer is ever made, whatever the sequence; what the operator types (arrow
 * keys, function keys, pastes) is untouched.
 */
export function silenceReports(term: Terminal): void {
  const swallow = () => true;
  const p = term.parser;
  // DSR / CPR (CSI 5n, CSI 6n) and DEC DSR (CSI ? 6n ...).
  p.registerCsiHandler({ final: 'n' }, swallow);
  p.registerCsiHandler({ prefix: '?', final: 'n' }, swallow);
  // Primary, secondary and tertiary device attributes (CSI c, CSI > c, CSI = c).
  p.registerCsiHandler({ final: 'c' }, swallow);
  p.registerCsiHandler({ prefix: '>', final: 'c' }, swallow);
  p.registerCsiHandler({ prefix: '=', final: 'c' }, swallow);
  // Mode reports (DECRQM: CSI Ps $ p, CSI ? Ps $ p) and window reports (CSI t).
  p.registerCsiHandler({ intermediates: '$', final: 'p' }, swallow);
  p.registerCsiHandler({ prefix: '?', intermediates: '$', final: 'p' }, swallow);
  p.registerCsiHandler({ final: 't' }, swallow);
  // Setting requests (DECRQSS: DCS $ q ... ST).
  p.registerDcsHandler({ intermediates: '$', final: 'q' }, swallow);
  // Colour queries (OSC 4/10/11/12 with "?"); setting a colour still works.
  for (const osc of [4, 10, 11, 12]) p.registerOscHandler(osc, (data) => data.includes('?'));
}

export class ConsolePane {
  readonly el: HTMLElement;
  private readonly term: Terminal;
  private readonly fit: FitAddon;
  private readonly ctl = new AbortController();
  private readonly ro: ResizeObserver;
  private readonly status: HTMLElement;
  private readonly notice: HTMLElement;
  private readonly history: HTMLButtonElement;
  private readonly boot: HTMLElement;
  /** The end of the output read so far, so a marker split across two reads is still found. */
  private tail = '';
  private offset = 0;
  private lostTotal = 0;
  private firstRead = true;
  private input = '';
  private inputTimer = 0;
  private sending = false;

  constructor(private readonly partition: string) {
    this.status = h('span', { class: 'console-status muted', 'data-testid': 'console-status' }, 'connecting…');
    this.notice = h('div', { class: 'notice notice-warn', hidden: true, 'data-testid': 'console-dropped', role: 'status' });
    this.boot = h('span', { class: 'tag', hidden: true, 'data-testid': 'console-boot', title: 'The boot the console shows, from the hypervisor’s boot marker' });
    const screen = h('div', { class: 'console-screen', 'data-testid': 'console' });
    // The whole retained history (across restarts) as a file; shown only when
    // the manager serves it.
    // Fetched with the token and saved as a Blob (a plain link cannot send it).
    this.history = h(
      'button',
      {
        type: 'button',
        class: 'btn btn-small',
        hidden: true,
        'data-testid': 'console-history',
        title: 'Download the whole console history kept by the manager (every boot)',
        onclick: () => {
          api.consoleHistory(partition).then(
            (blob) => saveBlob(blob, `${partition}-console.log`),
            (e: unknown) => toast(`History not downloaded: ${e instanceof Error ? e.message : String(e)}`, 'error'),
          );
        },
      },
      'Download history',
    );
    void serves(apiPath('/api/v1/partitions/{name}/console/history', { name: partition })).then((ok) => (this.history.hidden = !ok));
    this.el = h(
      'section',
      { class: 'card console-card' },
      h(
        'header',
        { class: 'card-head' },
        h('h2', {}, 'Console'),
        this.status,
        this.boot,
        this.history,
        h('button', { type: 'button', class: 'btn btn-small', onclick: () => this.term.clear(), title: 'Clear the screen (the ring is untouched)' }, 'Clear'),
      ),
      this.notice,
      screen,
      h('p', { class: 'hint muted' }, 'Click the console and type to send input to the guest; sending needs the manager token.'),
    );

    this.term = new Terminal({
      convertEol: true,
      cursorBlink: true,
      scrollback: 5000,
      fontFamily: 'ui-monospace, "SFMono-Regular", "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 13,
      lineHeight: 1.15,
      theme: {
        background: '#0f172a',
        foreground: '#e2e8f0',
        cursor: '#93c5fd',
        selectionBackground: '#334155',
      },
    });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(screen);
    silenceReports(this.term);
    this.term.onData((d) => this.queueInput(d));
    this.ro = new ResizeObserver(() => this.refit());
    this.ro.observe(screen);
    void this.follow();
  }

  private refit(): void {
    try {
      this.fit.fit();
    } catch {
      // Not laid out yet (hidden or zero-sized): the next resize fits it.
    }
  }

  /** Read the ring in a loop from `offset`, always continuing at the `next` the manager gave. */
  private async follow(): Promise<void> {
    const signal = this.ctl.signal;
    while (!signal.aborted) {
      try {
        const chunk = await api.consoleRead(this.partition, this.offset, signal);
        if (chunk.dropped > 0) this.reportDropped(chunk.dropped, chunk.offset);
        if (chunk.data.length > 0) {
          this.term.write(chunk.data);
          this.noteBoot(chunk.data);
        }
        const advanced = chunk.next !== this.offset;
        this.offset = chunk.next;
        this.firstRead = false;
        setText(this.status, `following · offset ${count(this.offset)}`);
        this.status.className = 'console-status muted';
        // A full chunk means more is waiting: read again straight away.
        if (!advanced || chunk.data.length === 0) await sleep(IDLE_MS, signal);
      } catch (e) {
        if (signal.aborted) return;
        const why = e instanceof ApiError ? e.message : String(e);
        setText(this.status, `reconnecting… (${why})`);
        this.status.className = 'console-status status-error';
        await sleep(RETRY_MS, signal);
      }
    }
  }

  private noteBoot(data: string): void {
    const text = this.tail + data;
    this.tail = text.slice(-MARKER_TAIL);
    const m = lastBootMarker(text, this.partition);
    if (m === null) return;
    setText(this.boot, `boot ${m.boot} at ${m.at}`);
    this.boot.hidden = false;
  }

  private reportDropped(dropped: number, at: number): void {
    if (this.firstRead) {
      // Opening a console whose ring already wrapped is normal: say so plainly.
      setText(this.notice, `Showing output from offset ${count(at)}: ${count(dropped)} earlier bytes are no longer kept by the console buffer.`);
    } else {
      this.lostTotal += dropped;
      this.term.write(`\r\n\x1b[33m[… ${dropped} bytes dropped …]\x1b[0m\r\n`);
      setText(this.notice, `Output was lost: the console buffer was overwritten before it could be read (${count(this.lostTotal)} bytes dropped since this console was opened).`);
    }
    this.notice.hidden = false;
  }

  private queueInput(d: string): void {
    this.input += d;
    if (this.inputTimer === 0) {
      this.inputTimer = window.setTimeout(() => {
        this.inputTimer = 0;
        void this.flushInput();
      }, INPUT_BATCH_MS);
    }
  }

  private async flushInput(): Promise<void> {
    if (this.sending) return;
    this.sending = true;
    let stalls = 0;
    try {
      // One POST at a time from the front of the queue; what the partition did
      // not take goes back in front of anything typed meanwhile, so input is
      // delivered whole and in order.
      while (this.input.length > 0 && !this.ctl.signal.aborted) {
        const part = head(this.input, MAX_INPUT);
        this.input = this.input.slice(part.length);
        const reply = await api.consoleWrite(this.partition, part);
        const rest = unsentRest(part, reply.accepted);
        if (rest.length === 0) {
          stalls = 0;
          continue;
        }
        this.input = rest + this.input;
        if (reply.accepted > 0) {
          stalls = 0;
          continue;
        }
        stalls += 1;
        if (stalls >= INPUT_STALLS) {
          const lost = new TextEncoder().encode(this.input).length;
          this.input = '';
          this.term.write(`\r\n\x1b[31m[input not sent: ${this.partition} is not reading its console; ${lost} bytes dropped]\x1b[0m\r\n`);
          return;
        }
        setText(this.status, `console input full, retrying…`);
        await sleep(RETRY_MS, this.ctl.signal);
      }
    } catch (e) {
      this.input = '';
      const why = e instanceof AuthCancelled ? 'no token given' : e instanceof ApiError ? e.message : String(e);
      this.term.write(`\r\n\x1b[31m[input not sent: ${why}]\x1b[0m\r\n`);
    } finally {
      this.sending = false;
    }
  }

  dispose(): void {
    this.ctl.abort();
    window.clearTimeout(this.inputTimer);
    this.ro.disconnect();
    this.term.dispose();
  }
}
