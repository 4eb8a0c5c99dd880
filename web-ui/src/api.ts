// Typed client for the manager's REST API (/api/v1). Every type comes from
// src/gen/api-types.ts, generated from manager/api/openapi.json (the contract,
// written once): nothing about the wire format is declared here by hand.
// Reads are unauthenticated; every POST/PUT/PATCH/DELETE carries the
// operator's bearer token (asked for when missing or refused).

import { askToken, clearToken, getToken, tokenEnteredAt } from './auth';
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

async function getJson<T>(path: string, signal?: AbortSignal): Promise<T> {
  const res = await send(path, { method: 'GET', signal });
  return (await res.json()) as T;
}

/** Why the token dialog opens again after a 401. */
function rejectionReason(enteredBefore: number): string {
  // A token typed into the dialog just now vs one kept from earlier in this
  // tab (the manager may since have been given a new one).
  return tokenEnteredAt() > enteredBefore
    ? 'The manager rejected that token. Enter it again.'
    : 'The manager rejected the token kept for this tab (it may have been given a new one). Enter the current token.';
}

/**
 * Run `attempt` with the stored bearer token. A missing or rejected token
 * (401) opens the token dialog and the request is made again with what the
 * operator enters.
 */
export async function withToken<T>(attempt: (token: string) => Promise<T>): Promise<T> {
  let token = getToken();
  let reason: string | undefined;
  for (;;) {
    const before = tokenEnteredAt();
    if (token === null) {
      token = await askToken(reason);
      if (token === null) throw new AuthCancelled();
    }
    try {
      return await attempt(token);
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        reason = rejectionReason(before);
        clearToken();
        token = null;
        continue;
      }
      throw e;
    }
  }
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
    const headers: Record<string, string> = { Authorization: `Bearer ${token}` };
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
        xhr.setRequestHeader('Authorization', `Bearer ${token}`);
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
    const res = await send(apiPath('/api/v1/partitions/{name}', { name }), { method: 'GET' });
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

  consoleHistoryUrl: (name: string) => url(apiPath('/api/v1/partitions/{name}/console/history', { name })),

  resources: (signal?: AbortSignal) => getJson<Resources>(apiPath('/api/v1/resources'), signal),

  images: async (signal?: AbortSignal) => (await getJson<ImageList>(apiPath('/api/v1/images'), signal)).images,

  image: (id: string, signal?: AbortSignal) => getJson<Image>(apiPath('/api/v1/images/{id}', { id }), signal),

  fetchImage: async (body: ImageFetch) => json<Image>(await authorized(apiPath('/api/v1/images/fetch'), { method: 'POST', body })),

  deleteImage: async (id: string) => {
    await authorized(apiPath('/api/v1/images/{id}', { id }), { method: 'DELETE' });
  },

  events: (since: number, signal?: AbortSignal) => getJson<EventList>(apiPath('/api/v1/events', {}, { since }), signal),

  eventStreamUrl: () => url(apiPath('/api/v1/events/stream')),

  exportConfig: async (): Promise<Tagged<string>> => {
    const res = await send(apiPath('/api/v1/config'), { method: 'GET' });
    return { value: await res.text(), etag: res.headers.get('ETag') };
  },

  /** PUT a plan; with `dryRun` the manager only validates it and answers the diff it would apply. */
  importConfig: async (toml: string, etag: string | null, dryRun = false) =>
    json<ConfigDiff>(await authorized(apiPath('/api/v1/config', {}, dryRun ? { dry_run: 1 } : {}), { method: 'PUT', raw: toml, contentType: 'application/toml', ifMatch: etag })),
};

/**
 * Whether the manager serves a GET route at all (an older manager answers 404
 * for the routes it lacks): reads only the status line and headers.
 */
export async function serves(path: string): Promise<boolean> {
  const ctl = new AbortController();
  try {
    const res = await fetch(url(path), { cache: 'no-store', signal: ctl.signal });
    ctl.abort();
    return res.status !== 404 && res.status !== 405;
  } catch {
    return false;
  }
}
