// Error classes and response parsing (no daemon needed).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as api from '../index.js';

const { RedlockError, errorFromCode, parseResponse } = api;

const BY_CODE = {
  busy: 'BusyError',
  done: 'DoneError',
  not_held: 'NotHeldError',
  no_quorum: 'NoQuorumError',
  bad_request: 'BadRequestError',
  too_large: 'TooLargeError',
  limit: 'LimitError',
  shutting_down: 'ShuttingDownError',
  internal: 'InternalError',
};

test('one Error subclass per daemon error code, with .code', () => {
  for (const [code, name] of Object.entries(BY_CODE)) {
    const cls = api[name];
    assert.equal(typeof cls, 'function', name);
    assert.equal(cls.name, name);
    assert.equal(cls.code, code);
    const e = errorFromCode(code, `a ${code} message`);
    assert.ok(e instanceof cls, `${code} -> ${name}`);
    assert.ok(e instanceof RedlockError);
    assert.ok(e instanceof Error);
    assert.equal(e.code, code);
    assert.equal(e.name, name);
    assert.equal(e.message, `a ${code} message`);
    assert.ok(String(e.stack).includes(name));
    // Classes are distinct.
    for (const other of Object.values(BY_CODE)) {
      if (other !== name) assert.ok(!(e instanceof api[other]), `${name} is not ${other}`);
    }
  }
});

test('client-side errors', () => {
  assert.equal(new api.ConnectionLostError('x').code, 'connection_lost');
  assert.equal(new api.RequestTimeoutError('x').code, 'timeout');
  assert.equal(new api.ClientClosedError('x').code, 'client_closed');
  const lost = new api.LostError('gone', { token: 't' });
  assert.equal(lost.code, 'lost');
  assert.deepEqual(lost.lock, { token: 't' });
  assert.ok(lost instanceof RedlockError);
});

test('an unknown code gives a RedlockError with that code', () => {
  const e = errorFromCode('brand_new', 'future');
  assert.equal(e.constructor, RedlockError);
  assert.equal(e.code, 'brand_new');
  assert.equal(e.message, 'future');
  assert.equal(errorFromCode(undefined).code, 'undefined');
});

test('parseResponse: fence is a bigint, exact beyond 2^53', () => {
  const small = parseResponse('{"id":1,"ok":true,"lock":"0123456789abcdef0123456789abcdef","resource":"r","validity_ms":9,"fence":17}');
  assert.equal(small.fence, 17n);
  const big = parseResponse(
    '{"ok":true,"lock":"0123456789abcdef0123456789abcdef","resource":"r","validity_ms":0,"fence":9223372036854775807}',
  );
  assert.equal(big.fence, 9223372036854775807n);
  // A resource that looks like a fence member does not confuse it.
  const tricky = parseResponse(
    '{"ok":true,"lock":"0123456789abcdef0123456789abcdef","resource":"x,\\"fence\\":1}","validity_ms":0,"fence":9007199254740993}',
  );
  assert.equal(tricky.fence, 9007199254740993n);
  assert.equal(tricky.resource, 'x,"fence":1}');
  assert.equal(parseResponse('{"ok":true}').fence, undefined);
  assert.throws(() => parseResponse('[1]'), SyntaxError);
  assert.throws(() => parseResponse('nope'), SyntaxError);
});

test('exports', () => {
  for (const name of ['RedlockClient', 'Lock', 'createDedup', 'errorFromCode', 'LostError']) {
    assert.equal(typeof api[name], 'function', name);
  }
});
