// redlockd client: NDJSON over the daemon's unix socket, promises, no
// runtime dependencies. See ../README.md and proto/README.md.

import { EventEmitter } from 'node:events';
import net from 'node:net';
import { Buffer } from 'node:buffer';

import {
  BadRequestError,
  ClientClosedError,
  ConnectionLostError,
  LostError,
  NotHeldError,
  RedlockError,
  RequestTimeoutError,
  TooLargeError,
  errorFromCode,
} from './errors.js';
import { campaign, runAsLeader } from './leader.js';
import { optionsOf } from './options.js';

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
const DEFAULT_MAX_LINE_BYTES = 65_536;
const DAEMON_DEFAULT_TTL_MS = 30_000; // proto/README.md: acquire's ttl_ms
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
const TOKEN_RE = /^[0-9a-f]{32}$/;
// C0 controls, DEL and C1 controls: the daemon refuses them in a resource.
// eslint-disable-next-line no-control-regex
const CONTROL_RE = /[\u0000-\u001f\u007f-\u009f]/;

const kConn = Symbol('redlock.connection');
const kController = Symbol('redlock.controller');
const kClient = Symbol('redlock.client');

/**
 * A held lock. `signal` aborts, with a LostError as its reason, when the
 * daemon reports the lock lost or the connection it was taken on closes.
 */
export class Lock {
  /** sentAt: Date.now() before the acquire was sent (the validity counts
   * from a moment after it, so expiresAt errs early, never late); ttlMs:
   * the ttl it was taken with. */
  constructor(client, conn, msg, renew, sentAt = Date.now(), ttlMs = DAEMON_DEFAULT_TTL_MS) {
    /** 32 lowercase hex characters, unique per acquisition. */
    this.token = msg.lock;
    this.resource = msg.resource;
    /** Validity left when the daemon answered, in ms. */
    this.validityMs = msg.validity_ms;
    /** Fencing token (bigint) when acquired with `fence: true`. */
    this.fence = msg.fence;
    /** Which permit of a semaphore (acquired with `permits`). */
    if (msg.permit !== undefined) this.permit = msg.permit;
    this.renew = renew;
    /** The ttl it was taken with, or last extended to: what an extend
     * without one sends. */
    this.ttlMs = ttlMs;
    /** Date.now() by which the lock expires unless extended or renewed:
     * the validity counted from when the request was sent. */
    this.expiresAt = sentAt + (msg.validity_ms ?? 0);
    const controller = new AbortController();
    this.signal = controller.signal;
    Object.defineProperty(this, kController, { value: controller });
    Object.defineProperty(this, kClient, { value: client });
    Object.defineProperty(this, kConn, { value: conn, writable: true });
  }

  /** True once the lock is known lost (same as `signal.aborted`). */
  get lost() {
    return this.signal.aborted;
  }

  release() {
    return this[kClient].release(this);
  }

  extend(ttlMs) {
    return this[kClient].extend(this, ttlMs);
  }

  complete(options) {
    return this[kClient].complete(this, options);
  }

  toJSON() {
    const o = { token: this.token, resource: this.resource, validityMs: this.validityMs };
    if (this.fence !== undefined) o.fence = String(this.fence);
    return o;
  }

  _lose(err) {
    if (!this.signal.aborted) this[kController].abort(err);
  }
}

if (typeof Symbol.asyncDispose === 'symbol') {
  // `await using lock = await client.acquire(..)` (TypeScript 5.2+).
  Lock.prototype[Symbol.asyncDispose] = async function dispose() {
    if (this.lost) return;
    try {
      await this.release();
    } catch (e) {
      if (!(e instanceof NotHeldError)) throw e;
    }
  };
}

/** Parse one response line. `fence` becomes a bigint, exactly, even beyond
 * 2^53 (the counter is a 64-bit integer). */
export function parseResponse(line) {
  const msg = JSON.parse(line);
  if (msg === null || typeof msg !== 'object' || Array.isArray(msg)) {
    throw new SyntaxError('response is not a JSON object');
  }
  if (typeof msg.fence === 'number') {
    if (Number.isSafeInteger(msg.fence)) {
      msg.fence = BigInt(msg.fence);
    } else {
      // Inside a JSON string every '"' is escaped, so `[,{]"fence":` only
      // matches a member of the top-level object.
      const all = [...line.matchAll(/[,{]"fence":(-?\d+)(?=[,}\s])/g)];
      msg.fence = all.length ? BigInt(all[all.length - 1][1]) : BigInt(Math.trunc(msg.fence));
    }
  }
  return msg;
}

