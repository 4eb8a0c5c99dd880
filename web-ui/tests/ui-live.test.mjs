// Browser test of the partition lifecycle through the web UI against the REAL
// manager (the `web-ui-live` boot case: QEMU with the default plan), in
// Debian's Chromium driven by playwright-core:
//
//   PINFOLD_URL=http://127.0.0.1:18420 PINFOLD_TOKEN=... \
//   PINFOLD_KERNEL=target/guest/linux/Image PINFOLD_INITRD=target/guest/initramfs.cpio.gz \
//   node tests/ui-live.test.mjs
//
// In the UI only: alpha is stopped and deleted (CPU 1 free); the create
// form uploads a kernel and an initrd (the progress bar is sampled from the
// DOM and must show at least two values below 100 % before it completes);
// gamma on CPU 2 is refused with the API's sentence beside the CPUs field,
// then created on CPU 1; started, its console view shows the boot marker
// (`=== pinfold: gamma boot 1 ...`) and the guest's UP line; stopped, its
// bootargs and memory edited, started again (boot 2, the new command line
// and RAM), stopped, deleted; the resources view shows CPU 1 free. Last,
// alpha is created again from the boot bundle's images with its own settings
// (through the form too) and the uploaded images are deleted, so the shared
// boot ends as it began. Every failed check leaves a screenshot
// (ui-live-fail-N.png) in $PINFOLD_TEST_OUT. Prints "N passed, M failed".

import { mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const ROOT = resolve(HERE, '..', '..');
const OUT = resolve(process.env.PINFOLD_TEST_OUT ?? join(HERE, '..', 'test-output'));
const BASE = process.env.PINFOLD_URL?.replace(/\/+$/, '');
const TOKEN = process.env.PINFOLD_TOKEN;
const KERNEL = resolve(ROOT, process.env.PINFOLD_KERNEL ?? 'target/guest/linux/Image');
const INITRD = resolve(ROOT, process.env.PINFOLD_INITRD ?? 'target/guest/initramfs.cpio.gz');
const BOOTARGS = 'console=ttyAMA0 earlycon=pl011,0x09000000';
/** A Linux boot under TCG on a loaded host, at most. */
const BOOT_MS = 150_000;
/** The kernel's upload (~1 MB/s under TCG), at most. */
const UPLOAD_MS = 180_000;
/** A DELETE, at most: it stops the partition and queues its RAM for scrubbing after the answer (hv::scrub), so only a loaded host makes it slow. */
const DELETE_MS = 90_000;
/** Whole-run limit: a hung browser must not hang CI. */
const DEADLINE_MS = 900_000;

if (!BASE || !TOKEN) {
  console.log('FAIL - PINFOLD_URL and PINFOLD_TOKEN are required (this test runs against a live manager)');
  console.log('0 passed, 1 failed');
  process.exit(1);
}

const results = [];
let page = null;
/** Once a step fails, the ones that build on it are reported as skipped failures. */
let broken = null;

async function check(name, fn) {
  const started = Date.now();
  if (broken !== null) {
    results.push({ name, ok: false });
    console.log(`FAIL - ${name}: not run (after "${broken}" failed)`);
    return;
  }
  try {
    await fn();
    results.push({ name, ok: true });
    console.log(`ok   - ${name} (${Date.now() - started} ms)`);
  } catch (e) {
    results.push({ name, ok: false });
    broken = name;
    const shot = join(OUT, `ui-live-fail-${results.length}.png`);
    await page?.screenshot({ path: shot, fullPage: true }).catch(() => {});
    console.log(`FAIL - ${name}: ${e instanceof Error ? e.message.split('\n')[0] : String(e)} (screenshot ${shot})`);
  }
}

function summary() {
  const passed = results.filter((r) => r.ok).length;
  console.log(`${passed} passed, ${results.length - passed} failed`);
  return results.length - passed;
}

const deadline = setTimeout(() => {
  console.log(`FAIL - whole run exceeded ${DEADLINE_MS / 1000} s`);
  results.push({ name: 'deadline', ok: false });
  summary();
  process.exit(1);
}, DEADLINE_MS);

// --- the API, for what the UI's result is checked against --------------------
async function get(path) {
  // Reads need a credential too (docs/API.md).
  const res = await fetch(`${BASE}${path}`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  if (!res.ok) throw new Error(`GET ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}
const partitions = async () => (await get('/api/v1/partitions')).partitions;
const partition = async (name) => (await partitions()).find((p) => p.name === name);
const cpuOwner = async (cpu) => (await get('/api/v1/resources')).cpus.find((c) => c.cpu === cpu)?.partition ?? null;

async function until(what, ms, probe, every = 250) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what} (waited ${ms / 1000} s)`);
    await page.waitForTimeout(every);
  }
}

// --- the UI ---------------------------------------------------------------------
mkdirSync(OUT, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'pinfold-ui-live-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  // The manager's self-signed certificate, trusted by its SPKI hash.
  args: [...(process.env.PINFOLD_SPKI ? [`--ignore-certificate-errors-spki-list=${process.env.PINFOLD_SPKI}`] : []), '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1440, height: 960 },
});
page = context.pages()[0] ?? (await context.newPage());
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));

