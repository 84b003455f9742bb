// The shared request vectors (proto/vectors/requests.json): every vector
// that the daemon must refuse, sent raw over NDJSON on a fresh connection.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { BadRequestError, errorFromCode } from '../index.js';
import { RawConn, VECTORS, startDaemon } from '../test-helpers/daemon.js';

const vectors = existsSync(VECTORS) ? JSON.parse(readFileSync(VECTORS, 'utf8')) : null;
// NDJSON vectors have op null; the others are HTTP bodies for a route.
const bad = (vectors ?? []).filter((v) => v.expect && v.expect.ok === false && v.op == null);

function inputBytes(v) {
  return 'input_hex' in v ? Buffer.from(v.input_hex, 'hex') : Buffer.from(v.input, 'utf8');
}

function isBlank(buf) {
  return /^[ \t\r\n]*$/.test(buf.toString('latin1'));
}

function startsAsNdjson(buf) {
  return /^[ \t\r\n]*\{/.test(buf.toString('latin1'));
}

// "Unparseable": the daemon could not read the line as JSON at all.
function unparseable(v) {
  return v.expect.field == null && (v.expect.message == null || /^invalid JSON/.test(v.expect.message));
}

let daemon;
before(async () => {
  if (bad.length) daemon = await startDaemon();
});
after(async () => {
  await daemon?.stop();
});

const closures = []; // [name, closed] for the unparseable vectors

describe('proto/vectors/requests.json, NDJSON, expect.ok false', { skip: vectors ? false : `no ${VECTORS}` }, () => {
  test('there are vectors to run', () => {
    assert.ok(bad.length > 50, `only ${bad.length} vectors`);
  });

  for (const v of bad) {
    test(v.name, async () => {
      const input = inputBytes(v);
      const conn = new RawConn(daemon.sock);
      try {
        await conn.ready;
        if (!startsAsNdjson(input)) {
          // The first byte picks the framing: make this connection NDJSON.
          conn.write('{"op":"ping","id":"warm"}\n');
          assert.deepEqual(await conn.next(), { id: 'warm', ok: true });
        }
        conn.write(Buffer.concat([input, Buffer.from('\n')]));
        if (isBlank(input)) {
          // The decoder refuses an empty request; the server skips blank
          // lines without an answer, and the connection goes on.
          conn.write('{"op":"ping","id":"after"}\n');
          assert.deepEqual(await conn.next(), { id: 'after', ok: true });
          return;
        }
        const res = await conn.next();
        assert.ok(res, 'connection closed without an answer');
        assert.equal(res.ok, false, JSON.stringify(res));
        assert.equal(res.error?.code, v.expect.code, JSON.stringify(res));
        assert.equal(typeof res.error.message, 'string');
        // expect.id is the id's JSON text as the daemon echoes it, or null.
        const idText = 'id' in res ? JSON.stringify(res.id) : null;
        assert.equal(idText, v.expect.id ?? null, `id echo: ${JSON.stringify(res)}`);
        if (v.expect.message != null) assert.equal(res.error.message, v.expect.message);
        const err = errorFromCode(res.error.code, res.error.message);
        assert.ok(err instanceof BadRequestError);
        // Then: a field error leaves the connection open; an unparseable
        // line closes it (checked for all of them below).
        conn.write('{"op":"ping","id":"after"}\n');
        const next = await conn.next().catch(() => null);
        if (unparseable(v)) {
          closures.push([v.name, next === null]);
        } else if (v.expect.field != null) {
          assert.deepEqual(next, { id: 'after', ok: true }, 'connection still served after a field error');
        }
      } finally {
        conn.destroy();
      }
    });
  }

  test('the daemon closes the connection after an unparseable line', () => {
    assert.ok(closures.length > 10, `only ${closures.length} unparseable vectors`);
    const open = closures.filter(([, closed]) => !closed).map(([n]) => n);
    assert.deepEqual(open, [], `left open after: ${open.join(', ')}`);
  });
});