function checkResource(resource) {
  if (typeof resource !== 'string') throw new BadRequestError('resource: must be a string');
  if (!resource.isWellFormed()) {
    // JSON.stringify would send a lone surrogate as \udXXX, which the
    // daemon treats as unparseable and closes the connection (and with it
    // every session lock on it).
    throw new BadRequestError('resource: must be valid UTF-8 (lone surrogate)');
  }
  const n = Buffer.byteLength(resource, 'utf8');
  if (n < 1 || n > 512) throw new BadRequestError('resource: must be 1..512 bytes');
  if (CONTROL_RE.test(resource)) {
    throw new BadRequestError('resource: must not contain control characters');
  }
}

/** The options of the calls that take nothing else (release, extend,
 * ping, health, request). */
const CALL_OPTIONS = ['timeoutMs', 'signal'];
const ACQUIRE_OPTIONS = ['ttlMs', 'waitMs', 'renew', 'fence', 'renewMaxMs', 'permits', ...CALL_OPTIONS];
const COMPLETE_OPTIONS = ['keepMs', ...CALL_OPTIONS];
const LOCKS_OPTIONS = ['prefix', 'limit', 'cursor', ...CALL_OPTIONS];
const INSPECT_OPTIONS = ['fence', ...CALL_OPTIONS];
const CLIENT_OPTIONS = ['path', 'timeoutMs', 'connectTimeoutMs', 'maxLineBytes'];
// setTimeout fires at once for a delay over 2^31-1 ms (about 24.8 days).
const MAX_TIMER_MS = 2 ** 31 - 1;

function lockRef(lock) {
  if (lock === null || typeof lock !== 'object') {
    throw new BadRequestError('lock: expected a Lock (or {token, resource})');
  }
  const token = lock.token;
  if (typeof token !== 'string' || !TOKEN_RE.test(token)) {
    throw new BadRequestError('lock: must be 32 lowercase hex characters');
  }
  checkResource(lock.resource);
  // A semaphore's permit: any daemon finds its slot by resource and permit.
  return Number.isInteger(lock.permit)
    ? { token, resource: lock.resource, permit: lock.permit }
    : { token, resource: lock.resource };
}

/** The request of op for a lock reference. */
function refPayload(op, ref) {
  const { token, ...rest } = ref;
  return { op, lock: token, ...rest };
}

