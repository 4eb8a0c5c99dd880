// Mock Pinfold manager for UI development and the browser test: the REST contract
// (manager/api/openapi.json: /api/v1, /metrics) over plain node:http, with
// simulated partitions mgmt, alpha and beta on a 6-CPU host (CPUs 4 and 5
// free), images, the event log (also as Server-Sent Events), configuration
// export/import, and the built UI served from web-ui/dist.
//
//   node tests/mock-server.mjs            # http://127.0.0.1:8080, operator token "test-token", viewer token "viewer-token"
//   PORT=0 node tests/mock-server.mjs     # any free port (printed)
//
// `PUT /api/v1/config?dry_run=1` validates and answers the diff without
// applying it (the contract's dry run).
//
// Every JSON answer is checked against openapi.json as it goes out
// (tests/contract-lib.mjs); `mock.violations` lists what did not keep the
// contract, and the browser test fails on any.
//
// Mock-only extras, absent from the real manager:
//   POST /mock/flood?partition=NAME&bytes=N    writes N bytes into a console ring (`dropped` > 0)
//   POST /mock/crash?partition=NAME&reason=R   crashes a running partition (its restart policy applies)
// Image uploads are read at UPLOAD_BYTES_PER_S so a progress bar can be seen moving.

import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadContract } from './contract-lib.mjs';

export const MOCK_TOKEN = 'test-token';
/** A viewer's token: reads only (a change with it is answered 403). */
export const MOCK_VIEWER_TOKEN = 'viewer-token';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const DEFAULT_DIST = resolve(HERE, '..', 'dist');

/** Console ring size: small enough that /mock/flood can overrun it quickly. */
const RING_BYTES = 32 * 1024;
/** Console history kept per partition (across restarts). */
const HISTORY_BYTES = 1024 * 1024;
/** The contract's cap on one console read. */
const READ_MAX = 16 * 1024;
/** Most bytes of one console POST the mock takes (the rest is `remaining`). */
const MOCK_INPUT_PER_POST = 16;
/** The contract's cap on one console write body. */
const WRITE_MAX = 4 * 1024;
/** Time a partition spends in "stopping" and in "starting". */
const STOP_MS = 700;
const START_MS = 300;
/** Largest image the mock takes (413 above). */
const IMAGE_MAX = 64 * 1024 * 1024;
/** How fast the mock reads an upload: slow enough to watch the bar move. */
const UPLOAD_BYTES_PER_S = Number(process.env.PINFOLD_MOCK_UPLOAD_BPS ?? 768 * 1024);
/** How long a DELETE takes per MiB of the partition's RAM (the hypervisor scrubs it before answering). */
const SCRUB_MS_PER_MIB = 4;
/** Size and duration of a simulated URL fetch. */
const FETCH_BYTES = 3 * 1024 * 1024;
const FETCH_MS = 1500;

const MiB = 1024 * 1024;
const EXIT_CLASSES = ['mmio', 'sysreg', 'hvc', 'irq', 'abort', 'other'];
const HOST_CPUS = 6;
const HOST_RAM_MIB = 2048;
const RAM_BASE = 0x4000_0000;
const HYP_MIB = 64;
const IMAGES_MIB = 128;
/** Host devices a partition can be given (by host_node). */
const HOST_DEVICES = [
  { name: '/pl011@9040000', base: 0x0904_0000, size: 0x1000 },
  { name: '/virtio_mmio@a000000', base: 0x0a00_0000, size: 0x200 },
];
/** Host devices the hypervisor keeps (the GIC, its console UART): listed, never assignable. */
const KEPT_DEVICES = [
  { name: '/intc@8000000', base: 0x0800_0000, size: 0x1_0000 },
  { name: '/pl011@9000000', base: 0x0900_0000, size: 0x1000 },
];
const NAME_RE = /^[a-z][a-z0-9_-]{0,31}$/;
/** JSON key -> the field the plan check names (vm-configs rules: only memory differs). */
const PLAN_FIELD = { memory_mib: 'memory' };
/** Longest watchdog and shutdown timeout (rules::LIFECYCLE_MAX_S). */
const LIFECYCLE_MAX_S = 3600;

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

const zeroExits = () => Object.fromEntries(EXIT_CLASSES.map((c) => [c, 0]));
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');
const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

function defaultConfig(cpus, memoryMib, kernel, initrd) {
  return {
    cpus,
    memory_mib: memoryMib,
    kernel,
    kernel_format: 'linux',
    initrd,
    bootargs: 'console=ttyAMA0 earlycon=pl011,0x09000000',
    autostart: true,
    restart: 'never',
    restart_limit: 0,
    watchdog_s: 0,
    shutdown_timeout_s: 30,
    devices: [],
    pci: [],
    gic: 'auto',
  };
}

/**
 * The host GICs the mock can sit on, as the real hypervisor reports them (GIC_INFO):
 * QEMU virt gic-version=3 with its ITS, or a GICv5 with two IRSes and FEAT_GCIE_LEGACY
 * (the manager's own GICv5 fixture, manager/api/src/tests.rs `gicv5_host`).
 */
const HOST_GICS = {
  v3: { version: 3, revision: 'v3', its_count: 1, lpis: true, direct_vlpi: false, direct_vsgi: false, probed: true, irs_count: null, gcie_legacy: null },
  v5: { version: 5, revision: 'v5', its_count: 1, lpis: true, direct_vlpi: false, direct_vsgi: false, probed: true, irs_count: 2, gcie_legacy: true },
};

/**
 * `gic`: the host's GIC, 'v3' (default) or 'v5'; `alphaGic`: alpha's `gic` setting
 * ('auto' by default; 'v3' on a GICv5 host gives it the GICv3-compatible interface).
 */
