// Mock Pinfold manager for UI development and the browser test: the REST contract
// (/api/v1, /metrics) over plain node:http, with simulated partitions mgmt, alpha
// and beta, and the built UI served from web-ui/dist.
//
//   node tests/mock-server.mjs            # http://127.0.0.1:8080, token "test-token"
//   PORT=0 node tests/mock-server.mjs     # any free port (printed)
//
// Mock-only extra, absent from the real manager: POST /mock/flood?partition=NAME&bytes=N
// writes N bytes into a console ring, to make readers see `dropped` > 0.

import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const MOCK_TOKEN = 'test-token';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const DEFAULT_DIST = resolve(HERE, '..', 'dist');

/** Console ring size: small enough that /mock/flood can overrun it quickly. */
const RING_BYTES = 32 * 1024;
/** The contract's cap on one console read. */
const READ_MAX = 16 * 1024;
/** Most bytes of one console POST the mock takes (the rest is `remaining`). */
const MOCK_INPUT_PER_POST = 16;
/** The contract's cap on one console write body. */
const WRITE_MAX = 4 * 1024;
/** Time a partition spends in "stopping". */
const STOP_MS = 700;

const MiB = 1024 * 1024;
const EXIT_CLASSES = ['mmio', 'sysreg', 'hvc', 'irq', 'abort', 'other'];

/** A console byte ring addressed by absolute offsets, as the manager's is. */
class ConsoleRing {
  constructor(capacity) {
    this.capacity = capacity;
    this.buf = Buffer.alloc(0);
    this.base = 0; // absolute offset of buf[0]
  }
  get head() {
    return this.base + this.buf.length;
  }
  write(text) {
    this.buf = Buffer.concat([this.buf, Buffer.from(text, 'utf8')]);
    const over = this.buf.length - this.capacity;
    if (over > 0) {
      this.buf = this.buf.subarray(over);
      this.base += over;
    }
  }
  read(offset) {
    let start = offset;
    let dropped = 0;
    if (start < this.base) {
      dropped = this.base - start;
      start = this.base;
    }
    if (start > this.head) start = this.head;
    const from = start - this.base;
    const bytes = this.buf.subarray(from, Math.min(this.buf.length, from + READ_MAX));
    return { offset: start, next: start + bytes.length, dropped, data: bytes.toString('utf8') };
  }
}

function makePartition(name, cpus, ramBytes, management) {
  return {
    name,
    cpus,
    ram_bytes: ramBytes,
    management,
    state: 'stopped',
    boot_count: 0,
    bootedAt: 0,
    faults: 0,
    line: '',
    timers: new Set(),
    console: new ConsoleRing(RING_BYTES),
    vcpus: cpus.map((cpu, vcpu) => ({ vcpu, cpu, state: 'off', exits: zeroExits(), injected: 0 })),
  };
}

function zeroExits() {
  return Object.fromEntries(EXIT_CLASSES.map((c) => [c, 0]));
}

