// Typed client for the manager's REST API (/api/v1). Every type comes from
// src/gen/api-types.ts, generated from manager/api/openapi.json (the contract,
// written once): nothing about the wire format is declared here by hand.
// Every request carries the bearer token kept for the tab (reads need a
// viewer's, changes the operator's; docs/API.md). The page signs in before
// any view reads (signIn); a 401 later opens one token dialog that every
// refused request waits for. The event stream and the console-history
// download are fetch()es too (an EventSource or a plain link cannot send the
// header).

import { askToken, clearToken, getToken, lastEnteredToken } from './auth';
import type {
  Accepted,
  ApiPath,
  ConfigDiff,
  ConsoleChunk,
  Error as ErrorBody,
  Event,
  EventList,
  Exits,
  Host,
  Image,
  ImageFetch,
  ImageKind,
  ImageList,
  Partition,
  PartitionCreate,
  PartitionDetail,
  PartitionList,
  PartitionPatch,
  PartitionState,
  Resources,
  TransitionResult,
} from './gen/api-types';

export type {
  Accepted,
  ConfigDiff,
  ConsoleChunk,
  Event,
  Exits,
  Host,
  Image,
  ImageKind,
  Partition,
  PartitionCreate,
  PartitionDetail,
  PartitionPatch,
  PartitionState,
  Resources,
};
export type { PartitionConfig, Vcpu, MemoryRange, DeviceOwner, Crash } from './gen/api-types';

/** What the list and the page have in common. */
export type PartitionSummary = Partition;
export type Action = 'start' | 'stop' | 'restart' | 'shutdown';

export const EXIT_CLASSES: readonly (keyof Exits)[] = ['mmio', 'sysreg', 'hvc', 'irq', 'abort', 'other'];

/** An error answer from the manager ({"error","detail","field"?}) or a transport failure. */
export class ApiError extends Error {
  constructor(
    /** HTTP status, or 0 when the request never got an answer. */
    readonly status: number,
    /** The contract's short code (e.g. "conflict"), or "network". */
    readonly code: string,
    detail: string,
    /** The plan field at fault (e.g. "cpus"), when the manager named one. */
    readonly field: string | null = null,
  ) {
    super(detail);
    this.name = 'ApiError';
  }

}

/** The operator dismissed the token dialog, so the action was not sent. */
export class AuthCancelled extends Error {
  constructor() {
    super('No token given; nothing was sent.');
    this.name = 'AuthCancelled';
  }
}

type Params = Record<string, string | number>;

/** A contract path with its `{name}`/`{id}` filled in (percent-encoded). */
export function apiPath(template: ApiPath, params: Params = {}, query: Params = {}): string {
  const path = template.replace(/\{(\w+)\}/g, (_, k: string) => encodeURIComponent(String(params[k])));
  const q = new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)])).toString();
  return q ? `${path}?${q}` : path;
}

/** Resolve API paths against the page's own origin root, where the manager serves both. */
export function url(path: string): string {
  return new URL(path, window.location.origin).toString();
}

async function decodeError(res: Response): Promise<ApiError> {
  let code = `http_${res.status}`;
  let detail = `${res.status} ${res.statusText}`;
  let field: string | null = null;
  try {
    const body = (await res.json()) as Partial<ErrorBody>;
    if (typeof body.error === 'string') code = body.error;
    if (typeof body.detail === 'string') detail = body.detail;
    if (typeof body.field === 'string') field = body.field;
  } catch {
    // Not JSON (a proxy page, say): keep the status line as the detail.
  }
  return new ApiError(res.status, code, detail, field);
}

async function send(path: string, init: RequestInit): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(url(path), { cache: 'no-store', ...init });
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'The manager did not answer.');
  }
  if (!res.ok) throw await decodeError(res);
  return res;
}

/**
 * Signed out: the operator cancelled the sign-in or forgot the token. Reads
 * are then not sent at all (no dialog, no 401 every poll) until a token is
 * accepted again (signIn); a change still asks.
 */
let declined = false;

/** Whether the operator is signed out (reads and route probes are not sent). */
export function signedOut(): boolean {
  return declined;
}

