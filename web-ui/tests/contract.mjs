// Live contract check: fetches the manager's GET endpoints and checks each
// answer against manager/api/openapi.json (tests/contract-lib.mjs).
//
//   node tests/contract.mjs http://127.0.0.1:8080     (or PINFOLD_URL=...)
//
// Endpoints: host, partitions, each partition, its console and console
// history, resources, images (and each image), events, config, the OpenAPI
// document and /metrics. Each must answer 200 and keep the contract; an
// operation still marked `x-pinfold-pending` may answer 404 instead (the
// manager does not serve it yet: "pending" in the output), and properties so
// marked may be absent. Prints one line per check and "N passed, M failed";
// exits non-zero on any failure. `cargo xtask test --only web-ui` runs it
// against the real manager.

import { fileURLToPath } from 'node:url';
import { resolve } from 'node:path';
import { loadContract } from './contract-lib.mjs';

/** Check `base`'s GET endpoints; returns { passed, failed, pending, lines }. */
export async function checkLive(base, { log = console.log, live = true, token = process.env.PINFOLD_TOKEN } = {}) {
  const contract = loadContract({ live });
  const root = base.replace(/\/+$/, '');
  const out = { passed: 0, failed: 0, pending: 0, problems: [] };

  async function get(path) {
    // Reads need a credential (a viewer's will do): `token`, by default
    // $PINFOLD_TOKEN; without one every read is a documented 401.
    const headers = { Accept: '*/*' };
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(`${root}${path}`, { headers });
    // The event stream never ends: read nothing from it.
    const body = res.headers.get('content-type')?.startsWith('text/event-stream') ? '' : await res.text();
    return { status: res.status, contentType: res.headers.get('content-type') ?? '', body };
  }

  async function probe(path) {
    const bare = path.split('?')[0];
    let r;
    try {
      r = await get(path);
    } catch (e) {
      out.failed += 1;
      out.problems.push(`GET ${path}: no answer (${e.message})`);
      log(`FAIL - GET ${path}: no answer (${e.message})`);
      return null;
    }
    const op = contract.operation('GET', bare);
    if (r.status === 404 && contract.pending(op)) {
      out.pending += 1;
      log(`skip - GET ${path}: 404, marked x-pinfold-pending (not served yet)`);
      return null;
    }
    const problems = contract.check({ method: 'GET', path: bare, ...r });
    if (r.status !== 200) problems.unshift(`GET ${path}: status ${r.status}, expected 200`);
    if (problems.length > 0) {
      out.failed += 1;
      out.problems.push(...problems);
      log(`FAIL - GET ${path}: ${problems.join(' | ')}`);
      return null;
    }
    out.passed += 1;
    log(`ok   - GET ${path}`);
    return r.contentType.startsWith('application/json') ? JSON.parse(r.body) : r.body;
  }

  await probe('/api/v1/host');
  const list = await probe('/api/v1/partitions');
  for (const p of list?.partitions ?? []) {
    const name = encodeURIComponent(p.name);
    await probe(`/api/v1/partitions/${name}`);
    await probe(`/api/v1/partitions/${name}/console?offset=0`);
    await probe(`/api/v1/partitions/${name}/console/history`);
  }
  await probe('/api/v1/resources');
  const images = await probe('/api/v1/images');
  for (const img of images?.images ?? []) await probe(`/api/v1/images/${encodeURIComponent(img.id)}`);
  await probe('/api/v1/events');
  await probe('/api/v1/events?since=0');
  await probe('/api/v1/config');
  await probe('/api/v1/openapi.json');
  await probe('/metrics');
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const base = process.argv[2] ?? process.env.PINFOLD_URL;
  if (!base) {
    console.error('usage: node tests/contract.mjs BASE_URL   (or PINFOLD_URL=...)');
    process.exit(2);
  }
  const r = await checkLive(base);
  console.log(`${r.passed} passed, ${r.failed} failed, ${r.pending} skipped`);
  process.exitCode = r.failed > 0 ? 1 : 0;
}