function abortReason(signal) {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/**
 * One connection to the daemon: its in-flight requests and the locks taken
 * on it (the daemon releases those when it closes).
 */
class Connection {
  constructor(client, path, connectTimeoutMs) {
    this.client = client;
    this.pending = new Map(); // id -> entry
    this.active = 0; // entries whose caller still waits
    this.locks = new Map(); // token -> Lock
    this.open = true;
    this.retired = false; // the daemon is closing it: no new requests
    this.closing = null; // client.close(): Promise of the close; read nothing more
    this.closeReason = null; // Error given to in-flight requests on close
    this.orphanError = null; // an error response the daemon sent without id
    this.buf = '';
    this.socket = net.createConnection({ path });
    this.socket.setEncoding('utf8');
    this.socket.unref();
    this.connectTimer = setTimeout(() => {
      this.destroy(new ConnectionLostError(`connect to ${path} timed out after ${connectTimeoutMs} ms`));
    }, connectTimeoutMs);
    this.connectTimer.unref();
    this.socket.once('connect', () => {
      clearTimeout(this.connectTimer);
      client.emit('connect');
    });
    this.socket.on('data', (chunk) => this.onData(chunk));
    this.socket.on('error', (err) => {
      if (!this.closeReason) {
        this.closeReason = new ConnectionLostError(`redlockd connection (${path}): ${err.message}`, {
          cause: err,
        });
      }
    });
    this.socket.on('close', () => this.onClose());
  }

  destroy(reason) {
    if (!this.closeReason) this.closeReason = reason;
    this.socket.destroy();
  }

  refresh() {
    // Keep the process alive only while someone waits for an answer.
    if (!this.open) return;
    if (this.active > 0) this.socket.ref();
    else this.socket.unref();
  }

  send(payload, entry) {
    const id = this.client._nextId();
    const json = JSON.stringify({ ...payload, id });
    // The daemon's --max-line-bytes does not count the newline.
    const n = Buffer.byteLength(json, 'utf8');
    if (n > this.client.maxLineBytes) {
      // The daemon would answer too_large and close the connection, dropping
      // every session lock on it; refuse here instead.
      throw new TooLargeError(`request line of ${n} bytes is over ${this.client.maxLineBytes} (not sent)`);
    }
    const line = json + '\n';
    if (entry) {
      this.pending.set(id, entry);
      if (!entry.abandoned) {
        this.active++;
        this.refresh();
      }
    }
    this.socket.write(line);
    return id;
  }

  /** Send without waiting for the answer (best effort). */
  fire(payload) {
    if (!this.open) return;
    try {
      this.send(payload, { abandoned: true, settle() {}, onLate() {} });
    } catch {
      /* nothing to do */
    }
  }

  settled(entry) {
    if (!entry.abandoned) {
      entry.abandoned = true;
      this.active--;
      this.refresh();
      if (this.retired && this.active === 0) this.socket.end();
    }
  }

  /** Take no new requests; close once the ones in flight are answered. */
  retire() {
    this.retired = true;
    if (this.active === 0) this.socket.end();
  }

  onData(chunk) {
    // After client.close() nothing read is handed on: every request was
    // settled with ClientClosedError, and a grant that still arrives dies
    // with the connection (the daemon releases session locks on close).
    // (The loop checks again: a listener may call close() meanwhile.)
    if (this.closing) return;
    this.buf += chunk;
    let nl;
    while (this.open && !this.closing && (nl = this.buf.indexOf('\n')) >= 0) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      if (line.trim() === '') continue;
      let msg;
      try {
        msg = parseResponse(line);
      } catch (e) {
        this.destroy(new ConnectionLostError(`unparseable response from redlockd: ${e.message}`, { cause: e }));
        return;
      }
      this.onMessage(msg);
    }
    if (this.buf.length > MAX_RESPONSE_BYTES) {
      this.destroy(new ConnectionLostError('response line from redlockd too long'));
    }
  }

  onMessage(msg) {
    if (msg.event !== undefined && msg.id === undefined) {
      this.onEvent(msg);
      return;
    }
    if (msg.id === undefined || msg.id === null) {
      // An answer to a line the daemon could not attribute (too_large, or
      // a line it could not parse): if only one request waits, it is that
      // one's; otherwise keep it as the cause for the close that follows.
      if (msg.ok === false && msg.error) {
        const err = errorFromCode(msg.error.code, msg.error.message);
        this.orphanError = err;
        // The daemon closes such a connection: send nothing more on it, and
        // close it once nothing waits on it any more.
        this.retire();
        const waiting = [...this.pending].filter(([, e]) => !e.abandoned);
        if (waiting.length === 1) {
          const [id, entry] = waiting[0];
          this.pending.delete(id);
          this.settled(entry);
          entry.settle(err, null);
        }
      }
      return;
    }
    const entry = this.pending.get(msg.id);
    if (!entry) return;
    this.pending.delete(msg.id);
    if (entry.abandoned) {
      entry.onLate(msg, this);
      return;
    }
    this.settled(entry);
    if (msg.ok === false && !(entry.acceptError && entry.acceptError(msg))) {
      const e = msg.error || {};
      entry.settle(errorFromCode(e.code, e.message), msg);
    } else {
      entry.settle(null, msg);
    }
  }

  onEvent(msg) {
    if (msg.event === 'lost') {
      // 'lost' only for a Lock this client handed out; 'event' below for
      // every unsolicited message (a lock taken with request() included).
      const lock = this.locks.get(msg.lock);
      if (lock) {
        this.locks.delete(msg.lock);
        const err = new LostError(
          `lock on '${lock.resource}' lost: the daemon could not keep a quorum`,
          lock,
        );
        lock._lose(err);
        this.client.emit('lost', lock, err);
      }
    }
    this.client.emit('event', msg);
  }

  /**
   * client.close(): settle every request in flight at once with `reason`,
   * read nothing more, close the socket. Resolves once it is closed.
   */
  close(reason) {
    if (this.closing) return this.closing;
    if (!this.closeReason) this.closeReason = reason;
    this.retired = true;
    // Anything still due from the daemon (answers to requests in flight, or
    // to ones given up on, e.g. an acquire still waiting there) would hold a
    // half-closed connection open: then close it as soon as what was written
    // has been flushed, without waiting for the daemon.
    const due = this.pending.size > 0;
    const entries = [...this.pending.values()];
    this.pending.clear();
    this.active = 0;
    this.buf = '';
    this.closing = new Promise((resolve) => {
      const t = setTimeout(() => this.socket.destroy(), 1000);
      this.socket.once('close', () => {
        clearTimeout(t);
        resolve();
      });
    });
    for (const entry of entries) {
      if (!entry.abandoned) {
        entry.abandoned = true;
        entry.settle(this.closeReason, null);
      }
    }
    if (this.socket.destroyed) {
      // 'close' is on its way (onClose settles nothing more).
    } else if (due) {
      this.socket.end(() => this.socket.destroy());
    } else {
      this.socket.end();
    }
    return this.closing;
  }

  onClose() {
    if (!this.open) return;
    this.open = false;
    clearTimeout(this.connectTimer);
    let reason = this.closeReason;
    if (this.orphanError && !(reason instanceof ClientClosedError)) {
      // The daemon said why it closed (too_large, unparseable line, limit).
      reason = new ConnectionLostError(`redlockd closed the connection: ${this.orphanError.message}`, {
        cause: this.orphanError,
      });
    }
    reason ??= new ConnectionLostError('redlockd closed the connection');
    const pending = [...this.pending.values()];
    this.pending.clear();
    this.active = 0;
    for (const entry of pending) {
      if (!entry.abandoned) {
        entry.abandoned = true;
        entry.settle(reason, null);
      }
    }
    const locks = [...this.locks.values()];
    this.locks.clear();
    for (const lock of locks) {
      const err = new LostError(
        `lock on '${lock.resource}' lost: its connection to redlockd closed` +
          ' (the daemon releases session locks on close)',
        lock,
        { cause: reason },
      );
      lock._lose(err);
      this.client.emit('lost', lock, err);
    }
    this.client._connectionClosed(this, reason);
  }
}