export function createMock({ dist = DEFAULT_DIST, token = MOCK_TOKEN, viewerToken = MOCK_VIEWER_TOKEN, mutate = null, gic: hostGic = 'v3', alphaGic = 'auto' } = {}) {
  if (!(hostGic in HOST_GICS)) throw new Error(`no mock host GIC ${hostGic}`);
  const startedAt = Date.now();
  const contract = loadContract();
  /** Responses that broke the contract: "GET /api/v1/host -> 200: ...". */
  const violations = [];

  // --- images ---------------------------------------------------------------
  const images = new Map();
  let nextImageId = 1;
  function addImage(fields) {
    const img = { id: String(nextImageId++), name: '', kind: 'kernel', size: 0, received: 0, state: 'ready', error: null, sha256: null, boot: false, ...fields };
    images.set(img.id, img);
    return img;
  }
  // The manager names the boot bundle's images (it knows no file name) boot-ID.
  const bootKernel = addImage({ name: 'boot-1', kind: 'kernel', size: 9 * MiB, received: 9 * MiB, sha256: sha256('boot kernel'), boot: true });
  const bootInitrd = addImage({ name: 'boot-2', kind: 'initrd', size: 2 * MiB, received: 2 * MiB, sha256: sha256('boot initrd'), boot: true });
  const imagesBytes = () => [...images.values()].reduce((n, i) => n + i.received, 0);

  // --- partitions -----------------------------------------------------------
  const parts = [];
  const byName = new Map();
  function makePartition(name, config, management) {
    const p = {
      name,
      management,
      config,
      state: 'stopped',
      state_since: now(),
      restarts: 0,
      last_crash: null,
      boot_count: 0,
      bootedAt: 0,
      faults: 0,
      line: '',
      timers: new Set(),
      console: new ConsoleRing(RING_BYTES),
      history: '',
      vcpus: [],
    };
    resetVcpus(p);
    parts.push(p);
    byName.set(name, p);
    return p;
  }
  function resetVcpus(p) {
    p.vcpus = p.config.cpus.map((cpu, vcpu) => ({ vcpu, cpu, state: 'off', exits: zeroExits(), injected: 0 }));
  }
  const mgmtConfig = { ...defaultConfig([0], 256, null, null), bootargs: '', kernel_format: 'raw', devices: [{ name: 'net0', mmio: [{ base: 0x0a00_0000, size: 0x200 }], spis: [16], compatible: 'virtio,mmio', host_node: '/virtio_mmio@a000000' }] };
  makePartition('mgmt', mgmtConfig, true);
  makePartition('alpha', { ...defaultConfig([1], 256, bootKernel.id, bootInitrd.id), gic: alphaGic }, false);
  makePartition('beta', { ...defaultConfig([2, 3], 512, bootKernel.id, bootInitrd.id), restart: 'on-crash', restart_limit: 3 }, false);

  // --- events ---------------------------------------------------------------
  const events = [];
  let nextSeq = 1;
  const streams = new Set();
  function emit(kind, partition, message) {
    const ev = { seq: nextSeq++, time: now(), kind, partition, message };
    events.push(ev);
    if (events.length > 1000) events.shift();
    for (const res of streams) writeEvent(res, ev);
  }
  function writeEvent(res, ev) {
    const data = JSON.stringify(ev);
    check(res, 'GET', '/api/v1/events', 200, 'application/json', JSON.stringify({ events: [ev], next: ev.seq }));
    res.write(`id: ${ev.seq}\nevent: ${ev.kind}\ndata: ${data}\n\n`);
  }

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

  function setState(p, state, why) {
    if (p.state === state) return;
    const was = p.state;
    p.state = state;
    p.state_since = now();
    emit('state', p.name, `${p.name}: ${was} -> ${state}${why ? ` (${why})` : ''}`);
  }

  function write(p, text) {
    p.console.write(text);
    p.history += text;
    if (p.history.length > HISTORY_BYTES) p.history = p.history.slice(p.history.length - HISTORY_BYTES);
  }

  const stamp = (p) => {
    const s = p.state === 'running' ? (Date.now() - p.bootedAt) / 1000 : 0;
    return `[${s.toFixed(6).padStart(12)}]`;
  };

  function boot(p) {
    cancelTimers(p);
    resetVcpus(p);
    p.boot_count += 1;
    p.bootedAt = Date.now();
    p.line = '';
    // The hypervisor's boot marker, in the console ring (so in the history
    // too), on a line of its own, as hv::system::boot_marker writes it.
    const last = p.console.buf.length > 0 ? p.console.buf[p.console.buf.length - 1] : 0x0a;
    write(p, `${last === 0x0a ? '' : '\r\n'}=== pinfold: ${p.name} boot ${p.boot_count} at ${now()} ===\r\n`);
    if (p.management) {
      setState(p, 'running');
      p.vcpus.forEach((v) => (v.state = 'on'));
      write(p, `Hermit unikernel, pinfold-manager 0.1.0 on CPU ${p.config.cpus[0]}\r\n`);
      write(p, '[INFO ] net: virtio-net up, 10.0.2.15/24\r\n');
      write(p, '[INFO ] manager: REST API listening on 0.0.0.0:8080\r\n');
      return;
    }
    setState(p, 'starting');
    p.vcpus.forEach((v, i) => (v.state = i === 0 ? 'on' : 'on_pending'));
    later(p, START_MS, () => {
      setState(p, 'running');
      p.bootedAt = Date.now();
      bootLog(p);
    });
  }

  function bootLog(p) {
    write(p, `\r\nPinfold: booting partition ${p.name} (boot #${p.boot_count}) on CPU ${p.config.cpus.join(',')}\r\n`);
    const lines = [
      'Booting Linux on physical CPU 0x0000000000 [0x410fd083]',
      `Linux version 6.6.0-pinfold (builder@pinfold) #1 SMP PREEMPT aarch64`,
      'Machine model: linux,dummy-virt',
      'psci: PSCIv1.1 detected in firmware.',
      `Memory: ${p.config.memory_mib - 22}M/${p.config.memory_mib}M available`,
      'GICv3: 256 SPIs implemented',
      'arch_timer: cp15 timer(s) running at 62.50MHz (virt).',
      ...p.config.cpus.slice(1).map((_, i) => `CPU${i + 1}: Booted secondary processor 0x000000000${i + 1}`),
      `smp: Brought up 1 node, ${p.config.cpus.length} CPU${p.config.cpus.length > 1 ? 's' : ''}`,
      'Serial: AMBA PL011 UART driver',
      '9000000.pl011: ttyAMA0 at MMIO 0x9000000 (irq = 13) is a PL011 rev1',
      `Kernel command line: ${p.config.bootargs}`,
      'Freeing unused kernel memory: 1024K',
      'Run /init as init process',
    ];
    lines.forEach((l, i) =>
      later(p, 60 * (i + 1), () => {
        if (i === 7) p.vcpus.forEach((v) => (v.state = 'on'));
        write(p, `${stamp(p)} ${l}\r\n`);
      }),
    );
    later(p, 60 * (lines.length + 2), () => {
      p.vcpus.forEach((v) => (v.state = 'on'));
      // A real shell asks the terminal where its cursor is after the prompt
      // (ESC[6n); the UI must not send xterm.js's answer back as input.
      write(p, `PINFOLD-GUEST-UP name=${p.name} cpus=${p.config.cpus.length} timer_irqs=${40 + p.boot_count}\r\n\r\nWelcome to the ${p.name} test guest. Type "help".\r\n# \x1b[6n`);
    });
  }

  function halt(p, state, why) {
    setState(p, state, why);
    p.vcpus.forEach((v) => (v.state = 'off'));
  }

  function stop(p, then) {
    cancelTimers(p);
    setState(p, 'stopping');
    write(p, `\r\n${stamp(p)} reboot: Power down\r\n`);
    later(p, STOP_MS, () => {
      halt(p, 'stopped');
      write(p, `Pinfold: partition ${p.name} stopped\r\n`);
      then?.();
    });
  }

  function shutdown(p) {
    cancelTimers(p);
    setState(p, 'shutting_down', 'power button');
    const lines = ['input: gpio-keys as /devices/platform/gpio-keys/input/input0: power key', 'systemd-logind: Power key pressed short.', 'Stopping services...', 'reboot: Power down'];
    lines.forEach((l, i) => later(p, 150 * (i + 1), () => write(p, `\r\n${stamp(p)} ${l}`)));
    later(p, 150 * (lines.length + 1), () => {
      halt(p, 'stopped', 'guest powered off');
      write(p, `\r\nPinfold: partition ${p.name} stopped\r\n`);
    });
  }

  function crash(p, reason) {
    cancelTimers(p);
    write(p, `\r\n${stamp(p)} Kernel panic - not syncing: ${reason}\r\n`);
    p.faults += 1;
    p.last_crash = { time: now(), reason };
    emit('fault', p.name, `${p.name}: ${reason}`);
    halt(p, 'crashed', reason);
    const policy = p.config.restart;
    if (policy === 'always' || (policy === 'on-crash' && p.restarts < p.config.restart_limit)) {
      later(p, 1000, () => {
        p.restarts += 1;
        emit('restart', p.name, `${p.name}: restarted by its ${policy} policy (${p.restarts} of ${p.config.restart_limit})`);
        boot(p);
      });
    }
  }

  // A tiny line discipline, so typing in the UI's console gets an echo and an answer.
  function input(p, data) {
    for (const ch of data) {
      if (ch === '\r' || ch === '\n') {
        const cmd = p.line.trim();
        p.line = '';
        write(p, '\r\n' + runCommand(p, cmd) + '# \x1b[6n');
      } else if (ch === '\x7f' || ch === '\b') {
        if (p.line.length > 0) {
          p.line = p.line.slice(0, -1);
          write(p, '\b \b');
        }
      } else if (ch === '\x1b') {
        // A terminal report (e.g. a cursor position reply) reaching the guest
        // shows up as junk in its line: keep it visible, as a real shell would.
        p.line += '^[';
        write(p, '^[');
      } else if (ch >= ' ') {
        p.line += ch;
        write(p, ch);
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
        return `${p.config.cpus.length}\r\n`;
      case 'echo':
        return `${args.join(' ')}\r\n`;
      default:
        return `sh: ${name}: not found\r\n`;
    }
  }

  /** Every console POST the mock received (the test checks no terminal report was sent). */
  const consoleInputs = [];

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
        write(p, `\r\n${stamp(p)} pinfold-test: heartbeat ${tick / 40}\r\n# ${p.line}`);
      }
    }
  }, 250);

  parts.forEach((p) => boot(p));

  // --- documents ------------------------------------------------------------
  const usedBy = (id) => parts.filter((p) => p.config.kernel === id || p.config.initrd === id).map((p) => p.name);
  const imageDoc = (i) => ({ id: i.id, name: i.name, kind: i.kind, size: i.size, received: i.received, state: i.state, error: i.error, sha256: i.sha256, used_by: usedBy(i.id), boot: i.boot });

  const summary = (p) => ({
    name: p.name,
    state: p.state,
    cpus: p.config.cpus,
    ram_bytes: p.config.memory_mib * MiB,
    uptime_ms: p.state === 'running' || p.state === 'shutting_down' || p.state === 'stopping' ? Date.now() - p.bootedAt : 0,
    boot_count: p.boot_count,
    management: p.management,
    state_since: p.state_since,
    config: structuredClone(p.config),
    restarts: p.restarts,
    last_crash: p.last_crash,
    // hv gichost::interface_for: GICv3 on a GICv3 host; on the GICv5 (with
    // GCIE_LEGACY) GICv3 for `v3`, GICv5 for `auto` and `v5`.
    gic_interface: hostGic === 'v5' && p.config.gic !== 'v3' ? 'gicv5' : 'gicv3',
  });

  const detail = (p) => ({
    ...summary(p),
    faults: p.faults,
    vcpus: p.vcpus.map((v) => ({ vcpu: v.vcpu, cpu: v.cpu, state: v.state, exits: { ...v.exits }, injected: v.injected })),
  });

  const etag = (p) => `"${sha256(JSON.stringify([p.name, p.config])).slice(0, 16)}"`;

  const cpuOwner = (cpu) => parts.find((p) => p.config.cpus.includes(cpu))?.name ?? null;

  const hostDoc = () => ({
    version: '0.1.0',
    abi_version: '3.3',
    gic_version: HOST_GICS[hostGic].version,
    cpu_count: HOST_CPUS,
    ram_bytes: HOST_RAM_MIB * MiB,
    uptime_ms: Date.now() - startedAt,
    time: now(),
    cpus: [...Array(HOST_CPUS).keys()].map((cpu) => ({ cpu, partition: cpuOwner(cpu) })),
    gic: { ...HOST_GICS[hostGic] },
  });

  /** RAM laid out as the hypervisor would: itself, the image store, partitions in order, the rest free. */
  function memoryRanges() {
    const ranges = [
      { base: RAM_BASE, size: HYP_MIB * MiB, owner: 'hypervisor', partition: null },
      { base: RAM_BASE + HYP_MIB * MiB, size: IMAGES_MIB * MiB, owner: 'images', partition: null },
    ];
    let at = RAM_BASE + (HYP_MIB + IMAGES_MIB) * MiB;
    for (const p of parts) {
      ranges.push({ base: at, size: p.config.memory_mib * MiB, owner: 'partition', partition: p.name });
      at += p.config.memory_mib * MiB;
    }
    const end = RAM_BASE + HOST_RAM_MIB * MiB;
    if (at < end) ranges.push({ base: at, size: end - at, owner: 'free', partition: null });
    return ranges;
  }
  const freeMib = (except) => HOST_RAM_MIB - HYP_MIB - IMAGES_MIB - parts.filter((p) => p !== except).reduce((n, p) => n + p.config.memory_mib, 0);

  function resourcesDoc() {
    const ranges = memoryRanges();
    const free = ranges.filter((r) => r.owner === 'free');
    return {
      cpus: hostDoc().cpus,
      memory: {
        total_bytes: HOST_RAM_MIB * MiB,
        free_bytes: free.reduce((n, r) => n + r.size, 0),
        largest_free_bytes: free.reduce((n, r) => Math.max(n, r.size), 0),
        ranges,
      },
      images_bytes: imagesBytes(),
      devices: [
        ...KEPT_DEVICES.map((d) => ({ ...d, owner: 'hypervisor', partition: null })),
        ...HOST_DEVICES.map((d) => {
          const partition = parts.find((p) => p.config.devices.some((x) => x.host_node === d.name))?.name ?? null;
          return { ...d, owner: partition === null ? 'free' : 'partition', partition };
        }),
      ],
    };
  }

  function metrics() {
    const out = [
      '# HELP pinfold_partition_state Partition state (0 stopped, 1 running, 2 stopping).',
      '# TYPE pinfold_partition_state gauge',
    ];
    const code = { stopped: 0, running: 1, stopping: 2, starting: 3, shutting_down: 4, crashed: 5 };
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

  // --- configuration as code -------------------------------------------------
  const tomlStr = (s) => JSON.stringify(s);
  function exportToml() {
    const lines = ['# Pinfold plan exported by the manager (mock).', '', '[board]', 'name = "qemu-virt"', `cpus = ${HOST_CPUS}`, `memory = "${HOST_RAM_MIB}MiB"`];
    for (const p of parts) {
      if (p.management) continue;
      const c = p.config;
      const img = (id) => (id && images.get(id) ? `image:${images.get(id).sha256}` : '');
      lines.push('', '[[partition]]', `name = ${tomlStr(p.name)}`, `cpus = [${c.cpus.join(', ')}]`, `memory = "${c.memory_mib}MiB"`, `kernel = ${tomlStr(img(c.kernel))}`);
      if (c.initrd) lines.push(`initrd = ${tomlStr(img(c.initrd))}`);
      lines.push(`bootargs = ${tomlStr(c.bootargs)}`, `autostart = ${c.autostart}`, `restart = ${tomlStr(c.restart)}`, `restart_limit = ${c.restart_limit}`, `watchdog_s = ${c.watchdog_s}`, `shutdown_timeout_s = ${c.shutdown_timeout_s}`);
    }
    return lines.join('\n') + '\n';
  }
  const configEtag = () => `"${sha256(exportToml()).slice(0, 16)}"`;

  /** The subset of TOML the export writes: [board], [[partition]] and `key = value` lines. */
  function parsePlan(text) {
    const plan = [];
    let cur = null;
    let section = null;
    text.split(/\r?\n/).forEach((raw, i) => {
      const line = raw.replace(/\s+#.*$/, '').trim();
      if (line === '' || line.startsWith('#')) return;
      if (line === '[[partition]]') {
        cur = {};
        plan.push(cur);
        section = 'partition';
        return;
      }
      if (/^\[[^\]]+\]$/.test(line)) {
        section = line;
        cur = null;
        return;
      }
      const m = /^([A-Za-z_][\w-]*)\s*=\s*(.+)$/.exec(line);
      if (m === null) throw fieldError(400, 'bad_request', null, `line ${i + 1}: expected key = value`);
      if (section !== 'partition') return;
      let value;
      try {
        value = JSON.parse(m[2]);
      } catch {
        throw fieldError(400, 'bad_request', m[1], `line ${i + 1}: ${m[1]}: cannot read ${m[2]}`);
      }
      cur[m[1]] = value;
    });
    return plan;
  }

  function imageByRef(ref, field, who) {
    if (ref === undefined || ref === '') return null;
    const m = /^image:([0-9a-f]{64})$/.exec(String(ref));
    const img = m ? [...images.values()].find((i) => i.sha256 === m[1] && i.state === 'ready') : undefined;
    if (!img) throw fieldError(400, 'bad_request', field, `partition "${who}": ${field}: no image ${ref} is held`);
    return img.id;
  }

  function planToConfigs(plan) {
    return plan.map((e) => {
      const name = e.name;
      const mem = /^(\d+)MiB$/.exec(String(e.memory ?? ''));
      if (!mem) throw fieldError(400, 'bad_request', 'memory', `partition "${name}": memory: expected a size like "256MiB"`);
      return {
        name,
        config: {
          ...defaultConfig(e.cpus, Number(mem[1]), imageByRef(e.kernel, 'kernel', name), imageByRef(e.initrd, 'initrd', name)),
          bootargs: e.bootargs ?? '',
          autostart: e.autostart ?? false,
          restart: e.restart ?? 'never',
          // The plan's keys and defaults (docs/CONFIG.md).
          restart_limit: e.restart_limit ?? 0,
          watchdog_s: e.watchdog_s ?? 0,
          shutdown_timeout_s: e.shutdown_timeout_s ?? 30,
        },
      };
    });
  }

  // --- validation (the build-time plan check's sentences) --------------------
  function fieldError(status, error, field, detail) {
    const e = new Error(detail);
    e.api = { status, body: field ? { error, detail, field } : { error, detail } };
    return e;
  }
  const bad = (name, field, what) => fieldError(400, 'bad_request', field, `partition "${name}": ${field}: ${what}`);
  const clash = (name, field, what) => fieldError(409, 'conflict', field, `partition "${name}": ${field}: ${what}`);

  /** Check one partition's config against the host and the `others`; throws a field error. */
  function validate(name, c, others) {
    if (typeof name !== 'string' || !NAME_RE.test(name)) throw bad(name, 'name', 'must be 1-32 characters of a-z, 0-9, - and _, starting with a letter');
    if (!Array.isArray(c.cpus) || c.cpus.length === 0) throw bad(name, 'cpus', 'at least one CPU is needed');
    for (const cpu of c.cpus) {
      if (!Number.isInteger(cpu) || cpu < 0 || cpu >= HOST_CPUS) throw bad(name, 'cpus', `CPU ${cpu} is not on the board (it has ${HOST_CPUS})`);
    }
    if (new Set(c.cpus).size !== c.cpus.length) throw bad(name, 'cpus', 'a CPU is listed twice');
    // The manager's and the plan check's pci[i] errors (docs/API.md).
    for (const [i, f] of (c.pci ?? []).entries()) {
      if (typeof f !== 'string' || !/^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$/i.test(f)) {
        throw bad(name, `pci[${i}]`, `${JSON.stringify(f)} is not a PCI function "SSSS:BB:DD.F" (hex, e.g. "0000:00:02.0")`);
      }
      const holder = others.find((o) => (o.config?.pci ?? []).includes(f));
      if (holder) throw clash(name, `pci[${i}]`, `${f} is already assigned to partition "${holder.name}"`);
    }
    for (const o of others) {
      const cpu = c.cpus.find((x) => o.config.cpus.includes(x));
      if (cpu !== undefined) throw clash(name, 'cpus', `CPU ${cpu} is also used by partition "${o.name}"`);
    }
    if (!Number.isInteger(c.memory_mib) || c.memory_mib < 16) throw bad(name, 'memory', 'at least 16 MiB is needed');
    const free = HOST_RAM_MIB - HYP_MIB - IMAGES_MIB - others.reduce((n, o) => n + o.config.memory_mib, 0);
    if (c.memory_mib > free) throw clash(name, 'memory', `${c.memory_mib} MiB does not fit: ${free} MiB of RAM is free`);
    for (const [field, kind] of [['kernel', 'kernel'], ['initrd', 'initrd']]) {
      const id = c[field];
      if (id === null || id === undefined) {
        if (field === 'kernel') throw bad(name, 'kernel', 'a kernel image is needed');
        continue;
      }
      const img = images.get(String(id));
      if (!img || img.state !== 'ready') throw bad(name, field, `no ready image ${id}`);
      if (img.kind !== kind) throw bad(name, field, `image ${id} is a ${img.kind}, not a ${kind}`);
    }
    if (!['linux', 'raw'].includes(c.kernel_format)) throw bad(name, 'kernel_format', 'must be "linux" or "raw"');
    if (!['never', 'on-crash', 'always'].includes(c.restart)) throw bad(name, 'restart', 'must be "never", "on-crash" or "always"');
    // The manager's parse and the hypervisor's check against this host (hv gichost; the
    // GICv5 host has GCIE_LEGACY, so `v3` is allowed there).
    const gic = c.gic ?? 'auto';
    if (!['auto', 'v3', 'v5'].includes(gic)) throw bad(name, 'gic', `${JSON.stringify(gic)} is not "auto", "v3" or "v5"`);
    if (gic === 'v5' && hostGic !== 'v5') throw bad(name, 'gic', 'gic = "v5" needs a GICv5 host; this host has a GICv3');
    for (const [k, v] of [['restart_limit', c.restart_limit], ['watchdog_s', c.watchdog_s], ['shutdown_timeout_s', c.shutdown_timeout_s]]) {
      if (!Number.isInteger(v) || v < 0) throw bad(name, k, 'must be a whole number, 0 or more');
    }
    // The build-time check's lifecycle rules and sentences (vm-configs/src/rules.rs).
    if (c.restart === 'never' && c.restart_limit !== 0) throw bad(name, 'restart_limit', 'has no effect with restart = "never"; set restart = "on-crash" or "always"');
    if (c.watchdog_s > LIFECYCLE_MAX_S) throw bad(name, 'watchdog_s', `${c.watchdog_s} is out of range: 0 (off) or 1..=${LIFECYCLE_MAX_S} seconds`);
    if (c.shutdown_timeout_s < 1 || c.shutdown_timeout_s > LIFECYCLE_MAX_S) throw bad(name, 'shutdown_timeout_s', `${c.shutdown_timeout_s} is out of range: 1..=${LIFECYCLE_MAX_S} seconds`);
    if (typeof c.bootargs !== 'string' || c.bootargs.length > 1024) throw bad(name, 'bootargs', 'must be a string of at most 1024 bytes');
    for (const d of c.devices ?? []) {
      if (!HOST_DEVICES.some((h) => h.name === d.host_node)) throw bad(name, `device "${d.name}": host_node`, `${d.host_node} is not a device of the host`);
      const owner = others.find((o) => o.config.devices.some((x) => x.host_node === d.host_node));
      if (owner) throw clash(name, `device "${d.name}": mmio`, `${d.host_node} is also used by partition "${owner.name}"`);
    }
  }

  const CONFIG_KEYS = Object.keys(defaultConfig([], 0, null, null));
  function configFrom(body, base) {
    const c = structuredClone(base);
    for (const k of CONFIG_KEYS) if (k in body) c[k] = body[k];
    if ('kernel' in body && body.kernel !== null) c.kernel = String(body.kernel);
    if ('initrd' in body && body.initrd !== null) c.initrd = String(body.initrd);
    return c;
  }
  function typeCheck(name, body) {
    for (const [k, v] of Object.entries(body)) {
      const field = PLAN_FIELD[k] ?? k;
      if (k === 'name' && typeof v !== 'string') throw bad(name, 'name', 'must be a string');
      if (['memory_mib', 'restart_limit', 'watchdog_s', 'shutdown_timeout_s'].includes(k) && !Number.isInteger(v)) throw bad(name, field, 'must be a whole number');
      if (k === 'cpus' && (!Array.isArray(v) || !v.every(Number.isInteger))) throw bad(name, 'cpus', 'must be a list of CPU numbers');
      if (k === 'autostart' && typeof v !== 'boolean') throw bad(name, 'autostart', 'must be true or false');
    }
  }

  // --- HTTP -----------------------------------------------------------------
  function check(res, method, path, status, type, text) {
    const problems = contract.check({ method, path, status, contentType: type, body: text });
    violations.push(...problems);
  }

  const send = (res, status, body, type = 'application/json', headers = {}) => {
    let value = body;
    const req = res.req;
    const path = new URL(req?.url ?? '/', 'http://mock').pathname;
    if (mutate && type === 'application/json') value = mutate(req?.method ?? 'GET', path, structuredClone(body)) ?? body;
    const text = type === 'application/json' ? JSON.stringify(value) : String(body);
    if (path.startsWith('/api/') || path === '/metrics') check(res, req?.method ?? 'GET', path, status, type, status === 204 ? '' : text);
    res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store', 'Content-Length': status === 204 ? 0 : Buffer.byteLength(text), ...headers });
    res.end(status === 204 ? undefined : text);
  };
  const fail = (res, status, error, detail, field) => send(res, status, field ? { error, detail, field } : { error, detail });

  const readBody = (req, max = WRITE_MAX + 1024) =>
    new Promise((ok, bad) => {
      const chunks = [];
      let size = 0;
      req.on('data', (c) => {
        size += c.length;
        if (size <= max) chunks.push(c);
      });
      req.on('end', () => ok({ size, text: Buffer.concat(chunks).toString('utf8') }));
      req.on('error', bad);
    });

  // The manager's rules (docs/API.md "Authentication"): every GET but the
  // static files, /api/v1/host and /api/v1/openapi.json needs a viewer's
  // token (the operator's will do); every change the operator's.
  const roleOf = (req) =>
    req.headers.authorization === `Bearer ${token}` ? 'operator' : req.headers.authorization === `Bearer ${viewerToken}` ? 'viewer' : null;
  const refuse = (req, res) => {
    emit('login_refused', null, `refused ${req.method} ${new URL(req.url, 'http://mock').pathname}: ${req.headers.authorization ? 'wrong token' : 'no token'}`);
    fail(res, 401, 'unauthorized', 'a valid bearer token is required');
    return false;
  };
  const requireAuth = (req, res) => {
    const role = roleOf(req);
    if (role === 'operator') return true;
    if (role === 'viewer') {
      fail(res, 403, 'forbidden', 'this credential is a viewer: changes need an operator');
      return false;
    }
    return refuse(req, res);
  };
  const requireViewer = (req, res) => (roleOf(req) !== null ? true : refuse(req, res));
  /** Requests answered 401, by path (the UI test checks there is no storm of them). */
  const refusedReads = [];

  async function jsonBody(req, res) {
    const body = await readBody(req, 64 * 1024);
    if (body.size > 64 * 1024) {
      fail(res, 413, 'too_large', 'the body is over 64 KiB');
      return null;
    }
    try {
      const v = JSON.parse(body.text || '{}');
      if (typeof v === 'object' && v !== null && !Array.isArray(v)) return v;
    } catch {
      // answered below
    }
    fail(res, 400, 'bad_request', 'the body must be a JSON object');
    return null;
  }

  const readMatch = (req) => req.headers['if-match'];

  async function imageUpload(req, res, url) {
    if (!requireAuth(req, res)) return req.resume();
    const kind = url.searchParams.get('kind');
    const name = url.searchParams.get('name') ?? '';
    const want = url.searchParams.get('sha256');
    const length = Number(req.headers['content-length']);
    const reject = (status, error, field, detail) => {
      req.resume();
      fail(res, status, error, detail, field);
    };
    if (!['kernel', 'initrd', 'dtb'].includes(kind ?? '')) return reject(400, 'bad_request', 'kind', 'kind must be kernel, initrd or dtb');
    if (name === '') return reject(400, 'bad_request', 'name', 'an image needs a name');
    if (want !== null && !/^[0-9a-fA-F]{64}$/.test(want)) return reject(400, 'bad_request', 'sha256', 'sha256 must be 64 hex digits');
    if (!Number.isInteger(length) || req.headers['content-length'] === undefined) return reject(400, 'bad_request', null, 'Content-Length is required');
    if (length > IMAGE_MAX) return reject(413, 'too_large', null, `images are limited to ${IMAGE_MAX / MiB} MiB`);
    const img = addImage({ name, kind, size: length, received: 0, state: 'uploading' });
    emit('image', null, `image ${img.id} (${name}): upload of ${length} bytes started`);
    const hash = createHash('sha256');
    const head = [];
    // Read slowly (as the hypervisor's chunked copy would), so the UI's
    // progress bar (upload events, then polling `received`) can be seen moving.
    await new Promise((done) => {
      let lastAt = Date.now();
      req.on('data', (chunk) => {
        hash.update(chunk);
        if (head.length < 64) head.push(...chunk.subarray(0, 64 - head.length));
        img.received += chunk.length;
        const wait = Math.max(0, (chunk.length / UPLOAD_BYTES_PER_S) * 1000 - (Date.now() - lastAt));
        req.pause();
        setTimeout(() => {
          lastAt = Date.now();
          req.resume();
        }, wait);
      });
      req.on('end', done);
      req.on('aborted', done);
      req.on('error', done);
    });
    const discard = (status, error, field, detail) => {
      images.delete(img.id);
      emit('image', null, `image ${img.id} (${name}) discarded: ${detail}`);
      fail(res, status, error, detail, field);
    };
    if (img.received !== length) return discard(400, 'bad_request', null, `the body was cut short: ${img.received} of ${length} bytes`);
    const digest = hash.digest('hex');
    if (want !== null && want.toLowerCase() !== digest) return discard(400, 'bad_request', 'sha256', `sha256 is ${digest}, not ${want.toLowerCase()}`);
    if (kind === 'kernel' && Buffer.from(head.slice(56, 60)).toString('latin1') !== 'ARM\x64') {
      return discard(400, 'bad_request', 'kernel', `image "${name}" is not an arm64 Image (no ARM\\x64 magic at byte 56)`);
    }
    img.sha256 = digest;
    img.state = 'ready';
    emit('image', null, `image ${img.id} (${name}): ${length} bytes, ready`);
    return send(res, 201, imageDoc(img), 'application/json', { Location: `/api/v1/images/${img.id}` });
  }

  function imageFetch(res, body) {
    if (typeof body.url !== 'string' || !/^http:\/\/[^/\s]+\/\S*$/.test(body.url)) return fail(res, 400, 'bad_request', 'url must be an http:// URL', 'url');
    if (!['kernel', 'initrd', 'dtb'].includes(body.kind)) return fail(res, 400, 'bad_request', 'kind must be kernel, initrd or dtb', 'kind');
    if (typeof body.name !== 'string' || body.name === '') return fail(res, 400, 'bad_request', 'an image needs a name', 'name');
    const img = addImage({ name: body.name, kind: body.kind, size: FETCH_BYTES, received: 0, state: 'uploading' });
    emit('image', null, `image ${img.id} (${body.name}): fetching ${body.url}`);
    const step = Math.ceil(FETCH_BYTES / 10);
    const timer = setInterval(() => {
      img.received = Math.min(FETCH_BYTES, img.received + step);
      if (img.received >= FETCH_BYTES) {
        clearInterval(timer);
        img.state = 'ready';
        img.sha256 = sha256(body.url);
        emit('image', null, `image ${img.id} (${body.name}): fetched, ready`);
      }
    }, FETCH_MS / 10);
    return send(res, 202, imageDoc(img));
  }

  function eventStream(req, res) {
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', Connection: 'keep-alive' });
    res.write(': pinfold mock event stream\n\n');
    const last = Number(req.headers['last-event-id'] ?? 0);
    for (const ev of events) if (ev.seq > last) writeEvent(res, ev);
    streams.add(res);
    const ping = setInterval(() => res.write(': ping\n\n'), 15_000);
    req.on('close', () => {
      clearInterval(ping);
      streams.delete(res);
    });
  }

  async function api(req, res, url) {
    const path = url.pathname;
    const method = req.method ?? 'GET';
    const methods = (allowed) => {
      if (allowed.includes(method)) return true;
      req.resume();
      fail(res, 405, 'method_not_allowed', `${method} is not allowed on ${path}`);
      return false;
    };

    if (path === '/api/v1/host') return methods(['GET']) && send(res, 200, hostDoc());
    if (path === '/api/v1/openapi.json') return methods(['GET']) && send(res, 200, contract.doc);
    if (method === 'GET' && !requireViewer(req, res)) return refusedReads.push(path);
    if (path === '/api/v1/resources') return methods(['GET']) && send(res, 200, resourcesDoc());

    if (path === '/api/v1/events') {
      if (!methods(['GET'])) return;
      const raw = url.searchParams.get('since') ?? '0';
      if (!/^\d+$/.test(raw)) return fail(res, 400, 'bad_request', 'since must be a non-negative integer', 'since');
      const since = Number(raw);
      return send(res, 200, { events: events.filter((e) => e.seq > since), next: nextSeq - 1 });
    }
    if (path === '/api/v1/events/stream') return methods(['GET']) && eventStream(req, res);

    if (path === '/api/v1/config') {
      if (!methods(['GET', 'PUT'])) return;
      if (method === 'GET') return send(res, 200, exportToml(), 'application/toml', { ETag: configEtag() });
      const body = await readBody(req, 256 * 1024);
      if (!requireAuth(req, res)) return;
      const match = readMatch(req);
      if (match !== undefined && match !== configEtag()) return fail(res, 412, 'precondition_failed', 'the configuration changed since it was read (ETag mismatch)');
      const dryRun = ['1', 'true'].includes(url.searchParams.get('dry_run') ?? '');
      try {
        return send(res, 200, importPlan(planToConfigs(parsePlan(body.text)), dryRun));
      } catch (e) {
        if (e.api) return send(res, e.api.status, e.api.body);
        throw e;
      }
    }

    if (path === '/api/v1/images') {
      if (!methods(['GET', 'POST'])) return;
      if (method === 'GET') return send(res, 200, { images: [...images.values()].map(imageDoc) });
      return imageUpload(req, res, url);
    }
    if (path === '/api/v1/images/fetch') {
      if (!methods(['POST'])) return;
      const body = await jsonBody(req, res);
      if (body === null || !requireAuth(req, res)) return;
      return imageFetch(res, body);
    }
    const im = /^\/api\/v1\/images\/([^/]+)$/.exec(path);
    if (im !== null) {
      if (!methods(['GET', 'DELETE'])) return;
      if (method === 'DELETE' && !requireAuth(req, res)) return;
      if (!/^\d+$/.test(im[1])) return fail(res, 400, 'bad_request', 'an image id is a decimal number');
      const img = images.get(im[1]);
      if (!img) return fail(res, 404, 'not_found', `no image ${im[1]}`);
      if (method === 'GET') return send(res, 200, imageDoc(img));
      const users = usedBy(img.id);
      if (users.length > 0) return fail(res, 409, 'conflict', `image ${img.id} is used by ${users.join(', ')}`);
      images.delete(img.id);
      emit('image', null, `image ${img.id} (${img.name}) deleted`);
      return send(res, 204, '', 'application/json');
    }

    if (path === '/api/v1/partitions') {
      if (!methods(['GET', 'POST'])) return;
      if (method === 'GET') return send(res, 200, { partitions: parts.map(summary) });
      const body = await jsonBody(req, res);
      if (body === null || !requireAuth(req, res)) return;
      try {
        const name = body.name;
        typeCheck(name, body);
        const c = configFrom(body, { ...defaultConfig([], 0, null, null), autostart: false });
        if (!('cpus' in body)) throw bad(name, 'cpus', 'is required (a list of CPU numbers)');
        if (!('memory_mib' in body)) throw bad(name, 'memory', 'is required (memory_mib, a whole number of MiB)');
        if (!('kernel' in body) || body.kernel === null) throw bad(name, 'kernel', 'is required (an image id)');
        if (byName.has(name)) throw clash(name, 'name', `the name is taken`);
        validate(name, c, parts);
        const p = makePartition(name, c, false);
        emit('config', name, `${name}: created (CPUs ${c.cpus.join(', ')}, ${c.memory_mib} MiB)`);
        if (c.autostart) boot(p);
        return send(res, 201, detail(p), 'application/json', { Location: `/api/v1/partitions/${encodeURIComponent(name)}`, ETag: etag(p) });
      } catch (e) {
        if (e.api) return send(res, e.api.status, e.api.body);
        throw e;
      }
    }

    const m = /^\/api\/v1\/partitions\/([^/]+)(?:\/(start|stop|restart|shutdown|console|console\/history))?$/.exec(path);
    if (m === null) return fail(res, 404, 'not_found', `no such resource: ${path}`);
    const p = byName.get(decodeURIComponent(m[1]));
    const sub = m[2];

    if (sub === undefined) {
      if (!methods(['GET', 'PATCH', 'DELETE'])) return;
      if (method === 'GET') return p ? send(res, 200, detail(p), 'application/json', { ETag: etag(p) }) : fail(res, 404, 'not_found', `no partition named ${m[1]}`);
      const body = method === 'PATCH' ? await jsonBody(req, res) : (await readBody(req), {});
      if (body === null || !requireAuth(req, res)) return;
      if (!p) return fail(res, 404, 'not_found', `no partition named ${m[1]}`);
      // The real manager's order and sentences (manager/api/src/runtime.rs, `changeable`).
      const verb = method === 'DELETE' ? 'delete' : 'change';
      if (p.management) return fail(res, 409, 'conflict', `cannot ${verb} ${p.name}: it is the management partition serving this API`);
      if (p.state !== 'stopped' && p.state !== 'crashed') return fail(res, 409, 'conflict', `cannot ${verb} ${p.name}: it is ${p.state} (stop it first)`);
      const match = readMatch(req);
      if (match !== undefined && match !== '*' && !match.split(',').map((t) => t.trim()).includes(etag(p))) return fail(res, 412, 'precondition_failed', `${p.name}'s config changed since you read it (its ETag is now ${etag(p)})`);
      if (method === 'DELETE') {
        parts.splice(parts.indexOf(p), 1);
        byName.delete(p.name);
        cancelTimers(p);
        emit('config', p.name, `${p.name}: deleted (its RAM is scrubbed before reuse)`);
        // The hypervisor zeroes the RAM before the manager answers.
        await new Promise((ok) => setTimeout(ok, SCRUB_MS_PER_MIB * p.config.memory_mib));
        return send(res, 204, '', 'application/json');
      }
      try {
        const name = body.name ?? p.name;
        typeCheck(name, body);
        if (name !== p.name && byName.has(name)) throw clash(name, 'name', 'the name is taken');
        const c = configFrom(body, p.config);
        validate(name, c, parts.filter((o) => o !== p));
        const changed = Object.keys(body).filter((k) => k !== 'name' && JSON.stringify(body[k]) !== JSON.stringify(p.config[k]));
        p.config = c;
        resetVcpus(p);
        if (name !== p.name) {
          byName.delete(p.name);
          p.name = name;
          byName.set(name, p);
          changed.unshift('name');
        }
        emit('config', p.name, `${p.name}: changed ${changed.join(', ') || 'nothing'}`);
        return send(res, 200, detail(p), 'application/json', { ETag: etag(p) });
      } catch (e) {
        if (e.api) return send(res, e.api.status, e.api.body);
        throw e;
      }
    }

    if (sub === 'console/history') {
      if (!methods(['GET'])) return;
      if (!p) return fail(res, 404, 'not_found', `no partition named ${m[1]}`);
      return send(res, 200, p.history, 'text/plain; charset=utf-8', { 'Content-Disposition': `attachment; filename="${p.name}-console.log"` });
    }

    if (sub === 'console' && method === 'GET') {
      if (!p) return fail(res, 404, 'not_found', `no partition named ${m[1]}`);
      const raw = url.searchParams.get('offset') ?? '0';
      if (!/^\d+$/.test(raw)) return fail(res, 400, 'bad_request', 'offset must be a non-negative integer');
      return send(res, 200, p.console.read(Number(raw)));
    }

    if (!methods(['POST'])) return;
    const body = await readBody(req);
    // Every console POST, with or without a token (the test checks that no
    // terminal report was ever sent as input).
    if (sub === 'console') consoleInputs.push({ partition: m[1], text: body.text });
    if (!requireAuth(req, res)) return;
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
      if (p.state !== 'stopped' && p.state !== 'crashed') return fail(res, 409, 'conflict', `${p.name} is ${p.state}`);
      boot(p);
    } else if (sub === 'stop') {
      if (!['running', 'starting', 'shutting_down'].includes(p.state)) return fail(res, 409, 'conflict', `${p.name} is ${p.state}`);
      stop(p);
    } else if (sub === 'shutdown') {
      if (p.state !== 'running') return fail(res, 409, 'conflict', `${p.name} is ${p.state}`);
      shutdown(p);
    } else {
      if (p.state === 'stopping' || p.state === 'shutting_down' || p.state === 'starting') return fail(res, 409, 'conflict', `${p.name} is ${p.state}`);
      if (p.state === 'stopped' || p.state === 'crashed') boot(p);
      else stop(p, () => boot(p));
    }
    return send(res, 202, { name: p.name, state: p.state });
  }

  /** Apply a whole plan as a diff (validated first: nothing applied on an error); `dryRun` only answers the diff. */
  function importPlan(entries, dryRun = false) {
    const guests = parts.filter((x) => !x.management);
    const mgmt = parts.filter((x) => x.management);
    const seen = new Set();
    const accepted = [];
    for (const e of entries) {
      if (seen.has(e.name)) throw clash(e.name, 'name', 'the name is used twice in the plan');
      seen.add(e.name);
      validate(e.name, e.config, [...mgmt, ...accepted]);
      accepted.push({ name: e.name, config: e.config });
    }
    for (const e of entries) {
      const p = byName.get(e.name);
      if (p && JSON.stringify(p.config) !== JSON.stringify(e.config) && p.state !== 'stopped' && p.state !== 'crashed') {
        throw fieldError(409, 'conflict', null, `partition "${e.name}" is ${p.state}: stop it before changing it`);
      }
    }
    for (const p of guests) {
      if (!seen.has(p.name) && p.state !== 'stopped' && p.state !== 'crashed') throw fieldError(409, 'conflict', null, `partition "${p.name}" is ${p.state}: stop it before deleting it`);
    }
    const diff = { created: [], changed: [], deleted: [], unchanged: [] };
    if (dryRun) {
      for (const p of guests) if (!seen.has(p.name)) diff.deleted.push(p.name);
      for (const e of entries) {
        const p = byName.get(e.name);
        (!p ? diff.created : JSON.stringify(p.config) !== JSON.stringify(e.config) ? diff.changed : diff.unchanged).push(e.name);
      }
      return diff;
    }
    for (const p of guests) {
      if (seen.has(p.name)) continue;
      parts.splice(parts.indexOf(p), 1);
      byName.delete(p.name);
      diff.deleted.push(p.name);
    }
    for (const e of entries) {
      const p = byName.get(e.name);
      if (!p) {
        makePartition(e.name, e.config, false);
        diff.created.push(e.name);
      } else if (JSON.stringify(p.config) !== JSON.stringify(e.config)) {
        p.config = e.config;
        resetVcpus(p);
        diff.changed.push(e.name);
      } else diff.unchanged.push(e.name);
    }
    emit('config', null, `configuration imported: ${diff.created.length} created, ${diff.changed.length} changed, ${diff.deleted.length} deleted`);
    return diff;
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
    else if (url.pathname === '/metrics') work = Promise.resolve(requireViewer(req, res) && send(res, 200, metrics(), 'text/plain; version=0.0.4'));
    else if (url.pathname === '/mock/flood' && req.method === 'POST') {
      const p = byName.get(url.searchParams.get('partition') ?? '');
      const n = Number(url.searchParams.get('bytes') ?? RING_BYTES * 2);
      if (p) write(p, `${'x'.repeat(79)}\r\n`.repeat(Math.ceil(n / 81)));
      work = Promise.resolve(p ? send(res, 204, '', 'text/plain') : fail(res, 404, 'not_found', 'no such partition'));
    } else if (url.pathname === '/mock/crash' && req.method === 'POST') {
      const p = byName.get(url.searchParams.get('partition') ?? '');
      if (p && p.state === 'running' && !p.management) crash(p, url.searchParams.get('reason') ?? 'watchdog expired');
      work = Promise.resolve(p ? send(res, 204, '', 'text/plain') : fail(res, 404, 'not_found', 'no such partition'));
    } else work = staticFile(req, res, url);
    work.catch((e) => {
      if (!res.headersSent) fail(res, 500, 'hypervisor_error', String(e));
    });
  });

  return {
    server,
    violations,
    consoleInputs,
    refusedReads,
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
      for (const s of streams) s.end();
      server.closeAllConnections?.();
      return new Promise((ok) => server.close(() => ok()));
    },
  };
}

// Run directly: serve until interrupted.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  // PINFOLD_MOCK_GIC=v5: the GICv5 host (HOST_GICS).
  const mock = createMock({ dist: process.env.PINFOLD_DIST ? resolve(process.env.PINFOLD_DIST) : DEFAULT_DIST, gic: process.env.PINFOLD_MOCK_GIC ?? 'v3' });
  const url = await mock.listen(Number(process.env.PORT ?? 8080), process.env.HOST ?? '127.0.0.1');
  console.log(`pinfold mock manager on ${url} (token "${MOCK_TOKEN}")`);
  setInterval(() => {
    while (mock.violations.length > 0) console.warn(`contract violation: ${mock.violations.shift()}`);
  }, 1000).unref();
  const quit = () => void mock.close().then(() => process.exit(0));
  process.on('SIGINT', quit);
  process.on('SIGTERM', quit);
}
