// Test fixtures: a real redlockd (with --dev, or against our own five
// redis-server processes), raw NDJSON connections, a fake Telegram API.
// Unix sockets and loopback only; every wait is bounded; everything started
// here is stopped in teardown (and killed on process exit as a last resort).
//
// This folder is outside test/ on purpose: `node --test test/` runs every .js
// file under test/ as a test file.

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const VECTORS = path.join(REPO, 'proto/vectors/requests.json');

const children = new Set();
process.on('exit', () => {
  for (const c of children) {
    try {
      if (c.paused) c.proc.kill('SIGCONT');
      c.proc.kill('SIGTERM');
    } catch {
      /* already gone */
    }
  }
});

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function daemonBin() {
  const bin = process.env.REDLOCKD_BIN || path.join(REPO, 'build/sidecar/redlockd');
  if (!existsSync(bin)) {
    throw new Error(`redlockd binary not found at ${bin}: run \`meson setup build && ninja -C build\` or set REDLOCKD_BIN`);
  }
  return bin;
}

export function tmpDir(tag = 'node') {
  return mkdtempSync(path.join(os.tmpdir(), `rl-${tag}-`));
}

function track(proc, name) {
  const c = { proc, name, paused: false, out: '', exited: null };
  const keep = (d) => {
    c.out += d;
    if (c.out.length > 64 * 1024) c.out = c.out.slice(-64 * 1024);
  };
  proc.stdout?.setEncoding('utf8').on('data', keep);
  proc.stderr?.setEncoding('utf8').on('data', keep);
  c.exitPromise = new Promise((resolve) => {
    proc.once('exit', (code, signal) => {
      c.exited = { code, signal };
      children.delete(c);
      resolve(c.exited);
    });
  });
  children.add(c);
  return c;
}

async function stopChild(c, timeoutMs = 10_000) {
  if (c.exited) return c.exited;
  if (c.paused) c.proc.kill('SIGCONT');
  // One SIGTERM only: a second one is "exit now" (or, late in the daemon's
  // teardown, the default action).
  if (!c.termSent) {
    c.termSent = true;
    c.proc.kill('SIGTERM');
  }
  let timer;
  const t = new Promise((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs);
  });
  const r = await Promise.race([c.exitPromise, t]);
  clearTimeout(timer);
  if (r) return r;
  c.proc.kill('SIGKILL');
  return c.exitPromise;
}

/** One request on a fresh connection; resolves with the parsed answer line. */
export function rawCall(sock, obj, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const s = net.createConnection({ path: sock });
    let buf = '';
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error(`no answer from ${sock} within ${timeoutMs} ms`));
    }, timeoutMs);
    s.setEncoding('utf8');
    s.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    s.on('data', (d) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(t);
        s.destroy();
        try {
          resolve(JSON.parse(buf.slice(0, nl)));
        } catch (e) {
          reject(e);
        }
      }
    });
    s.write(JSON.stringify(obj) + '\n');
  });
}

async function waitFor(what, fn, timeoutMs, proc) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    if (proc?.exited) throw new Error(`${what}: process exited (${JSON.stringify(proc.exited)}):\n${proc.out}`);
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(50);
  }
  throw new Error(`${what}: not ready within ${timeoutMs} ms (${last?.message ?? 'no answer'})\n${proc?.out ?? ''}`);
}

/**
 * Start redlockd. With `nodes` (unix socket paths) it runs against them;
 * otherwise with --dev (5 throw-away redis-servers it removes on SIGTERM).
 * Resolves once {"op":"ping"} answers and, with --dev, once health shows
 * every node up: the daemon serves from its first moment, and a request
 * that beats its own nodes' connections is answered no_quorum.
 */
export async function startDaemon({ nodes, args = [], dir } = {}) {
  const ownDir = !dir;
  dir ??= tmpDir('node');
  const sock = path.join(dir, 'd.sock');
  const argv = nodes
    ? [...nodes.flatMap((n) => ['--node', `unix://${n}`]), '--socket', sock, ...args]
    : ['--dev', '--socket', sock, ...args];
  const proc = spawn(daemonBin(), argv, { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
  const c = track(proc, 'redlockd');
  try {
    await waitFor('redlockd', async () => (await rawCall(sock, { op: 'ping' }, 1000)).ok === true, 15_000, c);
    if (!nodes) {
      const allUp = async () => {
        const h = await rawCall(sock, { op: 'health' }, 1000);
        return Array.isArray(h.nodes) && h.nodes.length > 0 && h.nodes.every((n) => n.up === true);
      };
      await waitFor('redlockd --dev nodes', allUp, 15_000, c);
    }
  } catch (e) {
    await stopChild(c);
    if (ownDir) rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    sock,
    dir,
    proc,
    pid: proc.pid,
    output: () => c.out,
    get exited() {
      return c.exited;
    },
    /** Send SIGTERM (once); stop() then only waits. */
    terminate() {
      if (!c.termSent && !c.exited) {
        c.termSent = true;
        proc.kill('SIGTERM');
      }
    },
    async stop() {
      const r = await stopChild(c);
      if (ownDir) rmSync(dir, { recursive: true, force: true });
      return r;
    },
  };
}

function redisPing(sock, timeoutMs = 500) {
  return new Promise((resolve, reject) => {
    const s = net.createConnection({ path: sock });
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error('redis ping timed out'));
    }, timeoutMs);
    s.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
    s.setEncoding('utf8');
    s.on('data', (d) => {
      clearTimeout(t);
      s.destroy();
      resolve(d.startsWith('+PONG'));
    });
    s.write('PING\r\n');
  });
}