/**
 * Client for redlockd. One lazily opened connection, pipelined requests,
 * reconnect on the next call after a drop.
 */
export class RedlockClient extends EventEmitter {
  #conn = null;
  #closed = false;
  #id = 0;

  /**
   * @param {object} [options]
   * @param {string} [options.path] unix socket; default env REDLOCKD_SOCKET, else ./redlockd.sock
   * @param {number} [options.timeoutMs] per-request timeout (acquire adds its waitMs), default 10000
   * @param {number} [options.connectTimeoutMs] default 5000
   * @param {number} [options.maxLineBytes] the daemon's --max-line-bytes, default 65536
   */
  constructor(options = {}) {
    super();
    // new RedlockClient('/run/redlockd.sock'), as Python's RedlockClient(path)
    // and Go's Dial(ctx, path) take it, would use the default socket.
    options = optionsOf(options, 'new RedlockClient', "{ path: './redlockd.sock' }", CLIENT_OPTIONS);
    // An empty value is no value, as in the other clients (and net.connect
    // would take an empty path for TCP to localhost).
    this.path = options.path || process.env.REDLOCKD_SOCKET || './redlockd.sock';
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.maxLineBytes = options.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  }

  /** True while a connection is open (or opening). */
  get connected() {
    return this.#conn !== null && this.#conn.open && !this.#conn.retired;
  }

  _nextId() {
    this.#id = this.#id >= Number.MAX_SAFE_INTEGER ? 1 : this.#id + 1;
    return this.#id;
  }