/** What a request is: a view's read, a change, or the sign-in probe (which asks even when signed out). */
type Kind = 'read' | 'change' | 'signin';

/** The Authorization header for `token` (none without one). */
function bearer(token: string | null): Record<string, string> {
  return token === null ? {} : { Authorization: `Bearer ${token}` };
}

/** What the dialog says after `failed` (null: nothing was sent) was refused, and whether as an error. */
function askReason(failed: string | null, kind: Kind): [string | undefined, boolean] {
  if (failed === null) {
    // Never "rejected" when no token was given yet.
    return kind === 'change' ? [undefined, false] : ['This manager shows nothing without a token: enter a viewer’s or the operator’s token. It is kept for this browser tab only.', false];
  }
  return failed === lastEnteredToken()
    ? ['The manager rejected that token. Check it and enter it again.', true]
    : ['The manager rejected the token kept for this tab (it may have been rotated or revoked). Enter the current token.', true];
}

/**
 * The token to try after `failed` (null: none was sent) met a 401. Every
 * request refused at the same time shares one dialog (askToken), and one that
 * finds a newer token already stored just retries with it, so a stale token
 * is asked about once, not once per background read.
 */
async function replacement(failed: string | null, kind: Kind): Promise<string> {
  const now = getToken();
  if (now !== null && now !== failed) return now;
  if (now !== null) clearToken();
  if (kind === 'read' && declined) throw new AuthCancelled();
  const [reason, isError] = askReason(failed, kind);
  const token = await askToken(reason, isError);
  if (token === null) {
    if (kind !== 'change') declined = true;
    throw new AuthCancelled();
  }
  return token;
}

/**
 * Run `attempt` with the stored bearer token (a read without one is tried as
 * is: a manager may serve reads openly). A 401 opens the token dialog (once
 * for every request refused meanwhile) and the request is made again with
 * what the operator enters; cancelling throws AuthCancelled.
 */
export async function withToken<T>(attempt: (token: string | null) => Promise<T>, kind: Kind = 'change'): Promise<T> {
  if (kind === 'read' && declined) throw new AuthCancelled();
  let token = getToken();
  if (token === null && kind === 'change') token = await replacement(null, kind);
  for (;;) {
    try {
      const result = await attempt(token);
      if (kind === 'signin') declined = false;
      return result;
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) throw e;
      token = await replacement(token, kind);
    }
  }
}

/** A GET with the stored token: reads need a viewer's credential (docs/API.md). */
async function getAuthorized(path: string, signal?: AbortSignal, headers: Record<string, string> = {}, kind: Kind = 'read'): Promise<Response> {
  return withToken((token) => send(path, { method: 'GET', signal, headers: { ...headers, ...bearer(token) } }), kind);
}

async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await getAuthorized(path, signal);
  return (await res.json()) as T;
}

/**
 * Sign in before any view reads: one GET, and when the manager answers 401,
 * the token dialog (once), again until a token is accepted or the operator
 * cancels. Resolves false when cancelled (signed out: the views' reads are
 * not sent, the header's "Enter token" signs in again).
 */
export async function signIn(): Promise<boolean> {
  try {
    await getAuthorized(apiPath('/api/v1/partitions'), undefined, {}, 'signin');
    return true;
  } catch (e) {
    if (e instanceof AuthCancelled) return false;
    return true; // not an auth problem (the views and the link status show it)
  }
}

/** The header's "Enter token": ask now, then sign in with it (a refused one is asked again, as rejected). */
export async function enterToken(): Promise<boolean> {
  if ((await askToken()) === null) return false;
  return signIn();
}

/** The header's "Forget token": drop it and sign out (reads stop until a token is entered). */
export function forgetToken(): void {
  declined = true;
  clearToken();
}

interface Authorized {
  method: 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  body?: unknown;
  /** Sent as is (e.g. TOML) instead of JSON. */
  raw?: string;
  contentType?: string;
  ifMatch?: string | null;
}

