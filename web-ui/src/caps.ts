// What this manager serves. A manager older than the UI answers 404 for the
// routes it lacks; the views and buttons that need them are then hidden
// instead of failing. Probed once per page load (GETs only, headers only),
// with the token: never while signed out.

import { apiPath, serves, signedOut } from './api';

export interface Caps {
  resources: boolean;
  images: boolean;
  events: boolean;
  config: boolean;
}

let probe: Promise<Caps> | null = null;

/** Every route taken as served: what caps() says while signed out, probing nothing and keeping nothing. */
const UNPROBED: Caps = { resources: true, images: true, events: true, config: true };

export function caps(): Promise<Caps> {
  // Signed out: no probe is sent and none is kept, so the first call after
  // a sign-in probes with the token.
  if (signedOut()) return Promise.resolve(UNPROBED);
  if (probe === null) {
    probe = (async () => {
      const [resources, images, events, config] = await Promise.all([
        serves(apiPath('/api/v1/resources')),
        serves(apiPath('/api/v1/images')),
        serves(apiPath('/api/v1/events', {}, { since: 0 })),
        serves(apiPath('/api/v1/config')),
      ]);
      return { resources, images, events, config };
    })();
  }
  return probe;
}
