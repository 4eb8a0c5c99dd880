// Browser test of the Pinfold web UI in Debian's Chromium, driven by playwright-core.
//
//   PINFOLD_URL=http://host:8080 PINFOLD_TOKEN=... node tests/ui.test.mjs
//
// Without PINFOLD_URL it starts tests/mock-server.mjs on a free port (serving
// web-ui/dist, so build first: `npm run test:ui` does). Screenshots go to
// $PINFOLD_TEST_OUT (default web-ui/test-output). Prints "N passed, M failed";
// the exit code is non-zero when anything failed.

import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { createMock, MOCK_TOKEN } from './mock-server.mjs';

const HERE = fileURLToPath(new URL('.', import.meta.url));
const OUT = resolve(process.env.PINFOLD_TEST_OUT ?? join(HERE, '..', 'test-output'));
const CHROMIUM_ARGS = [
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
const DEADLINE_MS = 120_000;

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
  const res = await fetch(`${base}/api/v1/partitions`);
  return (await res.json()).partitions;
}

try {
  await page.goto(`${base}/`);
  // A real guest's shell asks the terminal where its cursor is (busybox ash
  // prints ESC[6n after each prompt) and xterm.js answers through the
  // console's input path, which needs the token: without one stored, the
  // token dialog would pop up on its own as soon as beta's console opens
  // and block every later click. The mock's console sends no such query.
  // Store the token up front, as an operator who entered it earlier would
  // have; the rejected-token check below replaces it with a stale one.
  await page.evaluate((t) => sessionStorage.setItem('pinfold.token', t), token);

  await check('partitions alpha and beta are listed', async () => {
    await page.locator('tr[data-partition="alpha"]').waitFor({ timeout: 10_000 });
    await page.locator('tr[data-partition="beta"]').waitFor({ timeout: 10_000 });
  });

  await check('host CPU map shows CPU 0 owned by mgmt', async () => {
    await page.locator('.cpu-tile[data-cpu="0"][data-owner="mgmt"]').waitFor({ timeout: 5_000 });
  });

  await page.screenshot({ path: join(OUT, 'overview.png'), fullPage: true });

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
  await check('restart of beta with a rejected token asks for the token again', async () => {
    const bootField = page.locator('[data-page="partition"] [data-field="boot_count"]');
    await page.waitForFunction(() => /^\d+$/.test(document.querySelector('[data-field="boot_count"]')?.textContent ?? ''));
    bootsBefore = Number(await bootField.innerText());
    offsetBefore = await consoleOffset();
    // Start from a stale token so the 401 path runs before the good one is given.
    await page.evaluate(() => sessionStorage.setItem('pinfold.token', 'stale-token'));
    await page.locator('.page-head [data-action="restart"]').click();
    await page.locator('[data-testid="confirm-ok"]').click();
    const dialog = page.locator('[data-testid="token-dialog"]');
    await dialog.waitFor({ timeout: 5_000 });
    const said = await dialog.innerText();
    if (!/rejected/i.test(said)) throw new Error(`token dialog did not mention the rejection: ${said}`);
    await page.locator('#token-input').fill(token);
    await page.locator('[data-testid="token-save"]').click();
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

  await check('the token is kept for the tab after being entered', async () => {
    const kept = await page.evaluate(() => sessionStorage.getItem('pinfold.token'));
    if (kept !== token) throw new Error('sessionStorage does not hold the entered token');
  });

  await check("beta's console keeps following across the restart", async () => {
    const until = Date.now() + 20_000;
    while ((await consoleOffset()) <= offsetBefore) {
      if (Date.now() > until) throw new Error(`console offset stayed at ${offsetBefore}`);
      await page.waitForTimeout(250);
    }
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