async function authorized(path: string, req: Authorized): Promise<Response> {
  return withToken((token) => {
    const headers: Record<string, string> = bearer(token);
    let body: string | undefined;
    if (req.raw !== undefined) {
      body = req.raw;
      headers['Content-Type'] = req.contentType ?? 'text/plain';
    } else if (req.method !== 'DELETE') {
      body = JSON.stringify(req.body ?? {});
      headers['Content-Type'] = 'application/json';
    }
    if (req.ifMatch) headers['If-Match'] = req.ifMatch;
    return send(path, { method: req.method, headers, body });
  });
}

async function json<T>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

/** Upload progress: bytes the browser sent, and (when known) bytes the manager took. */
export interface UploadProgress {
  sent: number;
  total: number;
}

/**
 * POST a file's bytes to /api/v1/images with upload progress (XMLHttpRequest:
 * fetch has no upload progress). Resolves with the stored image.
 */
export function uploadImage(file: Blob, kind: ImageKind, name: string, sha256: string | null, onProgress: (p: UploadProgress) => void): Promise<Image> {
  const query: Params = { kind, name };
  if (sha256) query.sha256 = sha256;
  const path = apiPath('/api/v1/images', {}, query);
  return withToken(
    (token) =>
      new Promise<Image>((resolve, reject) => {
        const xhr = new XMLHttpRequest();
        xhr.open('POST', url(path));
        if (token !== null) xhr.setRequestHeader('Authorization', `Bearer ${token}`);
        xhr.setRequestHeader('Content-Type', 'application/octet-stream');
        xhr.upload.onprogress = (e) => onProgress({ sent: e.loaded, total: e.lengthComputable ? e.total : file.size });
        xhr.onerror = () => reject(new ApiError(0, 'network', 'The upload was cut off: the manager did not answer.'));
        xhr.onload = () => {
          let body: Partial<ErrorBody> & Partial<Image> = {};
          try {
            body = JSON.parse(xhr.responseText) as typeof body;
          } catch {
            // keep the status line below
          }
          if (xhr.status >= 200 && xhr.status < 300) resolve(body as Image);
          else reject(new ApiError(xhr.status, body.error ?? `http_${xhr.status}`, body.detail ?? `${xhr.status} ${xhr.statusText}`, body.field ?? null));
        };
        xhr.send(file);
      }),
  );
}

/** A partition with the ETag of its config (for If-Match). */
export interface Tagged<T> {
  value: T;
  etag: string | null;
}

