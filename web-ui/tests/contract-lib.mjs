// The REST contract (manager/api/openapi.json) as a response checker, shared by
// the mock (which checks every answer it gives), the live check
// (tests/contract.mjs, run by `cargo xtask test --only web-ui` against the real
// manager) and tests/contract.test.mjs.
//
// A response is checked against the operation its method and path match: its
// status must be documented for that operation, its Content-Type must be one
// the operation documents, and a JSON body must satisfy the schema (ajv,
// strict about the schemas themselves). `live: true` accepts the absence of
// properties marked `x-pinfold-pending` (the manager may not send them yet);
// their values, when present, are still checked.

import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Ajv from 'ajv';

const HERE = dirname(fileURLToPath(import.meta.url));
export const OPENAPI_PATH = resolve(HERE, '..', '..', 'manager', 'api', 'openapi.json');
const ID = 'https://pinfold.invalid/openapi';

/** RFC 3339 date-time, as `format: date-time` means in OpenAPI. */
const DATE_TIME = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** Deep copy of `node` with component refs pointing into $defs and, when `live`, pending properties optional. */
function rewrite(node, live) {
  if (Array.isArray(node)) return node.map((n) => rewrite(n, live));
  if (typeof node !== 'object' || node === null) return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string') out[k] = v.replace('#/components/schemas/', '#/$defs/');
    else out[k] = rewrite(v, live);
  }
  // OpenAPI 3.0's `{"allOf": [ref], "nullable": true}` (a nullable reference)
  // in JSON Schema terms, which ajv's `nullable` (needing `type`) lacks.
  if (out.nullable === true && !('type' in out)) {
    const { nullable: _, description, 'x-pinfold-pending': pending, ...rest } = out;
    return { description, 'x-pinfold-pending': pending, anyOf: [rest, { type: 'null' }] };
  }
  if (live && out.type === 'object' && Array.isArray(out.required) && out.properties) {
    out.required = out.required.filter((r) => out.properties[r]?.['x-pinfold-pending'] !== true);
  }
  return out;
}

function makeAjv(doc, live) {
  const ajv = new Ajv({ strict: true, allErrors: true, strictTypes: false });
  // Documentation-only keywords of OpenAPI 3.0 and ours.
  ajv.addVocabulary(['example', 'x-pinfold-pending']);
  ajv.addFormat('date-time', DATE_TIME);
  ajv.addFormat('int32', { type: 'number', validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 32 });
  ajv.addFormat('int64', { type: 'number', validate: (n) => Number.isInteger(n) });
  ajv.addFormat('binary', () => true);
  ajv.addSchema({ $id: ID, $defs: rewrite(doc.components.schemas, live) });
  return ajv;
}

function mediaType(contentType) {
  return String(contentType ?? '').split(';')[0].trim().toLowerCase();
}

function deref(doc, node) {
  let n = node;
  while (n && typeof n.$ref === 'string') {
    n = n.$ref
      .replace(/^#\//, '')
      .split('/')
      .reduce((acc, part) => acc?.[part], doc);
  }
  return n;
}

/** Path templates as regexps, literal paths first (so /images/fetch beats /images/{id}). */
function templates(doc) {
  return Object.keys(doc.paths)
    .map((tpl) => ({
      tpl,
      params: (tpl.match(/\{/g) ?? []).length,
      re: new RegExp(`^${tpl.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}$`),
    }))
    .sort((a, b) => a.params - b.params);
}

export function loadContract({ path = OPENAPI_PATH, live = false } = {}) {
  const doc = JSON.parse(readFileSync(path, 'utf8'));
  const ajv = makeAjv(doc, live);
  const tpls = templates(doc);
  const compiled = new Map();

  const schemaValidator = (schema) => {
    const key = JSON.stringify(schema);
    let v = compiled.get(key);
    if (v === undefined) {
      v = ajv.compile(rewriteInline(schema));
      compiled.set(key, v);
    }
    return v;
  };
  // A response schema is either a $ref (the usual case) or inline.
  const rewriteInline = (schema) => {
    const r = rewrite(schema, live);
    if (typeof r.$ref === 'string') return { $ref: `${ID}${r.$ref}` };
    return r;
  };

  /** The path template a concrete path (no query) matches, or null. */
  const route = (path) => tpls.find((t) => t.re.test(path))?.tpl ?? null;

  /** The operation object for a method and concrete path, or null. */
  const operation = (method, path) => {
    const tpl = route(path);
    return tpl ? (doc.paths[tpl][method.toLowerCase()] ?? null) : null;
  };

  /**
   * Problems with one response (empty when it keeps the contract).
   * `body` is the response text.
   */
  function check({ method, path, status, contentType, body }) {
    const tpl = route(path);
    if (tpl === null) return [`${method} ${path}: no such path in openapi.json`];
    const op = doc.paths[tpl][method.toLowerCase()];
    const where = `${method} ${tpl} -> ${status}`;
    if (!op) return [`${where}: operation not in openapi.json`];
    const resp = deref(doc, op.responses?.[String(status)] ?? op.responses?.default);
    if (!resp) return [`${where}: status not documented (documented: ${Object.keys(op.responses ?? {}).join(', ')})`];
    const content = resp.content ?? null;
    if (content === null) return body && body.length > 0 ? [`${where}: documented without a body, got ${body.length} bytes`] : [];
    const got = mediaType(contentType);
    const key = Object.keys(content).find((k) => mediaType(k) === got);
    if (key === undefined) return [`${where}: Content-Type ${contentType} not documented (${Object.keys(content).join(', ')})`];
    if (got !== 'application/json') return [];
    let value;
    try {
      value = JSON.parse(body);
    } catch (e) {
      return [`${where}: body is not JSON (${e.message})`];
    }
    const validate = schemaValidator(content[key].schema);
    if (validate(value)) return [];
    return validate.errors.map((e) => `${where}: ${e.instancePath || '(body)'} ${e.message}${e.params?.allowedValues ? ` ${JSON.stringify(e.params.allowedValues)}` : ''}`);
  }

  return { doc, route, operation, check, pending: (op) => op?.['x-pinfold-pending'] === true };
}
