// CommonJS users: require() of the package, every subpath, from a .cjs file
// (this one) and from a fresh `node -e` process, and a Telegraf bot (the
// framework CommonJS bots use most) with the middleware, against a real
// daemon. The package is ESM; engines admits only Node versions that
// require() ESM without a flag (20.19+, 22.12+, 23+), which this Node is.
'use strict';

const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const { after, before, test } = require('node:test');

const ROOT = path.resolve(__dirname, '..');
const pkg = require('../package.json');

let daemon;
let helpers;
before(async () => {
  helpers = await import('../test-helpers/daemon.js');
  daemon = await helpers.startDaemon();
});
after(async () => {
  await daemon?.stop();
});

function satisfiesEngines(version) {
  const [maj, min] = version.replace(/^v/, '').split('.').map(Number);
  return (maj === 20 && min >= 19) || (maj === 22 && min >= 12) || maj >= 23;
}

test('this Node can require() ESM and the engines field says so', () => {
  assert.equal(pkg.engines.node, '^20.19.0 || ^22.12.0 || >=23.0.0');
  assert.ok(satisfiesEngines(process.version), `${process.version} is outside engines`);
  assert.ok(!satisfiesEngines('v20.18.1') && !satisfiesEngines('v22.11.0') && !satisfiesEngines('v21.7.3'));
});

test('require() of every export, here and in a fresh process', () => {
  const main = require('redlockd-client');
  assert.equal(typeof main.RedlockClient, 'function');
  assert.equal(typeof main.runAsLeader, 'function');
  for (const sub of ['grammy', 'telegraf', 'middleware']) {
    const m = require(`redlockd-client/${sub}`);
    assert.equal(typeof m.dedupMiddleware, 'function', sub);
    assert.equal(typeof m.sequentialize, 'function', sub);
  }
  // One implementation behind both frameworks.
  assert.equal(require('redlockd-client/grammy').sequentialize, require('redlockd-client/telegraf').sequentialize);
  assert.equal(typeof require('redlockd-client/dedup').createDedup, 'function');
  assert.equal(typeof require('redlockd-client/sequentialize').chatKey, 'function');
  const script =
    "const { RedlockClient } = require('redlockd-client');" +
    "const { sequentialize } = require('redlockd-client/telegraf');" +
    "console.log(typeof RedlockClient, typeof sequentialize);";
  const r = spawnSync(process.execPath, ['-e', script], { cwd: ROOT, encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), 'function function');
  assert.doesNotMatch(r.stderr, /ERR_REQUIRE_ESM/);
});

test('a CommonJS Telegraf bot with the middleware against the daemon', { skip: hasTelegraf() ? false : 'telegraf is not installed: run `npm ci`' }, async () => {
  const { RedlockClient } = require('redlockd-client');
  const { dedupMiddleware, sequentialize } = require('redlockd-client/telegraf');
  const { Telegraf } = require('telegraf');
  const client = new RedlockClient({ path: daemon.sock });
  try {
    const bot = new Telegraf('123456789:FAKE-token-for-tests', { telegram: { apiRoot: 'http://127.0.0.1:9' } });
    bot.botInfo = helpers.BOT_INFO;
    bot.catch((err) => {
      throw err;
    });
    bot.use(sequentialize(client), dedupMiddleware(client, { ttlMs: 10_000 }));
    const seen = [];
    bot.on('message', (ctx) => seen.push(ctx.lock.resource));
    const update = helpers.messageUpdate(800_000_000 + (process.pid % 100_000));
    await bot.handleUpdate(update);
    await bot.handleUpdate(update); // a duplicate: skipped
    assert.deepEqual(seen, [`tg:update:${update.update_id}`]);
    const term = await client.campaign(helpers.uniq('cjs'), { ttlMs: 2000 });
    assert.equal(typeof term.fence, 'bigint');
    await term.resign();
  } finally {
    await client.close();
  }
});

function hasTelegraf() {
  try {
    require.resolve('telegraf');
    return true;
  } catch {
    return false;
  }
}
