// Tests of the contract machinery (node --test): the mock keeps the contract,
// the live check fails on a response that breaks it, and the type generator
// refuses schema constructs it does not understand.
//
//   node --test tests/contract.test.mjs      (npm run test:contract)

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { generate } from '../scripts/gen-api.mjs';
import { loadContract } from './contract-lib.mjs';
import { checkLive } from './contract.mjs';
import { createMock, MOCK_TOKEN } from './mock-server.mjs';

async function withMock(options, fn) {
  const mock = createMock(options);
  const base = await mock.listen(0);
  try {
    return await fn(base, mock);
  } finally {
    await mock.close();
  }
}

test('every GET endpoint of the mock keeps the contract (strict: pending properties required)', async () => {
  await withMock({}, async (base, mock) => {
    const r = await checkLive(base, { live: false, log: () => {}, token: MOCK_TOKEN });
    assert.deepEqual(r.problems, []);
    assert.equal(r.pending, 0, 'the mock serves every route');
    assert.ok(r.passed >= 15, `only ${r.passed} checks ran`);
    assert.deepEqual(mock.violations, []);
  });
});

test('a response with a field of the wrong type fails the live check, naming the field', async () => {
  const mutate = (method, path, body) => {
    if (path === '/api/v1/host') body.cpu_count = String(body.cpu_count);
    return body;
  };
  await withMock({ mutate }, async (base) => {
    const r = await checkLive(base, { log: () => {}, token: MOCK_TOKEN });
    assert.equal(r.failed, 1);
    assert.match(r.problems.join('\n'), /GET \/api\/v1\/host -> 200: \/cpu_count must be integer/);
  });
});

test('a missing required field and an unknown state fail; a missing pending property passes live only', async () => {
  const strict = loadContract();
  const live = loadContract({ live: true });
  // `config` is the one pending property of a partition (x-pinfold-pending in openapi.json).
  // `gic_interface` is null from a manager whose hypervisor lacks GIC_INFO (ABI < 3.3).
  const old = { name: 'a', state: 'running', cpus: [1], ram_bytes: 1, uptime_ms: 0, boot_count: 1, management: false, state_since: null, restarts: 0, last_crash: null, gic_interface: null };
  const res = (body) => ({ method: 'GET', path: '/api/v1/partitions', status: 200, contentType: 'application/json', body: JSON.stringify({ partitions: [body] }) });
  assert.deepEqual(live.check(res(old)), []);
  assert.match(strict.check(res(old)).join(), /required property 'config'/);
  assert.match(live.check(res({ ...old, state: 'paused' })).join(), /state must be equal to one of the allowed values/);
  const { boot_count: _, ...noBoots } = old;
  assert.match(live.check(res(noBoots)).join(), /required property 'boot_count'/);
  assert.match(live.check(res({ ...old, last_crash: { time: null } })).join(), /last_crash/);
});

test('an undocumented status or content type is a violation', () => {
  const c = loadContract();
  assert.match(c.check({ method: 'GET', path: '/api/v1/host', status: 418, contentType: 'application/json', body: '{}' }).join(), /status not documented/);
  assert.match(c.check({ method: 'GET', path: '/api/v1/config', status: 200, contentType: 'text/html', body: '' }).join(), /Content-Type text\/html not documented/);
  assert.match(c.check({ method: 'PUT', path: '/api/v1/host', status: 200, contentType: 'application/json', body: '{}' }).join(), /operation not in openapi.json/);
});

test('the type generator refuses what it does not understand', () => {
  const doc = (schema) => ({ paths: {}, components: { schemas: { X: schema } } });
  assert.throws(() => generate(doc({ oneOf: [{ type: 'string' }] })), /components\.schemas\.X: keyword "oneOf" is not supported/);
  assert.throws(() => generate(doc({ type: 'object', required: ['a'], properties: {} })), /required "a" is not a property/);
  assert.match(generate(doc({ type: 'object', required: ['a'], properties: { a: { type: 'string', nullable: true }, b: { type: 'integer', 'x-pinfold-pending': true } } })), /a: string \| null;[\s\S]*b\?: number;/);
});
