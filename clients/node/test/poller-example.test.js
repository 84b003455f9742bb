// examples/getupdates-poller.js, run twice against a fake Bot API that
// behaves like Telegram's getUpdates: one long poll at a time (a second one
// gets 409 Conflict), updates kept until a poll's offset confirms them. One
// instance polls; each update is handled once; when the leader is killed,
// the other takes over and handles the rest.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { sleep, startDaemon } from '../test-helpers/daemon.js';

const EXAMPLE = path.join(path.dirname(fileURLToPath(import.meta.url)), '../examples/getupdates-poller.js');

function fakeBotApi() {
  const api = { updates: [], nextId: 5000, polling: 0, conflicts: 0, wake: null };
  api.server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    const send = (code, obj) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(obj));
    };
    if (!url.pathname.endsWith('/getUpdates')) return send(404, { ok: false });
    if (api.polling > 0) {
      api.conflicts++;
      return send(409, { ok: false, error_code: 409, description: 'Conflict: terminated by other getUpdates request' });
    }
    api.polling++;
    try {
      const offset = url.searchParams.get('offset');
      if (offset !== null) api.updates = api.updates.filter((u) => u.update_id >= Number(offset));
      if (api.updates.length === 0) {
        await new Promise((resolve) => {
          const t = setTimeout(resolve, 300);
          api.wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
      }
      send(200, { ok: true, result: api.updates });
    } finally {
      api.polling--;
    }
  });
  api.push = (n) => {
    const ids = [];
    for (let i = 0; i < n; i++) {
      api.updates.push({ update_id: api.nextId, message: { text: 'hi' } });
      ids.push(api.nextId++);
    }
    api.wake?.();
    return ids;
  };
  return api;
}

let daemon;
let api;
const procs = [];
before(async () => {
  daemon = await startDaemon();
  api = fakeBotApi();
  await new Promise((resolve) => api.server.listen(0, '127.0.0.1', resolve));
});
after(async () => {
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  api.server.closeAllConnections?.();
  await new Promise((resolve) => api.server.close(resolve));
  await daemon?.stop();
});

test('two pollers: one leader, each update once, takeover after a kill', async () => {
  const env = {
    ...process.env,
    REDLOCKD_SOCKET: daemon.sock,
    BOT_TOKEN: `${Date.now() % 1e9}:test`,
    TELEGRAM_API_ROOT: `http://127.0.0.1:${api.server.address().port}`,
  };
  const handled = [[], []];
  for (const k of [0, 1]) {
    const p = spawn(process.execPath, [EXAMPLE], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let buf = '';
    p.stdout.setEncoding('utf8').on('data', (d) => {
      buf += d;
      for (let nl; (nl = buf.indexOf('\n')) >= 0; buf = buf.slice(nl + 1)) {
        const m = /^update (\d+) /.exec(buf.slice(0, nl));
        if (m) handled[k].push(Number(m[1]));
      }
    });
    p.stderr.resume();
    procs.push(p);
  }
  const waitHandled = async (ids) => {
    for (let i = 0; i < 600; i++) {
      const all = new Set([...handled[0], ...handled[1]]);
      if (ids.every((id) => all.has(id))) return;
      await sleep(50);
    }
    assert.fail(`not handled: ${ids} (${JSON.stringify(handled)})`);
  };
  const first = api.push(5);
  await waitHandled(first);
  const leading = [0, 1].filter((k) => handled[k].length > 0);
  assert.equal(leading.length, 1, 'both instances polled');
  procs[leading[0]].kill('SIGKILL');
  const second = api.push(5);
  await waitHandled([...first, ...second]);
  const other = 1 - leading[0];
  assert.ok(second.every((id) => handled[other].includes(id)));
  const all = [...handled[0], ...handled[1]].sort();
  assert.deepEqual(all, [...first, ...second].sort(), 'an update was handled twice');
});

test('a refused poll (401: a wrong BOT_TOKEN) is reported, not retried in silence', async () => {
  const refusing = http.createServer((req, res) => {
    res.writeHead(401, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ ok: false, error_code: 401, description: 'Unauthorized' }));
  });
  await new Promise((resolve) => refusing.listen(0, '127.0.0.1', resolve));
  const p = spawn(process.execPath, [EXAMPLE], {
    env: {
      ...process.env,
      REDLOCKD_SOCKET: daemon.sock,
      BOT_TOKEN: `${Date.now() % 1e9}:wrong`,
      TELEGRAM_API_ROOT: `http://127.0.0.1:${refusing.address().port}`,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  procs.push(p);
  let err = '';
  p.stderr.setEncoding('utf8').on('data', (d) => (err += d));
  try {
    for (let i = 0; i < 200 && !err.includes('\n'); i++) await sleep(50);
    assert.match(err, /^getUpdates failed: 401 Unauthorized\n/);
  } finally {
    p.kill('SIGKILL');
    refusing.closeAllConnections?.();
    await new Promise((resolve) => refusing.close(resolve));
  }
});