  _connectionClosed(conn, reason) {
    if (this.#conn === conn) this.#conn = null;
    this.emit('disconnect', reason);
  }

  #connection() {
    if (this.#closed) throw new ClientClosedError('the client is closed');
    if (!this.#conn || !this.#conn.open || this.#conn.retired) {
      this.#conn = new Connection(this, this.path, this.connectTimeoutMs);
    }
    return this.#conn;
  }

  /**
   * Send one request object (without `id`) and resolve with the daemon's
   * answer, or reject with the Error for its code. Low level: prefer the
   * methods below.
   * @param {object} payload
   * @param {{timeoutMs?: number, signal?: AbortSignal}} [options]
   */
  request(payload, options = {}) {
    return this.#call(payload, options, (msg) => msg);
  }

  /** options: the caller's, checked here against CALL_OPTIONS (a call
   * that takes more checks its own and passes on timeoutMs and signal);
   * onLate and acceptError: this module's own. */
  #call(payload, options, onOk, { onLate, acceptError } = {}) {
    return new Promise((resolve, reject) => {
      let opts;
      try {
        opts = optionsOf(options, payload.op, '{ timeoutMs: 5000 }', CALL_OPTIONS);
      } catch (e) {
        reject(e);
        return;
      }
      const { timeoutMs, signal } = opts;
      if (signal?.aborted) {
        reject(abortReason(signal));
        return;
      }
      let conn;
      try {
        conn = this.#connection();
      } catch (e) {
        reject(e);
        return;
      }
      let timer = null;
      let onAbort = null;
      const cleanup = () => {
        if (timer) clearTimeout(timer);
        if (onAbort) signal.removeEventListener('abort', onAbort);
      };
      const entry = {
        abandoned: false,
        acceptError,
        settle: (err, msg) => {
          cleanup();
          if (err) {
            reject(err);
            return;
          }
          try {
            resolve(onOk(msg, conn));
          } catch (e) {
            reject(e);
          }
        },
        onLate: (msg, c) => {
          if (onLate) onLate(msg, c);
        },
      };
      let id;
      try {
        id = conn.send(payload, entry);
      } catch (e) {
        cleanup();
        reject(e);
        return;
      }
      const giveUp = (err) => {
        if (entry.abandoned) return;
        conn.settled(entry); // stays in pending: a late answer goes to onLate
        cleanup();
        reject(err);
      };
      const ms = timeoutMs ?? this.timeoutMs;
      if (ms !== Infinity) {
        timer = setTimeout(
          () => giveUp(new RequestTimeoutError(`${payload.op} (id ${id}): no answer from redlockd within ${ms} ms`)),
          Math.min(ms, MAX_TIMER_MS),
        );
      }
      if (signal) {
        onAbort = () => giveUp(abortReason(signal));
        signal.addEventListener('abort', onAbort, { once: true });
      }
    });
  }

