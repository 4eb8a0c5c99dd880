// Typed client for the manager's REST API (/api/v1, see the repo's REST contract).
// Reads are unauthenticated; every POST carries the operator's bearer token.

import { askToken, clearToken, getToken } from './auth';

export type PartitionState = 'stopped' | 'running' | 'stopping';
export type VcpuState = 'on' | 'off' | 'on_pending';
export type Action = 'start' | 'stop' | 'restart';

export interface HostCpu {
  cpu: number;
  partition: string | null;
}

export interface Host {
  version: string;
  abi_version: string;
  gic_version: number;
  cpu_count: number;
  ram_bytes: number;
  uptime_ms: number;
  cpus: HostCpu[];
}

export interface PartitionSummary {
  name: string;
  state: PartitionState;
  cpus: number[];
  ram_bytes: number;
  uptime_ms: number;
  boot_count: number;
  management: boolean;
}

/** Trap exit counts by class, as the hypervisor classifies them. */
export interface ExitCounts {
  mmio: number;
  sysreg: number;
  hvc: number;
  irq: number;
  abort: number;
  other: number;
}

export const EXIT_CLASSES: readonly (keyof ExitCounts)[] = [
  'mmio',
  'sysreg',
  'hvc',
  'irq',
  'abort',
  'other',
];

export interface Vcpu {
  vcpu: number;
  cpu: number;
  state: VcpuState;
  exits: ExitCounts;
  injected: number;
}

export interface PartitionDetail extends PartitionSummary {
  faults: number;
  vcpus: Vcpu[];
}

export interface ConsoleChunk {
  offset: number;
  next: number;
  dropped: number;
  data: string;
}

/** An error answer from the manager ({"error","detail"}) or a transport failure. */
export class ApiError extends Error {
  constructor(
    /** HTTP status, or 0 when the request never got an answer. */
    readonly status: number,
    /** The contract's short code (e.g. "conflict"), or "network". */
    readonly code: string,
    detail: string,
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

const BASE = 'api/v1';

/** Resolve API paths against the page's own origin root, where the manager serves both. */
function url(path: string): string {
  return new URL(`/${BASE}/${path}`, window.location.origin).toString();
}

async function decodeError(res: Response): Promise<ApiError> {
  let code = `http_${res.status}`;
  let detail = `${res.status} ${res.statusText}`;
  try {
    const body = (await res.json()) as { error?: unknown; detail?: unknown };
    if (typeof body.error === 'string') code = body.error;
    if (typeof body.detail === 'string') detail = body.detail;
  } catch {
    // Not JSON (a proxy page, say): keep the status line as the detail.
  }
  return new ApiError(res.status, code, detail);
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

/**
 * POST with the stored bearer token. A missing or rejected token (401) opens the
 * token dialog and the request is sent again with what the operator enters.
 */
async function postAuthorized<T>(path: string, body: unknown): Promise<T> {
  let token = getToken();
  let reason: string | undefined;
  for (;;) {
    if (token === null) {
      token = await askToken(reason);
      if (token === null) throw new AuthCancelled();
    }
    try {
      const res = await send(path, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
        body: JSON.stringify(body ?? {}),
      });
      return (await res.json()) as T;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        clearToken();
        token = null;
        reason = 'The manager rejected that token. Enter it again.';
        continue;
      }
      throw e;
    }
  }
}

const enc = encodeURIComponent;

/** A console POST's reply: the first `accepted` UTF-8 bytes of `data` were delivered; `remaining` were not (send them again). */
export interface ConsoleAccepted {
  accepted: number;
  remaining?: number;
}

export const api = {
  host: (signal?: AbortSignal) => getJson<Host>('host', signal),

  partitions: async (signal?: AbortSignal) =>
    (await getJson<{ partitions: PartitionSummary[] }>('partitions', signal)).partitions,

  partition: (name: string, signal?: AbortSignal) =>
    getJson<PartitionDetail>(`partitions/${enc(name)}`, signal),

  action: (name: string, action: Action) =>
    postAuthorized<{ name: string; state: PartitionState }>(
      `partitions/${enc(name)}/${action}`,
      {},
    ),

  consoleRead: (name: string, offset: number, signal?: AbortSignal) =>
    getJson<ConsoleChunk>(`partitions/${enc(name)}/console?offset=${offset}`, signal),

  consoleWrite: (name: string, data: string) =>
    postAuthorized<ConsoleAccepted>(`partitions/${enc(name)}/console`, { data }),
};
