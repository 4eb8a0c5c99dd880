// Browser test of the Pinfold web UI in Debian's Chromium, driven by playwright-core.
//
//   PINFOLD_URL=http://host:8080 PINFOLD_TOKEN=... node tests/ui.test.mjs
//
// Without PINFOLD_URL it starts tests/mock-server.mjs on a free port (serving
// web-ui/dist, so build first: `npm run test:ui` does). Screenshots go to
// $PINFOLD_TEST_OUT (default web-ui/test-output). Prints "N passed, M failed";
// the exit code is non-zero when anything failed.

import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { createMock, MOCK_TOKEN } from './mock-server.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const OUT = resolve(process.env.PINFOLD_TEST_OUT ?? join(HERE, '..', 'test-output'));
// The manager's self-signed certificate, trusted by its SPKI hash (the
// xtask sets PINFOLD_SPKI; docs/DEPLOY.md, "Certificates").
const SPKI = process.env.PINFOLD_SPKI ? [`--ignore-certificate-errors-spki-list=${process.env.PINFOLD_SPKI}`] : [];
const CHROMIUM_ARGS = [
  ...SPKI,
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
/** Whole-run limit: a hung browser must not hang CI. */
const DEADLINE_MS = 200_000;

const results = [];

async function check(name, fn) {
  const started = Date.now();
  try {
    await fn();
    results.push({ name, ok: true });
    console.log(`ok   - ${name} (${Date.now() - started} ms)`);
  } catch (e) {
    results.push({ name, ok: false });
    console.log(`FAIL - ${name}: ${e instanceof Error ? e.message.split('\n')[0] : String(e)}`);
  }
}

function summary() {
  const passed = results.filter((r) => r.ok).length;
  const failed = results.length - passed;
  console.log(`${passed} passed, ${failed} failed`);
  return failed;
}

const deadline = setTimeout(() => {
  console.log(`FAIL - whole run exceeded ${DEADLINE_MS / 1000} s`);
  results.push({ name: 'deadline', ok: false });
  summary();
  process.exit(1);
}, DEADLINE_MS);

let mock = null;
let base = process.env.PINFOLD_URL?.replace(/\/+$/, '');
const token = process.env.PINFOLD_TOKEN ?? MOCK_TOKEN;
/** Reads need a token too (docs/API.md), the test's own requests included. */
const AUTH = { Authorization: `Bearer ${token}` };
if (!base) {
  mock = createMock();
  base = await mock.listen(0);
  console.log(`# using the mock manager at ${base}`);
} else {
  console.log(`# using the manager at ${base}`);
}

mkdirSync(OUT, { recursive: true });
const profile = mkdtempSync(join(tmpdir(), 'pinfold-ui-chromium-'));
// A persistent context is how Playwright takes a --user-data-dir of our choosing.
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  args: CHROMIUM_ARGS,
  viewport: { width: 1440, height: 960 },
});
const page = context.pages()[0] ?? (await context.newPage());
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));

/** The text an operator sees in the xterm screen (its DOM renderer's rows). */
const consoleText = () => page.locator('[data-testid="console"] .xterm-rows').innerText();

/** The console's read position, from its status line ("following · offset 1,842"). */
async function consoleOffset() {
  const status = await page.locator('[data-testid="console-status"]').innerText();
  const m = /offset ([\d,]+)/.exec(status);
  return m ? Number(m[1].replaceAll(',', '')) : NaN;
}

async function partitionsFromApi() {
  const res = await fetch(`${base}/api/v1/partitions`, { headers: AUTH });
  return (await res.json()).partitions;
}

