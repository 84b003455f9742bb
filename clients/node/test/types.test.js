// The TypeScript declarations compile against real usage (tsc, devDependency).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tsc = path.join(root, 'node_modules/typescript/bin/tsc');

test(
  'index.d.ts, dedup.d.ts, grammy.d.ts, telegraf.d.ts type-check real usage',
  { skip: existsSync(tsc) ? false : 'typescript is not installed: run `npm ci` in clients/node', timeout: 120_000 },
  async () => {
    const run = (config) =>
      new Promise((resolve) => {
        const child = spawn(process.execPath, [tsc, '-p', path.join(root, 'test-helpers/types', config)], {
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (out += d));
        const t = setTimeout(() => child.kill('SIGKILL'), 110_000);
        child.on('close', (code) => {
          clearTimeout(t);
          resolve({ config, code, out });
        });
      });
    // Usage with grammY/Telegraf (their own .d.ts not checked), and our
    // declarations alone with skipLibCheck off.
    const results = await Promise.all([run('tsconfig.json'), run('tsconfig.decl.json')]);
    for (const r of results) assert.equal(r.code, 0, `tsc -p ${r.config} failed:\n${r.out}`);
  },
);