const consoleText = () => page.locator('[data-testid="console"] .xterm-rows').innerText();
const headState = (state) => page.locator(`.page-head [data-field="state"][data-state="${state}"]`);

/** Click a partition page's action button (and confirm: every action but Start asks). */
async function act(action) {
  await page.locator(`.page-head [data-action="${action}"]:not([disabled])`).click({ timeout: 10_000 });
  if (action !== 'start') await page.locator('[data-testid="confirm-ok"]').click({ timeout: 5_000 });
}

/**
 * Sample the `kind` upload's <progress> until its select has the image; the
 * distinct values seen (3 decimals) and the phases its label named ("Sent"
 * by the browser, "Received by the manager", "Stored"). An upload error
 * beside the field ends it.
 */
async function sampleUpload(kind, ms) {
  const seen = new Set();
  const phases = new Set();
  const end = Date.now() + ms;
  while ((await page.locator(`#f-${kind}`).inputValue()) === '') {
    const err = page.locator(`[data-error-for="${kind}"]`);
    if (await err.isVisible()) throw new Error(`the ${kind} upload was refused: ${await err.innerText()}`);
    if (Date.now() > end) throw new Error(`the ${kind} upload did not finish in ${ms / 1000} s (bar values ${JSON.stringify([...seen])})`);
    const v = await page
      .locator(`[data-testid="progress-${kind}"]`)
      .evaluate((el) => (el.closest('.progress')?.hidden ? null : [el.value, el.nextElementSibling?.textContent ?? '']))
      .catch(() => null);
    if (v !== null) {
      seen.add(Math.round(v[0] * 1000) / 1000);
      phases.add(v[1].split(':')[0]);
    }
    await page.waitForTimeout(150);
  }
  return { values: [...seen].sort((a, b) => a - b), phases: [...phases] };
}

/** Wait until the console view shows boot N's marker (header) and `line` on its screen. */
async function bootSeen(name, boot, line) {
  await until(`the console view never showed "${name} boot ${boot}"`, BOOT_MS, async () => {
    const label = await page.locator('[data-testid="console-boot"]').innerText().catch(() => '');
    return label.includes(`boot ${boot} at`);
  });
  await until(`no "${line}" on ${name}'s console screen`, BOOT_MS, async () => (await consoleText()).includes(line));
}

const alphaBefore = await partition('alpha').catch(() => undefined);
const uploaded = [];
const notes = [];