/** A terminal's automatic answer (cursor position report, device attributes) sent as console input. */
const TERMINAL_REPORT = /\x1b\[[\d;?>=]*[Rcn]|\\u001b\[[\d;?>=]*[Rcn]/;

/** Responses the page got answered 401 (a sign-in must not set off a storm of them). */
const refused = [];
page.on('response', (r) => {
  if (r.status() === 401) refused.push(new URL(r.url()).pathname);
});
const dialog = page.locator('[data-testid="token-dialog"]');

/** The token dialog is open, alone (and, `first`, no view has mounted: nothing read yet); resolves with what it says. */
async function signInDialog(first = true) {
  await dialog.waitFor({ timeout: 10_000 });
  const dialogs = await dialog.count();
  if (dialogs !== 1) throw new Error(`${dialogs} token dialogs are open`);
  const views = await page.locator('main [data-page]').count();
  if (first && views !== 0) throw new Error('a view mounted (and read) before the token was given');
  return page.locator('[data-testid="token-reason"]').innerText();
}

try {
  // A fresh tab (no token kept): the page, like an operator's, has to sign in.
  await page.goto(`${base}/#/partitions/beta`);

  await check('sign-in: a fresh tab asks for the token once, before anything else, and not as "rejected"', async () => {
    const said = await signInDialog();
    if (/rejected/i.test(said)) throw new Error(`the first token dialog says: ${said}`);
    if (!/token/i.test(said)) throw new Error(`the first token dialog does not say why: ${said}`);
    await page.waitForTimeout(1_000);
    if (refused.length > 1) throw new Error(`${refused.length} requests were refused before a token was entered: ${refused.join(', ')}`);
  });

  await check('sign-in cancelled: no dialog again and no request refused while signed out; "Enter token" asks, not as "rejected"', async () => {
    await page.locator('[data-testid="token-cancel"]').click();
    await dialog.waitFor({ state: 'hidden', timeout: 5_000 });
    const before = refused.length;
    await page.waitForTimeout(3_000);
    if (await dialog.isVisible()) throw new Error('the token dialog opened again by itself');
    if (refused.length !== before) throw new Error(`refused while signed out: ${refused.slice(before).join(', ')}`);
    const link = await page.locator('[data-testid="link"]').innerText();
    if (!/no token/i.test(link)) throw new Error(`the header's link status says: ${link}`);
    await page.locator('[data-testid="token-button"]', { hasText: 'Enter token' }).click();
    const said = await signInDialog(false);
    if (/rejected/i.test(said)) throw new Error(`the dialog says: ${said}`);
  });

  await check('sign-in: a wrong token is shown rejected once; the right one opens the page with no further dialog', async () => {
    const before = refused.length;
    await page.locator('#token-input').fill('wrong-token');
    await page.locator('[data-testid="token-save"]').click();
    await page.waitForFunction(() => /rejected that token/i.test(document.querySelector('[data-testid="token-reason"]')?.textContent ?? ''), null, { timeout: 5_000 });
    await signInDialog(false);
    if (refused.length - before !== 1) throw new Error(`the wrong token was refused ${refused.length - before} times (want 1)`);
    await page.locator('#token-input').fill(token);
    await page.locator('[data-testid="token-save"]').click();
    await page.locator('[data-page="partition"][data-name="beta"]').waitFor({ timeout: 10_000 });
    const kept = await page.evaluate(() => sessionStorage.getItem('pinfold.token'));
    if (kept !== token) throw new Error('sessionStorage does not hold the entered token');
  });

  await check('after sign-in: no token dialog opens by itself, nothing more is refused, no terminal reply is sent', async () => {
    // beta's shell asks for the cursor position (ESC[6n) after its prompt;
    // xterm.js must not answer it as console input.
    const before = refused.length;
    const until = Date.now() + 20_000;
    while (!(await consoleText()).includes('PINFOLD-GUEST-UP')) {
      if (Date.now() > until) throw new Error('no PINFOLD-GUEST-UP line in the console within 20 s');
      await page.waitForTimeout(250);
    }
    await page.waitForTimeout(1_500);
    if (await dialog.isVisible()) throw new Error('the token dialog opened without any action');
    if (refused.length !== before) throw new Error(`refused after sign-in: ${refused.slice(before).join(', ')}`);
    if (mock !== null) {
      const sent = mock.consoleInputs.filter((i) => TERMINAL_REPORT.test(i.text));
      if (sent.length > 0) throw new Error(`terminal replies were sent as input: ${JSON.stringify(sent)}`);
    }
    const text = await consoleText();
    if (/\^\[\[\d+;\d+R/.test(text)) throw new Error('a stray cursor report is on the console screen');
    await page.goto(`${base}/#/`);
  });

  await check('partitions alpha and beta are listed', async () => {
    await page.locator('tr[data-partition="alpha"]').waitFor({ timeout: 10_000 });
    await page.locator('tr[data-partition="beta"]').waitFor({ timeout: 10_000 });
  });

  await check('host CPU map shows CPU 0 owned by mgmt', async () => {
    await page.locator('.cpu-tile[data-cpu="0"][data-owner="mgmt"]').waitFor({ timeout: 5_000 });
  });

  await check("the host panel shows the GIC found and its features, and each partition's interface", async () => {
    const host = await (await fetch(`${base}/api/v1/host`, { headers: AUTH })).json();
    if (!host.gic) throw new Error('GET /api/v1/host has no gic');
    const want = `GICv${host.gic.version} (${host.gic.revision})`;
    await page.waitForFunction((w) => document.querySelector('[data-field="gic_version"]')?.textContent === w, want, { timeout: 5_000 });
    const features = await page.locator('[data-field="gic_features"]').innerText();
    if (!features.includes(`ITS ${host.gic.its_count}`) || !features.includes(`LPIs ${host.gic.lpis ? 'yes' : 'no'}`)) {
      throw new Error(`GIC features read "${features}"`);
    }
    for (const p of await partitionsFromApi()) {
      const cell = page.locator(`tr[data-partition="${p.name}"] [data-field="gic_interface"]`);
      await page.waitForFunction(([n, w]) => document.querySelector(`tr[data-partition="${n}"] [data-field="gic_interface"]`)?.textContent === w, [p.name, p.gic_interface], { timeout: 5_000 });
      if ((await cell.innerText()) !== 'gicv3') throw new Error(`${p.name}'s GIC cell reads "${await cell.innerText()}"`);
    }
  });

  await page.screenshot({ path: join(OUT, 'overview.png'), fullPage: true });

  // Against the mock only: a live manager's host is what it is (the boot cases run QEMU's GICv3).
  if (mock !== null) {
    await check("on a GICv5 host the host panel shows GICv5 with its IRSes and GCIE_LEGACY, and each partition the interface it got", async () => {
      // A second mock on a GICv5 with FEAT_GCIE_LEGACY, alpha asking for gic = "v3".
      const v5 = createMock({ gic: 'v5', alphaGic: 'v3' });
      const base5 = await v5.listen(0);
      const p5 = await context.newPage();
      /** Waits until `selector`'s text is `want`; fails saying what it reads. */
      const reads = async (selector, want) => {
        try {
          await p5.waitForFunction(([s, w]) => document.querySelector(s)?.textContent === w, [selector, want], { timeout: 10_000 });
        } catch {
          throw new Error(`${selector} reads "${await p5.locator(selector).first().textContent().catch(() => null)}", not "${want}"`);
        }
      };
      try {
        await p5.addInitScript((t) => sessionStorage.setItem('pinfold.token', t), MOCK_TOKEN);
        await p5.goto(`${base5}/#/`);
        await reads('[data-field="gic_version"]', 'GICv5 (v5)');
        const features = await p5.locator('[data-field="gic_features"]').innerText();
        for (const want of ['ITS 1', 'LPIs yes', 'IRS 2', 'GCIE_LEGACY yes']) {
          if (!features.includes(want)) throw new Error(`GIC features read "${features}" (no "${want}")`);
        }
        for (const [name, want] of [['mgmt', 'gicv5'], ['alpha', 'gicv3'], ['beta', 'gicv5']]) {
          await reads(`tr[data-partition="${name}"] [data-field="gic_interface"]`, want);
        }
        await p5.screenshot({ path: join(OUT, 'overview-gicv5.png'), fullPage: true });
        await p5.goto(`${base5}/#/partitions/alpha`);
        await reads('[data-page="partition"] [data-field="gic_interface"]', 'gicv3 (asked: v3)');
        await p5.goto(`${base5}/#/partitions/beta`);
        await reads('[data-page="partition"] [data-field="gic_interface"]', 'gicv5 (asked: auto)');
        if (v5.violations.length > 0) throw new Error(v5.violations.slice(0, 5).join(' | '));
      } finally {
        await p5.close();
        await v5.close();
      }
    });
  }

  await check("beta's console shows PINFOLD-GUEST-UP", async () => {
    await page.locator('tr[data-partition="beta"] a.plink').click();
    await page.locator('[data-page="partition"][data-name="beta"]').waitFor({ timeout: 5_000 });
    const until = Date.now() + 20_000;
    while (!(await consoleText()).includes('PINFOLD-GUEST-UP')) {
      if (Date.now() > until) throw new Error('no PINFOLD-GUEST-UP line in the console within 20 s');
      await page.waitForTimeout(250);
    }
  });

  let bootsBefore = NaN;
  let offsetBefore = NaN;
  await check('a stale token kept in the tab is asked about once on reload (as rejected), before the page reads; restart then needs no dialog', async () => {
    await page.goto(`${base}/#/partitions/beta`);
    const bootField = page.locator('[data-page="partition"] [data-field="boot_count"]');
    await page.waitForFunction(() => /^\d+$/.test(document.querySelector('[data-field="boot_count"]')?.textContent ?? ''));
    bootsBefore = Number(await bootField.innerText());
    // As if the credential had been rotated since the operator entered it.
    await page.evaluate(() => sessionStorage.setItem('pinfold.token', 'stale-token'));
    const before = refused.length;
    await page.reload();
    const said = await signInDialog();
    if (!/rejected the token kept for this tab/i.test(said)) throw new Error(`the dialog does not say the kept token was rejected: ${said}`);
    await page.waitForTimeout(1_000);
    if (refused.length - before !== 1) throw new Error(`the stale token was refused ${refused.length - before} times (want 1): ${refused.slice(before).join(', ')}`);
    await page.locator('#token-input').fill(token);
    await page.locator('[data-testid="token-save"]').click();
    await page.locator('[data-page="partition"][data-name="beta"]').waitFor({ timeout: 10_000 });
    await page.waitForFunction(() => /offset [1-9]/.test(document.querySelector('[data-testid="console-status"]')?.textContent ?? ''), null, { timeout: 10_000 });
    offsetBefore = await consoleOffset();
    await page.locator('.page-head [data-action="restart"]').click();
    await page.locator('[data-testid="confirm-ok"]').click();
    await page.waitForTimeout(1_000);
    if (await dialog.isVisible()) throw new Error('the token dialog opened again for the restart');
  });

  await check("restart of beta increases beta's boot count", async () => {
    const until = Date.now() + 30_000;
    for (;;) {
      const now = Number(await page.locator('[data-page="partition"] [data-field="boot_count"]').innerText());
      if (now > bootsBefore) break;
      if (Date.now() > until) throw new Error(`boot count stayed ${now} (was ${bootsBefore})`);
      await page.waitForTimeout(250);
    }
    await page.locator('.page-head [data-field="state"][data-state="running"]').waitFor({ timeout: 20_000 });
  });

  await check("beta's console keeps following across the restart", async () => {
    const until = Date.now() + 20_000;
    while ((await consoleOffset()) <= offsetBefore) {
      if (Date.now() > until) throw new Error(`console offset stayed at ${offsetBefore}`);
      await page.waitForTimeout(250);
    }
    // The hypervisor's boot marker of the new boot is named in the console's header.
    const boots = await page.locator('[data-page="partition"] [data-field="boot_count"]').innerText();
    await page.locator('[data-testid="console-boot"]', { hasText: `boot ${boots} at ` }).waitFor({ timeout: 20_000 });
    // Let a few polls land so the rate charts have points in the screenshot.
    await page.waitForTimeout(4_500);
  });

  await check("typing into beta's console reaches the guest", async () => {
    // The restarted guest's shell must be reading its console first: input
    // that arrives while the kernel still boots is dropped when the shell
    // opens the tty (on a loaded host the prompt can come seconds later).
    const ready = Date.now() + 60_000;
    while (!/# *$/.test((await consoleText()).trimEnd())) {
      if (Date.now() > ready) throw new Error("beta's shell prompt never appeared after the restart");
      await page.waitForTimeout(250);
    }
    await page.locator('[data-testid="console"] .xterm').click();
    await page.keyboard.type('echo pinfold-input-check');
    await page.keyboard.press('Enter');
    // Once as the echoed command line, once as the guest's answer.
    const until = Date.now() + 10_000;
    while (((await consoleText()).match(/pinfold-input-check/g) ?? []).length < 2) {
      if (Date.now() > until) throw new Error('the guest did not answer the typed command');
      await page.waitForTimeout(200);
    }
  });

  await check("a paste into beta's console arrives whole and in order", async () => {
    // One onData of 64 characters: the mock takes 16 bytes per POST, so the
    // UI must send the rest (in order) for the guest to echo it whole.
    const marker = `pinfold-paste-${'0123456789'.repeat(4)}`;
    await page.keyboard.insertText(`echo ${marker}`);
    await page.keyboard.press('Enter');
    const until = Date.now() + 15_000;
    while (((await consoleText()).split(marker).length - 1) < 2) {
      if (Date.now() > until) throw new Error('the pasted command did not come back whole (echo and answer)');
      await page.waitForTimeout(200);
    }
  });

  await page.screenshot({ path: join(OUT, 'ui.png'), fullPage: true });

  await check('alpha stays running while beta restarts', async () => {
    const alpha = (await partitionsFromApi()).find((p) => p.name === 'alpha');
    if (alpha?.state !== 'running') throw new Error(`API says alpha is ${alpha?.state}`);
    await page.goto(`${base}/#/`);
    await page.locator('tr[data-partition="alpha"] [data-field="state"][data-state="running"]').waitFor({ timeout: 5_000 });
    await page.locator('tr[data-partition="beta"] [data-field="state"][data-state="running"]').waitFor({ timeout: 10_000 });
  });

  await check("beta's console history downloads through the page (with the token) and holds both boots", async () => {
    await page.goto(`${base}/#/partitions/beta`);
    const button = page.locator('[data-testid="console-history"]');
    await button.waitFor({ state: 'visible', timeout: 10_000 });
    const [download] = await Promise.all([page.waitForEvent('download', { timeout: 20_000 }), button.click()]);
    if (download.suggestedFilename() !== 'beta-console.log') throw new Error(`saved as ${download.suggestedFilename()}`);
    const history = readFileSync(await download.path(), 'utf8');
    const boots = (history.match(/^=== pinfold: beta boot \d+ at /gm) ?? []).length;
    if (boots < 2) throw new Error(`the history has ${boots} boot markers (want 2 or more: beta was restarted)`);
  });

  await check('the event log follows the live stream with the token (not polling), and shows a new event', async () => {
    await page.goto(`${base}/#/events`);
    await page.locator('[data-testid="events-mode"]', { hasText: 'live' }).waitFor({ timeout: 15_000 });
    const top = Number((await page.locator('[data-testid="events"] .event').first().getAttribute('data-seq')) ?? 0);
    // A refused request is an event (login_refused): it must arrive over the stream.
    await fetch(`${base}/api/v1/partitions`, { headers: { Authorization: 'Bearer not-the-token' } });
    await page.waitForFunction((n) => Number(document.querySelector('[data-testid="events"] .event')?.getAttribute('data-seq') ?? 0) > n, top, { timeout: 15_000 });
    const mode = await page.locator('[data-testid="events-mode"]').innerText();
    if (!/live/.test(mode)) throw new Error(`the event log fell back: ${mode}`);
  });

  if (mock !== null) {
    // Only the mock can overrun a console ring on demand.
    await check('a console overrun shows the dropped-bytes notice', async () => {
      await page.goto(`${base}/#/partitions/alpha`);
      await page.locator('[data-testid="console-status"]', { hasText: 'following' }).waitFor({ timeout: 10_000 });
      await page.waitForTimeout(1_000);
      await fetch(`${base}/mock/flood?partition=alpha&bytes=${96 * 1024}`, { method: 'POST' });
      const notice = page.locator('[data-testid="console-dropped"]');
      await notice.waitFor({ state: 'visible', timeout: 10_000 });
      if (!/lost/i.test(await notice.innerText())) throw new Error('notice does not say output was lost');
    });
  }

  await check('views the manager does not serve are left out of the navigation', async () => {
    for (const [nav, path] of [['resources', '/api/v1/resources'], ['images', '/api/v1/images'], ['events', '/api/v1/events'], ['config', '/api/v1/config']]) {
      const served = (await fetch(`${base}${path}`, { headers: AUTH })).status !== 404;
      const link = page.locator(`.nav [data-nav="${nav}"]`);
      await page.waitForFunction(([n, s]) => {
        const a = document.querySelector(`.nav [data-nav="${n}"]`);
        return a !== null && a.hidden === !s;
      }, [nav, served], { timeout: 5_000 }).catch(() => {});
      if ((await link.isVisible()) !== served) throw new Error(`${nav}: the manager ${served ? 'serves' : 'does not serve'} ${path}, but the link is ${served ? 'hidden' : 'shown'}`);
    }
  });

  await check('at 400 px wide nothing is clipped: every Actions button is inside the viewport', async () => {
    await page.setViewportSize({ width: 400, height: 860 });
    try {
      for (const hash of ['#/', '#/partitions/beta']) {
        await page.goto(`${base}/${hash}`);
        await page.locator('[data-action="start"]').first().waitFor({ timeout: 10_000 });
        await page.waitForTimeout(300);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        if (overflow > 0) throw new Error(`${hash}: the page is ${overflow} px wider than the viewport`);
        const buttons = page.locator('button[data-action]:visible');
        const n = await buttons.count();
        if (n === 0) throw new Error(`${hash}: no action buttons`);
        for (let i = 0; i < n; i += 1) {
          const box = await buttons.nth(i).boundingBox();
          if (box === null || box.x < 0 || box.x + box.width > 400) throw new Error(`${hash}: action button ${i} at ${JSON.stringify(box)} is outside 0..400`);
        }
        if (hash === '#/') await page.screenshot({ path: join(OUT, 'narrow.png'), fullPage: true });
      }
    } finally {
      await page.setViewportSize({ width: 1440, height: 960 });
    }
  });

  if (mock !== null) {
    // The issue-9 flows, against the mock (the real manager does not serve these routes yet).
    const kernel = Buffer.alloc(2 * 1024 * 1024, 0x5a);
    kernel.write('ARM\x64', 56, 'latin1');
    const initrd = Buffer.alloc(1024 * 1024, 0x17);

    /** Sample a <progress>'s value until `done()`; returns the distinct values seen. */
    async function sampleProgress(testid, done) {
      const seen = new Set();
      const until = Date.now() + 30_000;
      while (!(await done())) {
        if (Date.now() > until) throw new Error(`${testid}: the upload did not finish in 30 s`);
        const v = await page.locator(`[data-testid="${testid}"]`).evaluate((el) => el.value).catch(() => null);
        if (v !== null) seen.add(Math.round(v * 1000) / 1000);
        await page.waitForTimeout(100);
      }
      return [...seen].sort((a, b) => a - b);
    }

    await check('create: kernel and initrd uploaded with a moving progress bar', async () => {
      await page.goto(`${base}/#/`);
      await page.locator('[data-testid="new-partition"]').click();
      await page.locator('[data-testid="partition-form"]').waitFor({ timeout: 5_000 });
      await page.locator('#f-name').fill('gamma');
      await page.locator('#f-memory_mib').fill('128');
      await page.locator('[data-testid="upload-kernel"]').setInputFiles({ name: 'gamma-Image', mimeType: 'application/octet-stream', buffer: kernel });
      const kSeen = await sampleProgress('progress-kernel', async () => (await page.locator('#f-kernel option', { hasText: 'gamma-Image' }).count()) > 0);
      const between = kSeen.filter((v) => v > 0 && v < 1);
      if (between.length < 3) throw new Error(`the kernel's bar showed only ${JSON.stringify(kSeen)}`);
      await page.locator('[data-testid="upload-initrd"]').setInputFiles({ name: 'gamma-initrd.cpio.gz', mimeType: 'application/octet-stream', buffer: initrd });
      const iSeen = await sampleProgress('progress-initrd', async () => (await page.locator('#f-initrd option', { hasText: 'gamma-initrd' }).count()) > 0);
      if (iSeen.filter((v) => v > 0 && v < 1).length < 1) throw new Error(`the initrd's bar showed only ${JSON.stringify(iSeen)}`);
      const chosen = await page.locator('#f-kernel').evaluate((s) => s.selectedOptions[0]?.textContent ?? '');
      if (!chosen.includes('gamma-Image')) throw new Error(`the uploaded kernel is not selected (${chosen})`);
      console.log(`#   kernel bar values: ${kSeen.length} distinct, e.g. ${between.slice(0, 5).join(', ')}`);
    });

    await check('create: an overlapping CPU is refused with the error beside the CPUs field', async () => {
      await page.locator('#f-cpus').fill('1');
      await page.locator('[data-testid="form-submit"]').click();
      const err = page.locator('[data-error-for="cpus"]');
      await err.waitFor({ state: 'visible', timeout: 5_000 });
      const said = await err.innerText();
      if (!said.includes('partition "gamma": cpus: CPU 1 is also used by partition "alpha"')) throw new Error(`cpus error says: ${said}`);
      if (!(await page.locator('#f-cpus').evaluate((e) => e.classList.contains('invalid')))) throw new Error('the CPUs input is not marked invalid');
      if ((await partitionsFromApi()).some((p) => p.name === 'gamma')) throw new Error('gamma was half-created');
    });

    await check('create: on a free CPU the partition is created (stopped)', async () => {
      await page.locator('#f-cpus').fill('4');
      await page.locator('[data-testid="form-submit"]').click();
      await page.locator('[data-page="partition"][data-name="gamma"]').waitFor({ timeout: 5_000 });
      await page.locator('.page-head [data-field="state"][data-state="stopped"]').waitFor({ timeout: 5_000 });
      const g = (await partitionsFromApi()).find((p) => p.name === 'gamma');
      if (JSON.stringify(g?.cpus) !== '[4]' || g?.config?.memory_mib !== 128) throw new Error(`API says ${JSON.stringify(g)}`);
    });

    await check('edit: bootargs and memory of the stopped partition change', async () => {
      await page.locator('[data-testid="edit-partition"]').click();
      await page.locator('[data-page="edit"]').waitFor({ timeout: 5_000 });
      await page.waitForFunction(() => document.querySelector('#f-name')?.value === 'gamma', null, { timeout: 5_000 });
      await page.locator('#f-memory_mib').fill('192');
      await page.locator('#f-bootargs').fill('console=ttyAMA0 quiet');
      await page.locator('[data-testid="form-submit"]').click();
      await page.locator('[data-page="partition"][data-name="gamma"]').waitFor({ timeout: 5_000 });
      const g = (await partitionsFromApi()).find((p) => p.name === 'gamma');
      if (g?.config?.memory_mib !== 192 || g?.config?.bootargs !== 'console=ttyAMA0 quiet') throw new Error(`API says ${JSON.stringify(g?.config)}`);
    });

    await check('resources: free CPU 5, gamma on CPU 4, RAM ranges and devices', async () => {
      await page.goto(`${base}/#/resources`);
      await page.locator('[data-testid="res-cpus"] .cpu-tile[data-cpu="5"][data-owner=""]').waitFor({ timeout: 5_000 });
      await page.locator('[data-testid="res-cpus"] .cpu-tile[data-cpu="4"][data-owner="gamma"]').waitFor({ timeout: 5_000 });
      await page.locator('[data-testid="res-ranges"] tr[data-owner="free"]').waitFor({ timeout: 5_000 });
      const ranges = await page.locator('[data-testid="res-ranges"] tbody tr').count();
      if (ranges < 5) throw new Error(`only ${ranges} RAM ranges shown`);
      const dev = await page.locator('[data-testid="res-devices"] tr[data-device="/pl011@9040000"]').innerText();
      if (!/free/.test(dev)) throw new Error(`device row: ${dev}`);
      const kept = await page.locator('[data-testid="res-devices"] tr[data-device="/pl011@9000000"]').innerText();
      if (!/hypervisor/.test(kept) || /free/.test(kept)) throw new Error(`the hypervisor's UART row: ${kept}`);
      await page.screenshot({ path: join(OUT, 'resources.png'), fullPage: true });
    });

    await check('delete: gamma goes, its CPU is free again', async () => {
      await page.goto(`${base}/#/partitions/gamma`);
      await page.locator('[data-testid="delete-partition"]:not([disabled])').click({ timeout: 5_000 });
      await page.locator('[data-testid="confirm-ok"]').click();
      // The answer waits for the RAM scrub: the button says so meanwhile.
      await page.locator('[data-testid="delete-partition"][disabled]', { hasText: 'Deleting' }).waitFor({ timeout: 2_000 });
      await page.waitForFunction(() => window.location.hash === '#/', null, { timeout: 5_000 });
      if ((await partitionsFromApi()).some((p) => p.name === 'gamma')) throw new Error('gamma is still there');
      const host = await (await fetch(`${base}/api/v1/host`)).json();
      if (host.cpus.find((c) => c.cpu === 4)?.partition !== null) throw new Error('CPU 4 is not free');
    });

    await check('a crash shows as crashed with its reason, and in the event log (filter: fault)', async () => {
      await fetch(`${base}/mock/crash?partition=alpha&reason=${encodeURIComponent('watchdog expired')}`, { method: 'POST' });
      await page.goto(`${base}/#/`);
      await page.locator('tr[data-partition="alpha"] [data-field="state"][data-state="crashed"]').waitFor({ timeout: 5_000 });
      const reason = await page.locator('tr[data-partition="alpha"] [data-field="last_crash"]').innerText();
      if (!reason.includes('watchdog expired')) throw new Error(`crash reason shown: ${reason}`);
      await page.goto(`${base}/#/events`);
      await page.locator('[data-testid="events"] .event[data-kind="fault"]', { hasText: 'watchdog expired' }).waitFor({ timeout: 5_000 });
      await page.locator('[data-testid="events"] .event[data-kind="state"]', { hasText: 'crashed' }).waitFor({ timeout: 5_000 });
      const first = await page.locator('[data-testid="events"] .event').first().getAttribute('data-seq');
      const last = await page.locator('[data-testid="events"] .event').last().getAttribute('data-seq');
      if (Number(first) < Number(last)) throw new Error('events are not newest first');
      await page.locator('[data-testid="event-filter"]').selectOption('fault');
      const kinds = await page.locator('[data-testid="events"] .event:visible').evaluateAll((els) => els.map((e) => e.dataset.kind));
      if (kinds.length === 0 || kinds.some((k) => k !== 'fault')) throw new Error(`filtered kinds: ${kinds}`);
      const mode = await page.locator('[data-testid="events-mode"]').innerText();
      if (!/live/.test(mode)) throw new Error(`the event log is not on the stream: ${mode}`);
      // A new event arrives live, on top.
      await fetch(`${base}/api/v1/partitions/alpha/start`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } });
      await page.locator('[data-testid="event-filter"]').selectOption('');
      await page.locator('[data-testid="events"] .event').first().filter({ hasText: 'crashed -> starting' }).waitFor({ timeout: 5_000 });
    });

    await check('config: export shows the plan and downloads as config.toml; its preview reports every partition unchanged', async () => {
      await page.goto(`${base}/#/config`);
      await page.waitForFunction(() => (document.querySelector('[data-testid="config-text"]')?.value ?? '').includes('[[partition]]'), null, { timeout: 5_000 });
      const link = page.locator('[data-testid="config-download"]');
      if (!(await link.getAttribute('href'))?.startsWith('blob:')) throw new Error('no download link');
      if ((await link.getAttribute('download')) !== 'config.toml') throw new Error(`the download is named ${await link.getAttribute('download')}`);
      const [download] = await Promise.all([page.waitForEvent('download', { timeout: 5_000 }), link.click()]);
      const saved = join(OUT, 'config.toml');
      await download.saveAs(saved);
      const exported = await (await fetch(`${base}/api/v1/config`, { headers: AUTH })).text();
      if (readFileSync(saved, 'utf8') !== exported) throw new Error('the downloaded config.toml is not the exported plan');
      if (await page.locator('[data-testid="config-apply"]').isEnabled()) throw new Error('Apply is offered before a preview');
      await page.locator('[data-testid="config-preview"]').click();
      const diff = page.locator('[data-testid="config-diff"]');
      await diff.waitFor({ state: 'visible', timeout: 5_000 });
      const said = await diff.innerText();
      if (!/unchanged: alpha, beta/.test(said)) throw new Error(`diff: ${said}`);
      if (!/changes nothing/.test(await page.locator('[data-testid="config-diff-head"]').innerText())) throw new Error('the preview does not say it changes nothing');
    });

    await check('config: an edited plan is previewed (refused while beta runs; nothing changes), then applied', async () => {
      const text = await page.locator('[data-testid="config-text"]').inputValue();
      await page.locator('[data-testid="config-text"]').fill(text.replace(/(name = "beta"[\s\S]*?restart_limit = )\d+/, (_, head) => `${head}7`));
      if (await page.locator('[data-testid="config-apply"]').isEnabled()) throw new Error('Apply stayed offered for text that was not previewed');
      // beta is running: the dry run already says the manager would refuse to change it.
      await page.locator('[data-testid="config-preview"]').click();
      const err = page.locator('[data-testid="config-error"]');
      await err.waitFor({ state: 'visible', timeout: 5_000 });
      if (!/beta.*stop it/.test(await err.innerText())) throw new Error(`preview error: ${await err.innerText()}`);
      if (await page.locator('[data-testid="config-apply"]').isEnabled()) throw new Error('Apply is offered after a refused preview');
      await fetch(`${base}/api/v1/partitions/beta/stop`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } });
      const until = Date.now() + 5_000;
      while ((await partitionsFromApi()).find((p) => p.name === 'beta')?.state !== 'stopped') {
        if (Date.now() > until) throw new Error('beta did not stop');
        await page.waitForTimeout(100);
      }
      await page.locator('[data-testid="config-preview"]').click();
      await page.locator('[data-testid="config-diff"][data-mode="preview"]', { hasText: 'changed: beta' }).waitFor({ timeout: 5_000 });
      if (await err.isVisible()) throw new Error('the old error stayed beside the new preview');
      if ((await partitionsFromApi()).find((p) => p.name === 'beta')?.config?.restart_limit === 7) throw new Error('the dry run changed beta');
      await page.locator('[data-testid="config-apply"]').click();
      await page.locator('[data-testid="config-diff"][data-mode="applied"]', { hasText: 'changed: beta' }).waitFor({ timeout: 5_000 });
      if ((await partitionsFromApi()).find((p) => p.name === 'beta')?.config?.restart_limit !== 7) throw new Error('the apply did not change beta');
      await fetch(`${base}/api/v1/partitions/beta/start`, { method: 'POST', headers: { Authorization: `Bearer ${token}` } });
    });

    await check('images: a kernel that is not an arm64 Image is refused naming the field; a URL fetch shows progress', async () => {
      await page.goto(`${base}/#/images`);
      await page.locator('[data-testid="images"] tr[data-image]').first().waitFor({ timeout: 5_000 });
      await page.locator('[data-testid="image-file"]').setInputFiles({ name: 'not-a-kernel', mimeType: 'application/octet-stream', buffer: Buffer.alloc(4096, 1) });
      await page.locator('form:has([data-testid="image-file"]) button[type="submit"]').click();
      const err = page.locator('[data-testid="upload-error"]');
      await err.waitFor({ state: 'visible', timeout: 10_000 });
      const said = await err.innerText();
      if (!/^kernel: .*not an arm64 Image/.test(said)) throw new Error(`upload error: ${said}`);
      if ((await (await fetch(`${base}/api/v1/images`, { headers: AUTH })).json()).images.some((i) => i.name === 'not-a-kernel')) throw new Error('the refused image was kept');
      await page.locator('[data-testid="fetch-url"]').fill('http://10.0.2.2:8000/vmlinuz');
      await page.locator('[data-testid="fetch-name"]').fill('fetched-Image');
      await page.locator('form:has([data-testid="fetch-url"]) button[type="submit"]').click();
      const seen = await sampleProgress('fetch-progress', async () => (await page.locator('[data-testid="images"] tr[data-state="ready"]', { hasText: 'fetched-Image' }).count()) > 0);
      if (seen.filter((v) => v > 0 && v < 1).length < 2) throw new Error(`the fetch bar showed only ${JSON.stringify(seen)}`);
    });

    await check('config: an import with an overlapping CPU is refused with the field and changes nothing', async () => {
      await page.goto(`${base}/#/config`);
      await page.waitForFunction(() => (document.querySelector('[data-testid="config-text"]')?.value ?? '').includes('[[partition]]'), null, { timeout: 5_000 });
      const before = JSON.stringify((await partitionsFromApi()).map((p) => [p.name, p.cpus]));
      const text = await page.locator('[data-testid="config-text"]').inputValue();
      await page.locator('[data-testid="config-text"]').fill(text.replace('cpus = [2, 3]', 'cpus = [1, 3]'));
      await page.locator('[data-testid="config-preview"]').click();
      const err = page.locator('[data-testid="config-error"]');
      await err.waitFor({ state: 'visible', timeout: 5_000 });
      const said = await err.innerText();
      if (!said.startsWith('cpus: partition "beta": cpus: CPU 1 is also used by partition "alpha"')) throw new Error(`import error: ${said}`);
      if ((await err.getAttribute('data-field')) !== 'cpus') throw new Error('the error does not name the field');
      if (JSON.stringify((await partitionsFromApi()).map((p) => [p.name, p.cpus])) !== before) throw new Error('a refused import changed partitions');
    });

    await check('shutdown: beta shuts down gracefully (its own messages on the console) and ends stopped; history downloads', async () => {
      await page.goto(`${base}/#/partitions/beta`);
      await page.locator('.page-head [data-field="state"][data-state="running"]').waitFor({ timeout: 10_000 });
      await page.locator('.page-head [data-action="shutdown"]').click();
      await page.locator('[data-testid="confirm-ok"]').click();
      await page.locator('.page-head [data-field="state"][data-state="shutting_down"]').waitFor({ timeout: 5_000 });
      await page.locator('.page-head [data-field="state"][data-state="stopped"]').waitFor({ timeout: 10_000 });
      const until = Date.now() + 5_000;
      while (!(await consoleText()).includes('Power key pressed')) {
        if (Date.now() > until) throw new Error("the guest's shutdown messages are not on the console");
        await page.waitForTimeout(200);
      }
      const button = page.locator('[data-testid="console-history"]');
      await button.waitFor({ state: 'visible', timeout: 5_000 });
      // The page fetches it with the token and saves the Blob (a plain link would get 401).
      const [download] = await Promise.all([page.waitForEvent('download', { timeout: 10_000 }), button.click()]);
      if (download.suggestedFilename() !== 'beta-console.log') throw new Error(`saved as ${download.suggestedFilename()}`);
      const history = readFileSync(await download.path(), 'utf8');
      if ((history.match(/^=== pinfold: beta boot \d+ at /gm) ?? []).length < 2) throw new Error('the history lacks the boot markers of both boots');
    });

    await check('the mock answered every request within the contract (openapi.json)', async () => {
      if (mock.violations.length > 0) throw new Error(mock.violations.slice(0, 5).join(' | '));
    });
  }

  await check('no uncaught errors in the page', async () => {
    if (pageErrors.length > 0) throw new Error(pageErrors.join(' | '));
  });
} finally {
  await context.close().catch(() => {});
  rmSync(profile, { recursive: true, force: true });
  await mock?.close();
  clearTimeout(deadline);
}

console.log(`# screenshots: ${join(OUT, 'ui.png')}, ${join(OUT, 'overview.png')}`);
process.exitCode = summary() > 0 ? 1 : 0;
