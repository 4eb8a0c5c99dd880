// Fixed-period polling that never overlaps itself, plus the header's link status.

import { ApiError, AuthCancelled } from './api';

type LinkListener = (ok: boolean, message: string) => void;
const linkListeners = new Set<LinkListener>();

export function onLinkChange(fn: LinkListener): void {
  linkListeners.add(fn);
}

function report(ok: boolean, message: string): void {
  linkListeners.forEach((l) => l(ok, message));
}

export const POLL_MS = 2000;

export interface Poller {
  /** Stop polling and abort a read in flight. */
  stop(): void;
  /** Poll again now (or right after the read in flight), e.g. after an action. */
  kick(): void;
}

/**
 * Run `tick` now and then every `period` ms after the previous run ended, so a
 * slow manager is never asked twice at once.
 */
export function poll(tick: (signal: AbortSignal) => Promise<void>, period = POLL_MS): Poller {
  const ctl = new AbortController();
  let timer = 0;
  let running = false;
  let again = false;
  const loop = async () => {
    window.clearTimeout(timer);
    running = true;
    try {
      await tick(ctl.signal);
      report(true, 'Live');
    } catch (e) {
      if (ctl.signal.aborted) return;
      if (e instanceof ApiError && e.status === 0) report(false, 'Manager unreachable');
      else if (e instanceof ApiError) report(false, `Manager error: ${e.message}`);
      else if (e instanceof AuthCancelled) report(false, 'No token: this manager shows nothing without one (Enter token)');
      else report(false, String(e));
    } finally {
      running = false;
    }
    if (ctl.signal.aborted) return;
    const delay = again ? 0 : period;
    again = false;
    timer = window.setTimeout(() => void loop(), delay);
  };
  void loop();
  return {
    stop() {
      ctl.abort();
      window.clearTimeout(timer);
    },
    kick() {
      if (ctl.signal.aborted) return;
      if (running) again = true;
      else void loop();
    },
  };
}
