// Generates src/gen/api-types.ts from the REST contract, manager/api/openapi.json:
// one TypeScript type per components.schemas entry and the union of the
// documented paths. Run by `npm run gen` (and before build, typecheck, dev);
// the output is git-ignored and never edited by hand.
//
// It knows exactly the OpenAPI 3.0 subset the contract uses (object, array,
// string/integer/number/boolean, enum, nullable, $ref, a one-element allOf)
// and stops with an error naming the schema on anything else, so a construct
// it does not understand can never turn into a silently wrong type.
//
//   node scripts/gen-api.mjs [openapi.json] [out.ts]

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
export const OPENAPI = resolve(HERE, '..', '..', 'manager', 'api', 'openapi.json');
const OUT = resolve(HERE, '..', 'src', 'gen', 'api-types.ts');

/** Keywords that only document a schema; everything else must be understood. */
const DOC_ONLY = new Set(['description', 'example', 'format', 'minimum', 'maximum', 'default', 'pattern', 'maxLength', 'minLength', 'x-pinfold-pending']);
const REF = '#/components/schemas/';

function fail(where, msg) {
  throw new Error(`openapi.json ${where}: ${msg}`);
}

function checkKeys(schema, where, allowed) {
  for (const k of Object.keys(schema)) {
    if (!allowed.has(k) && !DOC_ONLY.has(k)) fail(where, `keyword "${k}" is not supported by gen-api.mjs`);
  }
}

function comment(text, indent) {
  if (!text) return '';
  const safe = String(text).replaceAll('*/', '*\\/');
  return `${indent}/** ${safe} */\n`;
}

/** The TypeScript type of one schema, as an expression. */
export function tsType(schema, where, indent = '') {
  if (typeof schema !== 'object' || schema === null) fail(where, 'schema is not an object');
  let t;
  if ('$ref' in schema) {
    checkKeys(schema, where, new Set(['$ref']));
    if (!schema.$ref.startsWith(REF)) fail(where, `$ref ${schema.$ref} is not a components schema`);
    t = schema.$ref.slice(REF.length);
  } else if ('allOf' in schema) {
    checkKeys(schema, where, new Set(['allOf', 'nullable']));
    if (!Array.isArray(schema.allOf) || schema.allOf.length !== 1) fail(where, 'allOf must wrap exactly one schema');
    t = tsType(schema.allOf[0], `${where}.allOf[0]`, indent);
  } else if ('enum' in schema) {
    checkKeys(schema, where, new Set(['type', 'enum', 'nullable']));
    t = schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  } else {
    switch (schema.type) {
      case 'string':
        checkKeys(schema, where, new Set(['type', 'nullable']));
        t = 'string';
        break;
      case 'integer':
      case 'number':
        checkKeys(schema, where, new Set(['type', 'nullable']));
        t = 'number';
        break;
      case 'boolean':
        checkKeys(schema, where, new Set(['type', 'nullable']));
        t = 'boolean';
        break;
      case 'array':
        checkKeys(schema, where, new Set(['type', 'items', 'nullable']));
        t = tsType(schema.items, `${where}.items`, indent);
        t = /^[\w]+$/.test(t) ? `${t}[]` : `(${t})[]`;
        break;
      case 'object': {
        checkKeys(schema, where, new Set(['type', 'properties', 'required', 'nullable', 'additionalProperties']));
        // `false` closes the object (what a TypeScript object type says
        // anyway); a schema for extra properties is not supported.
        if ('additionalProperties' in schema && schema.additionalProperties !== false) {
          fail(where, 'additionalProperties other than false is not supported by gen-api.mjs');
        }
        const props = schema.properties ?? {};
        const required = new Set(schema.required ?? []);
        for (const r of required) if (!(r in props)) fail(where, `required "${r}" is not a property`);
        const names = Object.keys(props);
        if (names.length === 0) {
          t = 'Record<string, unknown>';
          break;
        }
        const inner = `${indent}  `;
        const lines = names.map((n) => {
          const p = props[n];
          const key = /^[A-Za-z_]\w*$/.test(n) ? n : JSON.stringify(n);
          // A pending property (x-pinfold-pending) is not sent by every
          // manager yet: optional here, so the UI must cope without it.
          const pending = p['x-pinfold-pending'] === true;
          const opt = required.has(n) && !pending ? '' : '?';
          const doc = pending ? `${p.description ?? ''} (Pending: not served by every manager yet.)`.trim() : p.description;
          return `${comment(doc, inner)}${inner}${key}${opt}: ${tsType(p, `${where}.${n}`, inner)};\n`;
        });
        t = `{\n${lines.join('')}${indent}}`;
        break;
      }
      default:
        checkKeys(schema, where, new Set(['type', 'nullable']));
        fail(where, `type ${JSON.stringify(schema.type)} is not supported by gen-api.mjs`);
    }
  }
  if (schema.nullable === true) t = `${t} | null`;
  return t;
}

export function generate(doc) {
  const out = [
    '// GENERATED by web-ui/scripts/gen-api.mjs from manager/api/openapi.json: do not edit.',
    '// Change the contract (openapi.json) and run `npm run gen` (build does).',
    '',
  ];
  const schemas = doc.components?.schemas ?? {};
  for (const [name, schema] of Object.entries(schemas)) {
    if (!/^[A-Z]\w*$/.test(name)) fail(`components.schemas.${name}`, 'schema names must be PascalCase identifiers');
    const where = `components.schemas.${name}`;
    const body = tsType(schema, where);
    out.push(comment(schema.description, '').trimEnd());
    if (schema.type === 'object' && body.startsWith('{')) out.push(`export interface ${name} ${body}`, '');
    else out.push(`export type ${name} = ${body};`, '');
  }
  const paths = Object.keys(doc.paths ?? {});
  out.push('/** Every path the contract documents (templates, e.g. `/api/v1/partitions/{name}`). */');
  out.push(`export type ApiPath =\n${paths.map((p) => `  | ${JSON.stringify(p)}`).join('\n')};`, '');
  return out.filter((l, i, a) => !(l === '' && a[i - 1] === '')).join('\n');
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const src = resolve(process.argv[2] ?? OPENAPI);
  const dst = resolve(process.argv[3] ?? OUT);
  const text = generate(JSON.parse(readFileSync(src, 'utf8')));
  mkdirSync(dirname(dst), { recursive: true });
  writeFileSync(dst, text);
  console.log(`gen-api: ${dst} from ${src}`);
}