export function createMock({ dist = DEFAULT_DIST, token = MOCK_TOKEN } = {}) {
  const startedAt = Date.now();
  const parts = [
    makePartition('mgmt', [0], 256 * MiB, true),
    makePartition('alpha', [1], 256 * MiB, false),
    makePartition('beta', [2, 3], 512 * MiB, false),
  ];
  const byName = new Map(parts.map((p) => [p.name, p]));

  const later = (p, ms, fn) => {
    const t = setTimeout(() => {
      p.timers.delete(t);
      fn();
    }, ms);
    p.timers.add(t);
  };
  const cancelTimers = (p) => {
    p.timers.forEach((t) => clearTimeout(t));
    p.timers.clear();
  };

  const stamp = (p) => {
    const s = p.state === 'running' ? (Date.now() - p.bootedAt) / 1000 : 0;
    return `[${s.toFixed(6).padStart(12)}]`;
  };

  function boot(p) {
    cancelTimers(p);
    p.state = 'running';
    p.boot_count += 1;
    p.bootedAt = Date.now();
    p.line = '';
    p.vcpus.forEach((v, i) => {
      v.state = i === 0 ? 'on' : 'on_pending';
      v.exits = zeroExits();
      v.injected = 0;
    });
    const c = p.console;
    if (p.management) {
      c.write(`Hermit unikernel, pinfold-manager 0.1.0 on CPU ${p.cpus[0]}\r\n`);
      c.write('[INFO ] net: virtio-net up, 10.0.2.15/24\r\n');
      c.write('[INFO ] manager: REST API listening on 0.0.0.0:8080\r\n');
      return;
    }
    c.write(`\r\nPinfold: booting partition ${p.name} (boot #${p.boot_count}) on CPU ${p.cpus.join(',')}\r\n`);
    const lines = [
      'Booting Linux on physical CPU 0x0000000000 [0x410fd083]',
      `Linux version 6.6.0-pinfold (builder@pinfold) #1 SMP PREEMPT aarch64`,
      'Machine model: linux,dummy-virt',
      'psci: PSCIv1.1 detected in firmware.',
      `Memory: ${p.ram_bytes / MiB - 22}M/${p.ram_bytes / MiB}M available`,
      'GICv3: 256 SPIs implemented',
      'arch_timer: cp15 timer(s) running at 62.50MHz (virt).',
      ...p.cpus.slice(1).map((_, i) => `CPU${i + 1}: Booted secondary processor 0x000000000${i + 1}`),
      `smp: Brought up 1 node, ${p.cpus.length} CPU${p.cpus.length > 1 ? 's' : ''}`,
      'Serial: AMBA PL011 UART driver',
      '9000000.pl011: ttyAMA0 at MMIO 0x9000000 (irq = 13) is a PL011 rev1',
      'Freeing unused kernel memory: 1024K',
      'Run /init as init process',
    ];
    lines.forEach((l, i) =>
      later(p, 60 * (i + 1), () => {
        if (i === 7) p.vcpus.forEach((v) => (v.state = 'on'));
        c.write(`${stamp(p)} ${l}\r\n`);
      }),
    );
    later(p, 60 * (lines.length + 2), () => {
      p.vcpus.forEach((v) => (v.state = 'on'));
      c.write(`PINFOLD-GUEST-UP ${p.name} boot=${p.boot_count}\r\n\r\nWelcome to the ${p.name} test guest. Type "help".\r\n# \x1b[6n`);
    });
  }

  function stop(p, then) {
    cancelTimers(p);
    p.state = 'stopping';
    p.console.write(`\r\n${stamp(p)} reboot: Power down\r\n`);
    later(p, STOP_MS, () => {
      p.state = 'stopped';
      p.vcpus.forEach((v) => (v.state = 'off'));
      p.console.write(`Pinfold: partition ${p.name} stopped\r\n`);
      then?.();
    });
  }

  // A tiny line discipline, so typing in the UI's console gets an echo and an answer.
  function input(p, data) {
    for (const ch of data) {
      if (ch === '\r' || ch === '\n') {
        const cmd = p.line.trim();
        p.line = '';
        p.console.write('\r\n' + runCommand(p, cmd) + '# \x1b[6n');
      } else if (ch === '\x7f' || ch === '\b') {
        if (p.line.length > 0) {
          p.line = p.line.slice(0, -1);
          p.console.write('\b \b');
        }
      } else if (ch >= ' ') {
        p.line += ch;
        p.console.write(ch);
      }
    }
  }

  function runCommand(p, cmd) {
    const [name, ...args] = cmd.split(/\s+/);
    switch (name) {
      case '':
        return '';
      case 'help':
        return 'commands: help, uname, uptime, nproc, echo\r\n';
      case 'uname':
        return `Linux ${p.name} 6.6.0-pinfold #1 SMP PREEMPT aarch64 GNU/Linux\r\n`;
      case 'uptime':
        return `up ${Math.floor((Date.now() - p.bootedAt) / 1000)} s\r\n`;
      case 'nproc':
        return `${p.cpus.length}\r\n`;
      case 'echo':
        return `${args.join(' ')}\r\n`;
      default:
        return `sh: ${name}: not found\r\n`;
    }
  }

  // Counters grow at plausible rates with some wobble, so the charts have shape.
  let tick = 0;
  const counterTimer = setInterval(() => {
    tick += 1;
    for (const p of parts) {
      if (p.state !== 'running') continue;
      p.vcpus.forEach((v, i) => {
        if (v.state !== 'on') return;
        const wobble = 1 + 0.35 * Math.sin((tick + i * 7 + p.name.length * 3) / 9);
        const irq = Math.round(62 * wobble + (i === 0 ? 8 : 0));
        v.exits.irq += irq;
        v.exits.mmio += Math.round((p.name === 'beta' ? 9 : 4) * wobble * wobble);
        v.exits.sysreg += tick % 2 === i % 2 ? 2 : 1;
        v.exits.hvc += tick % 8 === 0 ? 1 : 0;
        v.exits.other += tick % 13 === 0 ? 1 : 0;
        v.injected += irq - (tick % 5 === 0 ? 1 : 0);
      });
      if (!p.management && tick % 40 === 0) {
        p.console.write(`\r\n${stamp(p)} pinfold-test: heartbeat ${tick / 40}\r\n# ${p.line}`);
      }
    }
  }, 250);

  parts.forEach((p) => boot(p));

  const summary = (p) => ({
    name: p.name,
    state: p.state,
    cpus: p.cpus,
    ram_bytes: p.ram_bytes,
    uptime_ms: p.state === 'stopped' ? 0 : Date.now() - p.bootedAt,
    boot_count: p.boot_count,
    management: p.management,
  });

  const detail = (p) => ({
    ...summary(p),
    faults: p.faults,
    vcpus: p.vcpus.map((v) => ({ vcpu: v.vcpu, cpu: v.cpu, state: v.state, exits: { ...v.exits }, injected: v.injected })),
  });

  const hostDoc = () => ({
    version: '0.1.0',
    abi_version: '1.0',
    gic_version: 3,
    cpu_count: 4,
    ram_bytes: 2048 * MiB,
    uptime_ms: Date.now() - startedAt,
    cpus: [0, 1, 2, 3].map((cpu) => ({ cpu, partition: parts.find((p) => p.cpus.includes(cpu))?.name ?? null })),
  });

  function metrics() {
    const out = [
      '# HELP pinfold_partition_state Partition state (0 stopped, 1 running, 2 stopping).',
      '# TYPE pinfold_partition_state gauge',
    ];
    const code = { stopped: 0, running: 1, stopping: 2 };
    for (const p of parts) out.push(`pinfold_partition_state{partition="${p.name}"} ${code[p.state]}`);
    out.push('# HELP pinfold_partition_uptime_seconds Time since the partition last booted.', '# TYPE pinfold_partition_uptime_seconds gauge');
    for (const p of parts) out.push(`pinfold_partition_uptime_seconds{partition="${p.name}"} ${(summary(p).uptime_ms / 1000).toFixed(1)}`);
    out.push('# HELP pinfold_vcpu_exits_total Traps to the hypervisor by class.', '# TYPE pinfold_vcpu_exits_total counter');
    for (const p of parts)
      for (const v of p.vcpus)
        for (const c of EXIT_CLASSES) out.push(`pinfold_vcpu_exits_total{partition="${p.name}",vcpu="${v.vcpu}",class="${c}"} ${v.exits[c]}`);
    out.push('# HELP pinfold_vcpu_injected_total Virtual interrupts injected.', '# TYPE pinfold_vcpu_injected_total counter');
    for (const p of parts) for (const v of p.vcpus) out.push(`pinfold_vcpu_injected_total{partition="${p.name}",vcpu="${v.vcpu}"} ${v.injected}`);
    return out.join('\n') + '\n';
  }

  const openapi = {
    openapi: '3.0.3',
    info: { title: 'Pinfold manager (mock)', version: '0.1.0' },
    paths: Object.fromEntries(
      [
        '/api/v1/host',
        '/api/v1/partitions',
        '/api/v1/partitions/{name}',
        '/api/v1/partitions/{name}/start',
        '/api/v1/partitions/{name}/stop',
        '/api/v1/partitions/{name}/restart',
        '/api/v1/partitions/{name}/console',
        '/metrics',
      ].map((p) => [p, {}]),
    ),
  };

  const send = (res, status, body, type = 'application/json') => {
    const text = type === 'application/json' ? JSON.stringify(body) : body;
    res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store', 'Content-Length': Buffer.byteLength(text) });
    res.end(text);
  };
  const fail = (res, status, error, detail) => send(res, status, { error, detail });

  const readBody = (req) =>
    new Promise((ok, bad) => {
      const chunks = [];
      let size = 0;
      req.on('data', (c) => {
        size += c.length;
        if (size <= WRITE_MAX + 1024) chunks.push(c);
      });
      req.on('end', () => ok({ size, text: Buffer.concat(chunks).toString('utf8') }));
      req.on('error', bad);
    });

  const authorized = (req) => req.headers.authorization === `Bearer ${token}`;

  async function api(req, res, url) {
    const path = url.pathname;
    const method = req.method ?? 'GET';
    const only = (m) => {
      if (method === m) return true;
      fail(res, 405, 'method_not_allowed', `${method} is not allowed on ${path}`);
      return false;
    };

    if (path === '/api/v1/host') return only('GET') && send(res, 200, hostDoc());
    if (path === '/api/v1/partitions') return only('GET') && send(res, 200, { partitions: parts.map(summary) });
    if (path === '/api/v1/openapi.json') return only('GET') && send(res, 200, openapi);

    const m = /^\/api\/v1\/partitions\/([^/]+)(?:\/(start|stop|restart|console))?$/.exec(path);
    if (m === null) return fail(res, 404, 'not_found', `no such resource: ${path}`);
    const p = byName.get(decodeURIComponent(m[1]));
    const sub = m[2];

    if (sub === undefined) {
      if (!only('GET')) return;
      return p ? send(res, 200, detail(p)) : fail(res, 404, 'not_found', `no partition named ${m[1]}`);
    }

    if (sub === 'console' && method === 'GET') {
      if (!p) return fail(res, 404, 'not_found', `no partition named ${m[1]}`);
      const raw = url.searchParams.get('offset') ?? '0';
      if (!/^\d+$/.test(raw)) return fail(res, 400, 'bad_request', 'offset must be a non-negative integer');
      return send(res, 200, p.console.read(Number(raw)));
    }

    if (!only('POST')) return;
    const body = await readBody(req);
    if (!authorized(req)) return fail(res, 401, 'unauthorized', 'a valid bearer token is required');
    if (!p) return fail(res, 404, 'not_found', `no partition named ${m[1]}`);

    if (sub === 'console') {
      if (body.size > WRITE_MAX) return fail(res, 413, 'too_large', `console input is limited to ${WRITE_MAX} bytes`);
      let data;
      try {
        data = JSON.parse(body.text).data;
      } catch {
        return fail(res, 400, 'bad_request', 'body must be JSON {"data": "..."}');
      }
      if (typeof data !== 'string') return fail(res, 400, 'bad_request', 'data must be a string');
      // Like a guest's small input queue, the mock takes at most
      // MOCK_INPUT_PER_POST bytes (whole characters) of each POST and says
      // so, so the UI's resending of the rest is exercised.
      let taken = '';
      for (const ch of data) {
        if (Buffer.byteLength(taken + ch) > MOCK_INPUT_PER_POST) break;
        taken += ch;
      }
      if (p.state === 'running') input(p, taken);
      const accepted = Buffer.byteLength(taken);
      return send(res, 202, { accepted, remaining: Buffer.byteLength(data) - accepted });
    }

    if (p.management) return fail(res, 409, 'conflict', 'the management partition cannot be controlled from itself');
    if (sub === 'start') {
      if (p.state !== 'stopped') return fail(res, 409, 'conflict', `${p.name} is ${p.state}`);
      boot(p);
    } else if (sub === 'stop') {
      if (p.state !== 'running') return fail(res, 409, 'conflict', `${p.name} is ${p.state}`);
      stop(p);
    } else {
      if (p.state === 'stopping') return fail(res, 409, 'conflict', `${p.name} is stopping`);
      if (p.state === 'stopped') boot(p);
      else stop(p, () => boot(p));
    }
    return send(res, 202, { name: p.name, state: p.state });
  }

  const TYPES = {
    '.html': 'text/html; charset=utf-8',
    '.js': 'text/javascript; charset=utf-8',
    '.css': 'text/css; charset=utf-8',
    '.svg': 'image/svg+xml',
    '.png': 'image/png',
    '.ico': 'image/x-icon',
    '.json': 'application/json',
    '.woff2': 'font/woff2',
  };

  async function staticFile(req, res, url) {
    if (req.method !== 'GET' && req.method !== 'HEAD') return fail(res, 405, 'method_not_allowed', 'static files are read-only');
    const rel = normalize(decodeURIComponent(url.pathname === '/' ? '/index.html' : url.pathname));
    const file = join(dist, rel);
    if (!file.startsWith(dist + sep)) return fail(res, 404, 'not_found', 'outside the UI');
    try {
      if (!(await stat(file)).isFile()) throw new Error('not a file');
      const body = await readFile(file);
      res.writeHead(200, { 'Content-Type': TYPES[extname(file)] ?? 'application/octet-stream', 'Content-Length': body.length });
      res.end(req.method === 'HEAD' ? undefined : body);
    } catch {
      fail(res, 404, 'not_found', `no file ${url.pathname} (has the UI been built? npm run build)`);
    }
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://mock');
    let work;
    if (url.pathname.startsWith('/api/')) work = api(req, res, url);
    else if (url.pathname === '/metrics') work = Promise.resolve(send(res, 200, metrics(), 'text/plain; version=0.0.4'));
    else if (url.pathname === '/mock/flood' && req.method === 'POST') {
      const p = byName.get(url.searchParams.get('partition') ?? '');
      const n = Number(url.searchParams.get('bytes') ?? RING_BYTES * 2);
      if (p) p.console.write(`${'x'.repeat(79)}\r\n`.repeat(Math.ceil(n / 81)));
      work = Promise.resolve(p ? send(res, 204, '', 'text/plain') : fail(res, 404, 'not_found', 'no such partition'));
    } else work = staticFile(req, res, url);
    work.catch((e) => {
      if (!res.headersSent) fail(res, 500, 'hypervisor_error', String(e));
    });
  });

  return {
    server,
    /** Listen and resolve with the base URL. */
    listen(port = 8080, host = '127.0.0.1') {
      return new Promise((ok, bad) => {
        server.once('error', bad);
        server.listen(port, host, () => ok(`http://${host}:${server.address().port}`));
      });
    },
    close() {
      clearInterval(counterTimer);
      parts.forEach(cancelTimers);
      server.closeAllConnections?.();
      return new Promise((ok) => server.close(() => ok()));
    },
  };
}

// Run directly: serve until interrupted.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const mock = createMock({ dist: process.env.PINFOLD_DIST ? resolve(process.env.PINFOLD_DIST) : DEFAULT_DIST });
  const url = await mock.listen(Number(process.env.PORT ?? 8080), process.env.HOST ?? '127.0.0.1');
  console.log(`pinfold mock manager on ${url} (token "${MOCK_TOKEN}")`);
  const quit = () => void mock.close().then(() => process.exit(0));
  process.on('SIGINT', quit);
  process.on('SIGTERM', quit);
}
