"""Client decoding against a scripted fake daemon: the shared response
vectors (proto/vectors/responses.json), out-of-order answers, events, and
malformed lines.  No redlockd needed here."""

import asyncio
import json
import os
import socket
import tempfile
import threading
import time

import pytest

from conftest import REPO
from redlockd import (ERRORS, AsyncRedlockClient, ConnectionLostError,
                      NoQuorumError, ProtocolError, RedlockClient,
                      RequestTimeoutError)

RESPONSES = REPO / "proto" / "vectors" / "responses.json"


class FakeDaemon:
    """A unix-socket server; ``script(req) -> list of lines (str/bytes)``
    answers each request line of each connection.  Bounded everywhere."""

    def __init__(self, script):
        self.script = script
        self.dir = tempfile.mkdtemp(prefix="rlpy-fake-", dir="/tmp")
        self.path = os.path.join(self.dir, "fake.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.srv.settimeout(0.02)
        self.stop = threading.Event()
        self.conns = []
        self.received = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.srv.accept()
            except OSError:
                continue
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,),
                             daemon=True).start()

    def _serve(self, c):
        c.settimeout(0.05)
        buf = b""
        while not self.stop.is_set():
            try:
                data = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                req = json.loads(line)
                self.received.append(req)
                out = self.script(req, c)
                for x in out or ():
                    try:
                        c.sendall(x if isinstance(x, bytes)
                                  else x.encode("utf-8") + b"\n")
                    except OSError:
                        return

    def close(self):
        self.stop.set()
        self.thread.join(2)
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.srv.close()
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


@pytest.fixture
def fake():
    made = []

    def make(script):
        f = FakeDaemon(script)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def with_id(text, rid):
    msg = json.loads(text)
    msg["id"] = rid
    return json.dumps(msg, ensure_ascii=False)


def _response_vectors(kind):
    if not RESPONSES.exists():
        return []
    return [pytest.param(v, id=v["name"])
            for v in json.loads(RESPONSES.read_text(encoding="utf-8"))
            if v.get("kind") == kind]


@pytest.mark.parametrize("vec", _response_vectors("response"))
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_response_vector(fake, vec, flavour):
    spec = vec["response"]
    expect = json.loads(vec["expect"])
    f = fake(lambda req, c: [with_id(vec["expect"], req["id"])])

    async def call(c):
        if spec["error"] is None and "lock" in expect:
            return await c.acquire("asked", ttl_ms=1000)
        return await c.ping()

    if flavour == "sync":
        c = RedlockClient(f.path, timeout=5)
        do = (lambda: c.acquire("asked", ttl_ms=1000)) \
            if spec["error"] is None and "lock" in expect else c.ping
        try:
            result = _outcome(do)
        finally:
            c.close()
    else:
        async def main():
            async with AsyncRedlockClient(f.path, timeout=5) as c:
                return await _aoutcome(call(c))
        result = asyncio.run(asyncio.wait_for(main(), 10))

    if spec["error"] is not None:
        assert isinstance(result, ERRORS[spec["error"]]), result
        assert result.code == spec["error"]
        assert result.message == expect["error"]["message"]
        if spec["message"] is not None:
            assert result.message == spec["message"]
    elif "lock" in expect:
        assert result.token == spec["lock"]
        assert result.resource == (spec["resource"] or "asked")
        assert result.validity_ms == spec["validity_ms"]
        assert result.fence == spec["fence"]   # exact, also beyond 2**53
    else:
        assert result is True


def _outcome(fn):
    try:
        return fn()
    except Exception as e:
        return e


async def _aoutcome(coro):
    try:
        return await coro
    except Exception as e:
        return e


@pytest.mark.parametrize("vec", _response_vectors("event"))
def test_event_vector(fake, vec):
    ev = vec["event"]

    def script(req, c):
        if req["op"] == "acquire":
            return [json.dumps({"id": req["id"], "ok": True,
                                "lock": ev["lock"],
                                "resource": req["resource"],
                                "validity_ms": 900}),
                    vec["expect"]]
        return [json.dumps({"id": req["id"], "ok": True})]

    f = fake(script)
    events = []
    with RedlockClient(f.path, timeout=5, on_event=events.append) as c:
        lock = c.acquire(ev["resource"], ttl_ms=1000, renew=True)
        assert lock.lost.wait(5)
        assert lock.lost_reason == "lost"
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            time.sleep(0.01)
        assert events == [json.loads(vec["expect"])]
        assert c.ping()

    async def main():
        async with AsyncRedlockClient(f.path, timeout=5) as c:
            lock = await c.acquire(ev["resource"], ttl_ms=1000, renew=True)
            await asyncio.wait_for(lock.lost.wait(), 5)
    asyncio.run(asyncio.wait_for(main(), 10))


@pytest.mark.parametrize("vec", _response_vectors("health"))
def test_health_vector(fake, vec):
    expect = json.loads(vec["expect"])
    f = fake(lambda req, c: [with_id(vec["expect"], req["id"])])
    with RedlockClient(f.path, timeout=5) as c:
        if expect["ok"]:
            h = c.health()
            assert h == {k: v for k, v in expect.items() if k != "id"}
        else:
            with pytest.raises(NoQuorumError) as ei:
                c.health()
            assert ei.value.response["nodes"] == expect["nodes"]