try {
  // Reads need a credential too (docs/API.md): a fresh tab signs in first,
  // as an operator would (one dialog, before the page reads anything).
  await page.goto(`${BASE}/`);
  await check('sign-in: one token dialog before anything else; then the overview, and no dialog again', async () => {
    await page.locator('[data-testid="token-dialog"]').waitFor({ timeout: 10_000 });
    const said = await page.locator('[data-testid="token-reason"]').innerText();
    if (/rejected/i.test(said)) throw new Error(`the first token dialog says: ${said}`);
    await page.locator('#token-input').fill(TOKEN);
    await page.locator('[data-testid="token-save"]').click();
    await page.locator('[data-testid="cpu-map"]').waitFor({ timeout: 10_000 });
    await page.waitForTimeout(1_000);
    if (await page.locator('[data-testid="token-dialog"]').isVisible()) throw new Error('the token dialog opened again');
  });

  await check('alpha is stopped and deleted in the UI; CPU 1 is free', async () => {
    if (!alphaBefore?.config) throw new Error(`alpha is not there to start from (${JSON.stringify(alphaBefore)})`);
    await page.goto(`${BASE}/#/partitions/alpha`);
    await page.locator('[data-page="partition"][data-name="alpha"]').waitFor({ timeout: 10_000 });
    if (alphaBefore.state !== 'stopped') {
      await act('stop');
      await headState('stopped').waitFor({ timeout: 20_000 });
    }
    await page.locator('[data-testid="delete-partition"]:not([disabled])').click({ timeout: 10_000 });
    await page.locator('[data-testid="confirm-ok"]').click();
    // The hypervisor scrubs the RAM before it answers (seconds under TCG).
    await page.locator('[data-testid="delete-partition"]', { hasText: 'Deleting' }).waitFor({ timeout: 5_000 }).catch(() => {});
    const t0 = Date.now();
    await page.waitForFunction(() => window.location.hash === '#/', null, { timeout: DELETE_MS });
    notes.push(`delete click to the UI's answer: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    if (await partition('alpha')) throw new Error('the API still lists alpha');
    if ((await cpuOwner(1)) !== null) throw new Error('CPU 1 is still owned');
    await page.locator('[data-testid="cpu-map"] .cpu-tile[data-cpu="1"][data-owner=""]').waitFor({ timeout: 10_000 });
  });

  await check('create form: kernel and initrd uploaded, the bar seen below 100 % at least twice, then complete', async () => {
    await page.locator('[data-testid="new-partition"]').click({ timeout: 10_000 });
    await page.locator('[data-testid="partition-form"]').waitFor({ timeout: 10_000 });
    await page.locator('#f-name').fill('gamma');
    await page.locator('#f-memory_mib').fill('256');
    await page.locator('#f-bootargs').fill(BOOTARGS);
    const size = statSync(KERNEL).size;
    const started = Date.now();
    await page.locator('[data-testid="upload-kernel"]').setInputFiles(KERNEL);
    const k = await sampleUpload('kernel', UPLOAD_MS);
    const secs = (Date.now() - started) / 1000;
    const between = k.values.filter((v) => v > 0 && v < 1);
    if (between.length < 2) throw new Error(`the kernel's bar showed only ${JSON.stringify(k.values)}`);
    const label = await page.locator('.progress:has([data-testid="progress-kernel"]) .muted').innerText();
    if (!/^Stored: /.test(label) || (await page.locator('[data-testid="progress-kernel"]').evaluate((el) => el.value)) !== 1) throw new Error(`the kernel's bar did not end complete: ${label}`);
    notes.push(`kernel ${(size / 1e6).toFixed(1)} MB uploaded through the form in ${secs.toFixed(1)} s (${(size / 1e6 / secs).toFixed(2)} MB/s); bar values below 100 %: ${between.length} distinct, ${between.slice(0, 4).join(', ')}…; label phases: ${k.phases.join(' / ')}`);
    uploaded.push(await page.locator('#f-kernel').inputValue());
    await page.locator('[data-testid="upload-initrd"]').setInputFiles(INITRD);
    await sampleUpload('initrd', UPLOAD_MS);
    uploaded.push(await page.locator('#f-initrd').inputValue());
    const imgs = (await get('/api/v1/images')).images;
    for (const id of uploaded) {
      const img = imgs.find((i) => i.id === id);
      if (img?.state !== 'ready' || img.received !== img.size) throw new Error(`image ${id} is not complete in the API: ${JSON.stringify(img)}`);
    }
    if (imgs.find((i) => i.id === uploaded[0])?.size !== size) throw new Error('the kernel the API holds is not the file’s size');
  });

  await check('create on CPU 2: the API’s sentence beside the CPUs field, nothing created', async () => {
    await page.locator('#f-cpus').fill('2');
    await page.locator('[data-testid="form-submit"]').click();
    const err = page.locator('[data-error-for="cpus"]');
    await err.waitFor({ state: 'visible', timeout: 15_000 });
    const said = await err.innerText();
    if (!said.includes('CPU 2 is also used by partition "beta"')) throw new Error(`the cpus error says: ${said}`);
    if (!(await page.locator('#f-cpus').evaluate((e) => e.classList.contains('invalid')))) throw new Error('the CPUs input is not marked invalid');
    if (await page.locator('[data-testid="form-error"]').isVisible()) throw new Error(`a form-wide error is shown too: ${await page.locator('[data-testid="form-error"]').innerText()}`);
    if (await partition('gamma')) throw new Error('gamma was half-created');
    notes.push(`CPU 2 refused beside the field: ${said}`);
  });

  await check('create on CPU 1: gamma is listed, stopped, on CPU 1', async () => {
    await page.locator('#f-cpus').fill('1');
    if (await page.locator('[data-error-for="cpus"]').isVisible()) throw new Error('the cpus error stayed after the field was changed');
    await page.locator('[data-testid="form-submit"]').click();
    await page.locator('[data-page="partition"][data-name="gamma"]').waitFor({ timeout: 15_000 });
    await headState('stopped').waitFor({ timeout: 10_000 });
    const g = await partition('gamma');
    if (JSON.stringify(g?.cpus) !== '[1]' || g?.config?.memory_mib !== 256 || g?.config?.kernel !== uploaded[0] || g?.config?.initrd !== uploaded[1]) throw new Error(`the API says ${JSON.stringify(g)}`);
    await page.goto(`${BASE}/#/`);
    await page.locator('tr[data-partition="gamma"] [data-field="state"][data-state="stopped"]').waitFor({ timeout: 10_000 });
    await page.locator('[data-testid="cpu-map"] .cpu-tile[data-cpu="1"][data-owner="gamma"]').waitFor({ timeout: 10_000 });
  });

  await check("start: gamma's console view shows its boot marker and the guest's UP line", async () => {
    await page.locator('tr[data-partition="gamma"] a.plink').click();
    await page.locator('[data-page="partition"][data-name="gamma"]').waitFor({ timeout: 10_000 });
    const t0 = Date.now();
    await act('start');
    await headState('running').waitFor({ timeout: 30_000 });
    await bootSeen('gamma', 1, 'PINFOLD-GUEST-UP name=gamma');
    notes.push(`start click to gamma's UP line in the console view: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  });

  await check('stop, then edit: bootargs and memory of the stopped gamma change', async () => {
    await act('stop');
    await headState('stopped').waitFor({ timeout: 20_000 });
    await page.locator('[data-testid="edit-partition"]:not(.btn-disabled)').click({ timeout: 10_000 });
    await page.locator('[data-page="edit"]').waitFor({ timeout: 10_000 });
    await page.waitForFunction(() => document.querySelector('#f-name')?.value === 'gamma', null, { timeout: 10_000 });
    if ((await page.locator('#f-kernel').inputValue()) !== uploaded[0]) throw new Error('the edit form does not show gamma’s kernel');
    await page.locator('#f-memory_mib').fill('384');
    await page.locator('#f-bootargs').fill(`${BOOTARGS} pinfold.changed=1`);
    await page.locator('[data-testid="form-submit"]').click();
    await page.locator('[data-page="partition"][data-name="gamma"]').waitFor({ timeout: 15_000 });
    const g = await partition('gamma');
    if (g?.config?.memory_mib !== 384 || g?.config?.bootargs !== `${BOOTARGS} pinfold.changed=1`) throw new Error(`the API says ${JSON.stringify(g?.config)}`);
  });

  await check('start again: boot 2 in the console view, with the new command line and 384 MiB', async () => {
    await act('start');
    await headState('running').waitFor({ timeout: 30_000 });
    await bootSeen('gamma', 2, 'PINFOLD-GUEST-UP name=gamma');
    // The guest prints its command line just after the UP line.
    await until('boot 2 did not show the changed bootargs on the console screen', 20_000, async () => /PINFOLD-GUEST-CMDLINE name=gamma .*pinfold\.changed=1/.test((await consoleText()).replaceAll('\n', '')));
    // The kernel's memory line scrolled off long ago: the history has it.
    await until('boot 2 did not have 384 MiB (no /393216K in its history)', 20_000, async () => {
      const history = await (await fetch(`${BASE}/api/v1/partitions/gamma/console/history`, { headers: { Authorization: `Bearer ${TOKEN}` } })).text();
      const at = history.lastIndexOf('=== pinfold: gamma boot 2 at');
      return at >= 0 && history.slice(at).includes('/393216K');
    });
  });

  await check('stop and delete gamma in the UI; the resources view shows CPU 1 free', async () => {
    await act('stop');
    await headState('stopped').waitFor({ timeout: 20_000 });
    await page.locator('[data-testid="delete-partition"]:not([disabled])').click({ timeout: 10_000 });
    await page.locator('[data-testid="confirm-ok"]').click();
    // The hypervisor scrubs the RAM before it answers (seconds under TCG).
    await page.locator('[data-testid="delete-partition"]', { hasText: 'Deleting' }).waitFor({ timeout: 5_000 }).catch(() => {});
    const t0 = Date.now();
    await page.waitForFunction(() => window.location.hash === '#/', null, { timeout: DELETE_MS });
    notes.push(`delete click to the UI's answer: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    if (await partition('gamma')) throw new Error('the API still lists gamma');
    await page.goto(`${BASE}/#/resources`);
    await page.locator('[data-testid="res-cpus"] .cpu-tile[data-cpu="1"][data-owner=""]').waitFor({ timeout: 10_000 });
    await page.screenshot({ path: join(OUT, 'ui-live-resources.png'), fullPage: true });
  });
} finally {
  // Put the shared boot back as it was: alpha with its own settings (the
  // boot bundle's images) through the form, then the uploads deleted.
  const wasBroken = broken;
  broken = null;
  if (alphaBefore?.config && !(await partition('alpha').catch(() => ({})))) {
    await check('alpha is created again through the form from its own settings and runs', async () => {
      if ((await partition('gamma'))?.state === 'running') await fetch(`${BASE}/api/v1/partitions/gamma/stop`, { method: 'POST', headers: { Authorization: `Bearer ${TOKEN}` } });
      if (await partition('gamma')) {
        await until('gamma did not stop', 20_000, async () => (await partition('gamma'))?.state === 'stopped');
        await fetch(`${BASE}/api/v1/partitions/gamma`, { method: 'DELETE', headers: { Authorization: `Bearer ${TOKEN}` } });
      }
      const c = alphaBefore.config;
      await page.goto(`${BASE}/#/`);
      await page.goto(`${BASE}/#/new`);
      await page.locator('[data-testid="partition-form"]').waitFor({ timeout: 10_000 });
      await page.locator(`#f-kernel option[value="${c.kernel}"]`).waitFor({ state: 'attached', timeout: 10_000 });
      await page.locator('#f-name').fill('alpha');
      await page.locator('#f-cpus').fill(c.cpus.join(','));
      await page.locator('#f-memory_mib').fill(String(c.memory_mib));
      await page.locator('#f-kernel').selectOption(c.kernel);
      if (c.initrd !== null) await page.locator('#f-initrd').selectOption(c.initrd);
      await page.locator('#f-bootargs').fill(c.bootargs);
      await page.locator('#f-restart').selectOption(c.restart);
      if (c.restart !== 'never') await page.locator('#f-restart_limit').fill(String(c.restart_limit));
      await page.locator('#f-watchdog_s').fill(String(c.watchdog_s));
      await page.locator('#f-shutdown_timeout_s').fill(String(c.shutdown_timeout_s));
      // Its PCI functions (the default plan gives alpha its NIC, 00:02.0).
      await page.locator('#f-pci').fill((c.pci ?? []).join(', '));
      await page.locator('#f-autostart').setChecked(alphaBefore.state === 'running' || c.autostart);
      await page.locator('[data-testid="form-submit"]').click();
      await page.locator('[data-page="partition"][data-name="alpha"]').waitFor({ timeout: 15_000 });
      const a = await partition('alpha');
      const { autostart: _was, ...same } = c;
      const { autostart: _now, ...back } = a?.config ?? {};
      if (JSON.stringify(a?.cpus) !== JSON.stringify(alphaBefore.cpus) || JSON.stringify(back) !== JSON.stringify(same)) throw new Error(`alpha came back as ${JSON.stringify(a?.config)}, was ${JSON.stringify(c)}`);
      if (alphaBefore.state === 'running') await until(`alpha is ${(await partition('alpha'))?.state}, not running`, 30_000, async () => (await partition('alpha'))?.state === 'running');
    });
  }
  for (const id of uploaded) {
    await fetch(`${BASE}/api/v1/images/${id}`, { method: 'DELETE', headers: { Authorization: `Bearer ${TOKEN}` } }).catch(() => {});
  }
  broken = null;
  await check('no uncaught errors in the page', async () => {
    if (pageErrors.length > 0) throw new Error(pageErrors.join(' | '));
  });
  if (wasBroken !== null) broken = wasBroken;
  await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  clearTimeout(deadline);
}

for (const n of notes) console.log(`# ${n}`);
process.exitCode = summary() > 0 ? 1 : 0;