  /**
   * Take a lock on `resource`.
   * @returns {Promise<Lock>}
   */
  acquire(resource, options = {}) {
    try {
      checkResource(resource);
      options = optionsOf(options, 'acquire', '{ ttlMs: 10000 }', ACQUIRE_OPTIONS);
    } catch (e) {
      return Promise.reject(e);
    }
    const { ttlMs, waitMs, renew, fence, renewMaxMs, permits, signal, timeoutMs } = options;
    const payload = { op: 'acquire', resource };
    if (ttlMs !== undefined) payload.ttl_ms = ttlMs;
    if (waitMs !== undefined) payload.wait_ms = waitMs;
    if (renew !== undefined) payload.renew = renew;
    if (fence !== undefined) payload.fence = fence;
    if (renewMaxMs !== undefined) payload.renew_max_ms = renewMaxMs;
    if (permits !== undefined) payload.permits = permits;
    // The client-wide timeout is for the answer after the wait; an explicit
    // per-call timeoutMs is the whole time allowed.
    const wait = typeof waitMs === 'number' && waitMs > 0 ? waitMs : 0;
    const sentAt = Date.now();
    return this.#call(
      payload,
      { timeoutMs: timeoutMs ?? this.timeoutMs + wait, signal },
      (msg, conn) => {
        const lock = new Lock(this, conn, msg, renew === true, sentAt, ttlMs ?? DAEMON_DEFAULT_TTL_MS);
        if (conn.open) conn.locks.set(lock.token, lock);
        else lock._lose(new LostError(`lock on '${lock.resource}' lost: connection closed`, lock));
        return lock;
      },
      {
        // Given up on (timeout or abort) but granted after all: let it go.
        onLate: (msg, conn) => {
          if (msg.ok && typeof msg.lock === 'string') {
            const late = { op: 'release', lock: msg.lock, resource: msg.resource ?? resource };
            if (msg.permit !== undefined) late.permit = msg.permit;
            conn.fire(late);
          }
        },
      },
    );
  }

  #forget(lock) {
    const conn = lock[kConn];
    if (conn && conn.locks.get(lock.token) === lock) conn.locks.delete(lock.token);
  }

  /** Release a lock. Rejects with NotHeldError if it had already expired. */
  async release(lock, options = {}) {
    const ref = lockRef(lock);
    try {
      await this.#call(refPayload('release', ref), options, () => undefined);
    } catch (e) {
      if (e instanceof NotHeldError && lock instanceof Lock) this.#forget(lock);
      throw e;
    }
    if (lock instanceof Lock) this.#forget(lock);
  }

  /**
   * Push the lock's expiry out to `ttlMs` from now (default: a Lock's own
   * `ttlMs`; for a bare {token, resource} the daemon's choice). Resolves
   * with the same Lock, its validityMs and ttlMs updated. NotHeldError
   * means the lock is gone; its signal aborts then.
   */
  async extend(lock, ttlMs, options = {}) {
    const ref = lockRef(lock);
    const payload = refPayload('extend', ref);
    // Left out, the daemon would use the ttl it knows, and one that does
    // not know the lock (another daemon, a restarted one) its 30000.
    if ((ttlMs === undefined || ttlMs === null) && lock instanceof Lock) ttlMs = lock.ttlMs;
    if (ttlMs !== undefined && ttlMs !== null) payload.ttl_ms = ttlMs;
    let msg;
    const sentAt = Date.now();
    try {
      msg = await this.#call(payload, options, (m) => m);
    } catch (e) {
      if (e instanceof NotHeldError && lock instanceof Lock) {
        this.#forget(lock);
        lock._lose(new LostError(`lock on '${lock.resource}' lost: not held at extend`, lock, { cause: e }));
      }
      throw e;
    }
    if (lock instanceof Lock) {
      lock.ttlMs = ttlMs;
      lock.validityMs = msg.validity_ms;
      lock.expiresAt = sentAt + msg.validity_ms;
      return lock;
    }
    return { token: ref.token, resource: ref.resource, validityMs: msg.validity_ms };
  }

  /**
   * Mark the resource done for `keepMs` (default: the daemon's, 24 h) and
   * drop the lock: later acquires get DoneError.
   */
  async complete(lock, options = {}) {
    const ref = lockRef(lock);
    const { keepMs, timeoutMs, signal } = optionsOf(options, 'complete', '{ keepMs: 86400000 }', COMPLETE_OPTIONS);
    const payload = refPayload('complete', ref);
    if (keepMs !== undefined) payload.keep_ms = keepMs;
    try {
      await this.#call(payload, { timeoutMs, signal }, () => undefined);
    } catch (e) {
      if (e instanceof NotHeldError && lock instanceof Lock) this.#forget(lock);
      throw e;
    }
    if (lock instanceof Lock) this.#forget(lock);
  }

  /** Liveness check; resolves with the round trip in ms. */
  async ping(options = {}) {
    const t0 = performance.now();
    await this.#call({ op: 'ping' }, options, () => undefined);
    return performance.now() - t0;
  }

  /**
   * Per-node state: `{ok, quorum, nodes: [{addr, up, ...}]}`. Resolves
   * without a quorum too, then with `ok: false` and
   * `error: {code: 'no_quorum', message}`: check `ok`.
   */
  health(options = {}) {
    const acceptError = (msg) => Array.isArray(msg.nodes);
    return this.#call(
      { op: 'health' },
      options,
      (msg) => {
        const { id: _id, ...rest } = msg;
        return rest;
      },
      { acceptError },
    );
  }

  /**
   * One page of the locks held through this daemon, in the order they were
   * taken: `{locks: [{resource, ttl_ms, validity_ms, renew, fence, held_ms,
   * since_ms, owner, waiters}], count, total, next?}`. Never a token. Pass
   * `next` back as `cursor` for the following page.
   */
  locks(options = {}) {
    let prefix, limit, cursor, timeoutMs, signal;
    try {
      ({ prefix, limit, cursor, timeoutMs, signal } = optionsOf(options, 'locks', "{ prefix: 'tg:' }", LOCKS_OPTIONS));
    } catch (e) {
      return Promise.reject(e);
    }
    const payload = { op: 'locks' };
    if (prefix) payload.prefix = prefix;
    if (limit !== undefined) payload.limit = limit;
    if (cursor !== undefined) payload.cursor = cursor;
    return this.#call(payload, { timeoutMs, signal }, (msg) => {
      const { id: _id, ok: _ok, ...rest } = msg;
      // Fences are bigints, as on a Lock.
      for (const e of rest.locks ?? []) if (typeof e.fence === 'number') e.fence = BigInt(e.fence);
      return rest;
    });
  }

  /** Every lock of this daemon, page by page (see `locks()`). */
  async *iterLocks(options = {}) {
    options = optionsOf(options, 'iterLocks', "{ prefix: 'tg:' }", LOCKS_OPTIONS);
    let cursor;
    for (;;) {
      const page = await this.locks({ limit: 1000, ...options, cursor });
      yield* page.locks;
      cursor = page.next;
      if (cursor === undefined) return;
    }
  }

  /**
   * What the nodes say of `resource`, by the quorum rules of release:
   * `{resource, state: 'free'|'held'|'done', agree, answered, nodes,
   * pttl_ms?, mine, waiters, fence?}`. Rejects with NoQuorumError when no
   * state is on more than n - quorum nodes.
   */
  inspect(resource, options = {}) {
    let fence, timeoutMs, signal;
    try {
      checkResource(resource);
      ({ fence, timeoutMs, signal } = optionsOf(options, 'inspect', '{ fence: true }', INSPECT_OPTIONS));
    } catch (e) {
      return Promise.reject(e);
    }
    const payload = { op: 'inspect', resource };
    if (fence) payload.fence = true;
    return this.#call(payload, { timeoutMs, signal }, (msg) => {
      const { id: _id, ok: _ok, ...rest } = msg;
      return rest;
    });
  }

  /**
   * Acquire, run `fn(signal, lock)`, release in finally. Renews by default
   * (`renew: true`): `signal` aborts if the lock is lost meanwhile.
   */
  async using(resource, options, fn) {
    if (typeof options === 'function') {
      fn = options;
      options = {};
    }
    if (typeof fn !== 'function') throw new TypeError('using(resource, [options], fn): fn must be a function');
    options = optionsOf(options, 'using', '{ ttlMs: 10000 }', ACQUIRE_OPTIONS);
    const lock = await this.acquire(resource, { ...options, renew: options.renew ?? true });
    let done = false;
    let result;
    try {
      result = await fn(lock.signal, lock);
      done = true;
    } finally {
      if (!lock.lost) {
        try {
          await this.release(lock);
        } catch (e) {
          // Never hide the routine's own error; after a routine that
          // finished, a failed release (e.g. expired meanwhile) is reported.
          if (done && !lock.lost) throw e;
        }
      }
    }
    return result;
  }

  /**
   * Leader election: wait (in the daemon's FIFO, in bounded rounds) until
   * this client leads `resource`; resolves with a Leadership (`signal`,
   * `fence`, `resign()`). See lib/leader.js.
   */
  campaign(resource, options = {}) {
    return campaign(this, resource, options);
  }

  /** Wait for leadership, run `fn(signal, leadership)`, resign. */
  runAsLeader(resource, options, fn) {
    return runAsLeader(this, resource, options, fn);
  }

  /**
   * Close the connection. In-flight requests reject at once with
   * ClientClosedError (an acquire in flight gives no Lock: a grant that
   * still arrives is dropped, the daemon releases it with the connection);
   * the daemon releases every lock taken through this client. Final: later
   * calls reject with ClientClosedError.
   */
  async close() {
    this.#closed = true;
    const conn = this.#conn;
    if (!conn || !conn.open) return;
    await conn.close(new ClientClosedError('the client was closed'));
  }
}

export { RedlockError };