/** Our own N redis-server processes on unix sockets DIR/nK.sock. */
export async function startRedisNodes(dir, n = 5) {
  const bin = process.env.REDIS_SERVER || 'redis-server';
  const nodes = [];
  for (let k = 1; k <= n; k++) {
    const sock = path.join(dir, `n${k}.sock`);
    const proc = spawn(
      bin,
      ['--port', '0', '--unixsocket', sock, '--unixsocketperm', '700', '--save', '', '--appendonly', 'no', '--dir', dir],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const c = track(proc, `redis n${k}`);
    nodes.push({
      sock,
      c,
      pause() {
        c.paused = true;
        proc.kill('SIGSTOP');
      },
      resume() {
        proc.kill('SIGCONT');
        c.paused = false;
      },
    });
  }
  try {
    for (const node of nodes) {
      await waitFor(node.c.name, () => redisPing(node.sock), 10_000, node.c);
    }
  } catch (e) {
    await Promise.all(nodes.map((x) => stopChild(x.c)));
    throw e;
  }
  return {
    nodes,
    socks: nodes.map((x) => x.sock),
    async stop() {
      await Promise.all(nodes.map((x) => stopChild(x.c)));
    },
  };
}

/**
 * A raw NDJSON connection: send bytes, read answer lines, see EOF.
 */
export class RawConn {
  constructor(sock) {
    this.lines = [];
    this.buf = Buffer.alloc(0);
    this.ended = false;
    this.waiters = new Set();
    this.s = net.createConnection({ path: sock });
    this.ready = new Promise((resolve, reject) => {
      this.s.once('connect', resolve);
      this.s.once('error', reject);
    });
    this.s.on('error', () => {});
    this.s.on('data', (d) => {
      this.buf = Buffer.concat([this.buf, d]);
      let nl;
      while ((nl = this.buf.indexOf(10)) >= 0) {
        this.lines.push(this.buf.subarray(0, nl).toString('utf8'));
        this.buf = this.buf.subarray(nl + 1);
      }
      this.#wake();
    });
    this.s.on('close', () => {
      this.ended = true;
      this.#wake();
    });
  }

  #wake() {
    for (const w of this.waiters) w();
  }

  write(data) {
    this.s.write(data);
  }

  /** The next line (parsed), or null on EOF; rejects after timeoutMs. */
  next(timeoutMs = 2000) {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (this.lines.length) {
          done();
          resolve(JSON.parse(this.lines.shift()));
        } else if (this.ended) {
          done();
          resolve(null);
        }
      };
      const t = setTimeout(() => {
        done();
        reject(new Error(`no line within ${timeoutMs} ms`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  /** Resolves true if the daemon closes the connection within timeoutMs. */
  closed(timeoutMs = 2000) {
    return new Promise((resolve) => {
      const check = () => {
        if (this.ended) {
          done();
          resolve(true);
        }
      };
      const t = setTimeout(() => {
        done();
        resolve(false);
      }, timeoutMs);
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  destroy() {
    this.s.destroy();
  }
}

/**
 * A fake Telegram Bot API on 127.0.0.1 (any free port): answers every
 * method with {"ok":true,"result":true} and records the calls, so a test can
 * assert that nothing else was asked and no request left loopback.
 */
export async function fakeTelegram() {
  const calls = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d) => {
      body += d;
    });
    req.on('end', () => {
      calls.push({ method: req.method, url: req.url, body });
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ ok: true, result: true }));
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    apiRoot: `http://127.0.0.1:${port}`,
    calls,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}

/** A Telegram text-message update. */
export function messageUpdate(updateId, text = 'hello') {
  return {
    update_id: updateId,
    message: {
      message_id: updateId,
      date: Math.floor(Date.now() / 1000),
      chat: { id: 4242, type: 'private', first_name: 'Test' },
      from: { id: 4242, is_bot: false, first_name: 'Test' },
      text,
    },
  };
}

export const BOT_INFO = {
  id: 123456789,
  is_bot: true,
  first_name: 'Dedup Test Bot',
  username: 'dedup_test_bot',
  can_join_groups: true,
  can_read_all_group_messages: false,
  supports_inline_queries: false,
  can_connect_to_business: false,
  has_main_web_app: false,
};

/** Unique resource names per test run. */
let seq = 0;
export function uniq(name = 'r') {
  return `${name}:${process.pid}:${Date.now().toString(36)}:${++seq}`;
}