def test_out_of_order_answers(fake):
    """The fake holds 50 requests, then answers them newest first."""
    held = []
    mu = threading.Lock()

    def script(req, c):
        with mu:
            held.append(req)
            if len(held) < 50:
                return []
            batch = list(reversed(held))
            held.clear()
        return [json.dumps({"id": r["id"], "ok": True,
                            "lock": "%032x" % int(r["resource"]),
                            "resource": r["resource"],
                            "validity_ms": 1000}) for r in batch]

    f = fake(script)
    with RedlockClient(f.path, timeout=5) as c:
        out = {}

        def one(i):
            out[i] = c.acquire(str(i), ttl_ms=1000)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert sorted(out) == list(range(50))
        for i, lk in out.items():
            assert lk.resource == str(i) and lk.token == "%032x" % i

    async def main():
        async with AsyncRedlockClient(f.path, timeout=5) as c:
            locks = await asyncio.gather(*[c.acquire(str(i), ttl_ms=1000)
                                           for i in range(50)])
            assert [lk.token for lk in locks] == ["%032x" % i
                                                  for i in range(50)]
    asyncio.run(asyncio.wait_for(main(), 10))


def test_malformed_lines(fake):
    def script(req, c):
        if req["op"] == "health":   # broken JSON, but the id is readable
            return ['{"id":%d,"ok":true,"nodes":[{"addr""x"}]}' % req["id"]]
        if req["op"] == "extend":   # broken JSON without an id: ignored
            return ['{"ok":tru']
        return [json.dumps({"id": req["id"], "ok": True})]

    f = fake(script)
    with RedlockClient(f.path, timeout=5) as c:
        with pytest.raises(ProtocolError):
            c.health()
        with pytest.raises(RequestTimeoutError):
            c.extend("0" * 32, resource="r", timeout=0.3)
        assert c.ping()  # the connection goes on

    async def main():
        async with AsyncRedlockClient(f.path, timeout=5) as c:
            with pytest.raises(ProtocolError):
                await c.health()
            with pytest.raises(RequestTimeoutError):
                await c.extend("0" * 32, resource="r", timeout=0.3)
            assert await c.ping()
    asyncio.run(asyncio.wait_for(main(), 10))


def test_daemon_closes_mid_request(fake):
    def script(req, c):
        if req["op"] == "acquire":
            c.shutdown(socket.SHUT_RDWR)
            return []
        return [json.dumps({"id": req["id"], "ok": True})]

    f = fake(script)
    with RedlockClient(f.path, timeout=5) as c:
        assert c.ping()
        with pytest.raises(ConnectionLostError):
            c.acquire("r")
        assert c.ping()  # reconnects

    async def main():
        async with AsyncRedlockClient(f.path, timeout=5) as c:
            with pytest.raises(ConnectionLostError):
                await c.acquire("r")
            assert await c.ping()
    asyncio.run(asyncio.wait_for(main(), 10))


def test_requests_carry_resource(fake):
    """release / extend / complete send the resource with the token."""
    f = fake(lambda req, c: [json.dumps(
        dict({"id": req["id"], "ok": True},
             **({"lock": "a" * 32, "resource": req["resource"],
                 "validity_ms": 5} if req["op"] in ("acquire", "extend")
                else {})))])
    with RedlockClient(f.path, timeout=5) as c:
        lk = c.acquire("res:1", ttl_ms=500, wait_ms=7, fence=True,
                       renew=True, renew_max_ms=9000)
        c.extend(lk, 700)
        c.complete(lk, keep_ms=1234)
        c.release("b" * 32, resource="res:2")
    ops = [{k: v for k, v in r.items() if k != "id"} for r in f.received]
    assert ops == [
        {"op": "acquire", "resource": "res:1", "ttl_ms": 500, "wait_ms": 7,
         "renew": True, "fence": True, "renew_max_ms": 9000},
        {"op": "extend", "lock": "a" * 32, "resource": "res:1",
         "ttl_ms": 700},
        {"op": "complete", "lock": "a" * 32, "resource": "res:1",
         "keep_ms": 1234},
        {"op": "release", "lock": "b" * 32, "resource": "res:2"},
    ]
    assert len({r["id"] for r in f.received}) == 4


def test_connection_drop_marks_locks_lost(fake):
    def script(req, c):
        if req["op"] == "acquire":
            return [json.dumps({"id": req["id"], "ok": True,
                                "lock": "%032x" % int(req["resource"]),
                                "resource": req["resource"],
                                "validity_ms": 1000})]
        c.shutdown(socket.SHUT_RDWR)  # any other op: the daemon goes away
        return []

    f = fake(script)
    called = []
    done = threading.Event()

    def on_lost(lk):
        called.append(lk.token)
        if len(called) == 3:
            done.set()

    with RedlockClient(f.path, timeout=5) as c:
        locks = [c.acquire(str(i), on_lost=on_lost) for i in range(3)]
        with pytest.raises(ConnectionLostError):
            c.ping()
        assert done.wait(5)
        assert sorted(called) == sorted(lk.token for lk in locks)
        assert all(lk.lost.is_set() and lk.lost_reason for lk in locks)
        # A deliberate close sets lost too, without calling on_lost.
        quiet = c.acquire("7", on_lost=on_lost)
    assert quiet.lost.is_set() and quiet.lost_reason == "client closed"
    time.sleep(0.1)
    assert len(called) == 3
