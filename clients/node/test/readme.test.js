// The README's examples, run as written against a real daemon (only the
// socket path and the reader's own functions are filled in).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import * as redlockd from '../index.js';
import { REPO, startDaemon } from '../test-helpers/daemon.js';

const README = readFileSync(path.join(REPO, 'clients/node/README.md'), 'utf8');
const AsyncFunction = (async () => {}).constructor;

/** The first ```js block after `heading` that contains `marker`. */
function snippet(heading, marker) {
  const from = README.indexOf(heading);
  assert.ok(from >= 0, `README has ${heading}`);
  for (const m of README.slice(from).matchAll(/```js\n([\s\S]*?)```/g)) {
    if (m[1].includes(marker)) return m[1];
  }
  assert.fail(`no js block with ${marker} after ${heading}`);
}

/** Run a snippet with the package's exports and `vars` in scope. */
function run(code, vars) {
  const body = code.replace(/^import .*$/gm, '').replaceAll('/run/redlockd/redlockd.sock', daemon.sock);
  const names = [...Object.keys(redlockd), ...Object.keys(vars)];
  return new AsyncFunction(...names, body)(...Object.values(redlockd), ...Object.values(vars));
}

let daemon;
before(async () => {
  daemon = await startDaemon();
});
after(async () => {
  await daemon?.stop();
});

test('README Example: using() hands the routine a signal and a bigint fence', async () => {
  const seen = [];
  await run(snippet('## Example', 'client.using('), {
    loadOrder: async (id, { signal }) => ({ id, aborted: signal.aborted }),
    saveTotal: async (order, { fence }) => seen.push({ order, fence }),
  });
  assert.equal(seen.length, 1);
  assert.deepEqual(seen[0].order, { id: 42, aborted: false });
  assert.equal(typeof seen[0].fence, 'bigint', 'the comment promises a fencing token');
});

test('README Example without using: acquire, extend, release', async () => {
  const client = new redlockd.RedlockClient({ path: daemon.sock });
  let signal;
  try {
    await run(snippet('Without `using`', 'client.acquire('), {
      client,
      work: async (s) => (signal = s),
    });
    assert.ok(signal instanceof AbortSignal);
    await (await client.acquire('orders:42', { ttlMs: 1000 })).release(); // free again
  } finally {
    await client.close();
  }
});