export const api = {
  host: (signal?: AbortSignal) => getJson<Host>(apiPath('/api/v1/host'), signal),

  partitions: async (signal?: AbortSignal) => (await getJson<PartitionList>(apiPath('/api/v1/partitions'), signal)).partitions,

  partition: (name: string, signal?: AbortSignal) => getJson<PartitionDetail>(apiPath('/api/v1/partitions/{name}', { name }), signal),

  partitionTagged: async (name: string): Promise<Tagged<PartitionDetail>> => {
    const res = await getAuthorized(apiPath('/api/v1/partitions/{name}', { name }));
    return { value: await json<PartitionDetail>(res), etag: res.headers.get('ETag') };
  },

  action: async (name: string, action: Action) => {
    const tpl = ({
      start: '/api/v1/partitions/{name}/start',
      stop: '/api/v1/partitions/{name}/stop',
      restart: '/api/v1/partitions/{name}/restart',
      shutdown: '/api/v1/partitions/{name}/shutdown',
    } as const)[action];
    return json<TransitionResult>(await authorized(apiPath(tpl, { name }), { method: 'POST', body: {} }));
  },

  createPartition: async (body: PartitionCreate) => json<Partition>(await authorized(apiPath('/api/v1/partitions'), { method: 'POST', body })),

  updatePartition: async (name: string, body: PartitionPatch, etag: string | null) =>
    json<Partition>(await authorized(apiPath('/api/v1/partitions/{name}', { name }), { method: 'PATCH', body, ifMatch: etag })),

  deletePartition: async (name: string, etag: string | null) => {
    await authorized(apiPath('/api/v1/partitions/{name}', { name }), { method: 'DELETE', ifMatch: etag });
  },

  consoleRead: (name: string, offset: number, signal?: AbortSignal) =>
    getJson<ConsoleChunk>(apiPath('/api/v1/partitions/{name}/console', { name }, { offset }), signal),

  consoleWrite: async (name: string, data: string) =>
    json<Accepted>(await authorized(apiPath('/api/v1/partitions/{name}/console', { name }), { method: 'POST', body: { data } })),

  /** The whole console history as a Blob (fetched with the token; a plain link could not send it). */
  consoleHistory: async (name: string) => (await getAuthorized(apiPath('/api/v1/partitions/{name}/console/history', { name }))).blob(),

  resources: (signal?: AbortSignal) => getJson<Resources>(apiPath('/api/v1/resources'), signal),

  images: async (signal?: AbortSignal) => (await getJson<ImageList>(apiPath('/api/v1/images'), signal)).images,

  image: (id: string, signal?: AbortSignal) => getJson<Image>(apiPath('/api/v1/images/{id}', { id }), signal),

  fetchImage: async (body: ImageFetch) => json<Image>(await authorized(apiPath('/api/v1/images/fetch'), { method: 'POST', body })),

  deleteImage: async (id: string) => {
    await authorized(apiPath('/api/v1/images/{id}', { id }), { method: 'DELETE' });
  },

  events: (since: number, signal?: AbortSignal) => getJson<EventList>(apiPath('/api/v1/events', {}, { since }), signal),

  /**
   * Follow the Server-Sent Events stream after event `lastSeq` (Last-Event-ID),
   * calling `onOpen` once answered and `onEvent` with each event's data.
   * Resolves when the manager ends the stream; rejects on a refusal (e.g.
   * 404, 503) or a cut. A fetch() reader, not EventSource: it sends the token.
   */
  followEvents: async (lastSeq: number, signal: AbortSignal, onOpen: () => void, onEvent: (data: string) => void): Promise<void> => {
    const res = await getAuthorized(apiPath('/api/v1/events/stream'), signal, { Accept: 'text/event-stream', 'Last-Event-ID': String(lastSeq) });
    if (res.body === null) throw new ApiError(0, 'network', 'The event stream has no body.');
    onOpen();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = sseParser(onEvent);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser(value);
    }
  },

  exportConfig: async (): Promise<Tagged<string>> => {
    const res = await getAuthorized(apiPath('/api/v1/config'));
    return { value: await res.text(), etag: res.headers.get('ETag') };
  },

  /** PUT a plan; with `dryRun` the manager only validates it and answers the diff it would apply. */
  importConfig: async (toml: string, etag: string | null, dryRun = false) =>
    json<ConfigDiff>(await authorized(apiPath('/api/v1/config', {}, dryRun ? { dry_run: 1 } : {}), { method: 'PUT', raw: toml, contentType: 'application/toml', ifMatch: etag })),
};

/**
 * A Server-Sent Events parser fed text as it arrives: calls `onData` with
 * each event's data lines joined (comments, `id:`, `event:` and `retry:`
 * lines are not needed: the data is the Event JSON with its seq and kind).
 */
export function sseParser(onData: (data: string) => void): (chunk: string) => void {
  let buf = '';
  let data: string[] = [];
  return (chunk) => {
    buf += chunk;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line === '') {
        if (data.length > 0) onData(data.join('\n'));
        data = [];
      } else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
  };
}

/** Save `blob` as a file named `name` (the browser's download). */
export function saveBlob(blob: Blob, name: string): void {
  const href = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = href;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 10_000);
}

/**
 * Whether the manager serves a GET route at all (an older manager answers 404
 * for the routes it lacks): reads only the status line and headers.
 */
export async function serves(path: string): Promise<boolean> {
  // Signed out: nothing is sent (a probe without a token is only a 401,
  // counted against this client by the manager's failed-credential
  // throttle); the route is taken as served until a signed-in read says.
  if (declined) return true;
  const ctl = new AbortController();
  try {
    const res = await fetch(url(path), { cache: 'no-store', signal: ctl.signal, headers: bearer(getToken()) });
    ctl.abort();
    return res.status !== 404 && res.status !== 405;
  } catch {
    return false;
  }
}
