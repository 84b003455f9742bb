"""Bad input never crashes the daemon and never drops
another client's lock."""

import random
import socket
import time

from rl import (SLOW, Client, Closed, assert_error, assert_ok, lock_key,
                poll_until, rname)


def _send_and_drain(path, data, read_s=1.0):
    """Writes data on a fresh connection, reads whatever comes back for up to
    read_s (or until closed), closes. Returns the bytes read."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    got = b""
    try:
        s.connect(str(path))
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        deadline = time.monotonic() + read_s
        for _ in range(1000):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    return got


def _ndjson_then(path, line, problems):
    """On an NDJSON connection (a good ping first), sends an unparseable
    line and expects one bad_request, then the close. A connection left open
    is noted in problems (asserted at the end, so the rest still runs)."""
    with Client(path, timeout=5.0) as c:
        assert c.call("ping")["ok"] is True
        c.send_raw_quiet(line)
        r = c.read_msg()
        assert_error(r, "bad_request")
        if not c.is_closed(2.0):
            problems.append("connection left open after unparseable line "
                            "%r (answer was %r)" % (line[:40], r))
        return r


def test_bad_input_survives_and_keeps_locks(cluster, daemon):
    rng = random.Random(1234)
    problems = []
    path = daemon.socket
    keeper_res = rname("keeper")
    keeper = daemon.client(timeout=10.0)
    try:
        tok = keeper.call("acquire", resource=keeper_res,
                          ttl_ms=120000)["lock"]
        key = lock_key(keeper_res)
        assert cluster.get_all(key) == [tok.encode()] * 5
        fds0 = daemon.fd_count()

        # Binary garbage as the very first bytes (HTTP framing then): the
        # daemon may answer 400 or close, but must survive.
        for _ in range(20):
            blob = bytes(rng.randrange(256) for _ in range(rng.randrange(
                1, 4096)))
            _send_and_drain(path, b"\x00" + blob + b"\r\n\r\n", 0.2)
        _send_and_drain(path, b"\xff" * 5000 + b"\n", 0.3)
        _send_and_drain(path, b"\x00" * 100, 0.2)

        # Garbage after NDJSON was chosen: bad_request, then closed.
        blob = bytes(b for b in (rng.randrange(256) for _ in range(3000))
                     if b != 0x0A)
        _ndjson_then(path, b"\x00" + blob + b"\n", problems)
        _ndjson_then(path, b"\xff" * 1000 + b"\n", problems)
        _ndjson_then(path, b'{"op":"ping"\x00}\n', problems)
        _send_and_drain(path, b"{" + bytes(rng.randrange(256)
                                           for _ in range(2000)) + b"\n", 0.5)

        # Invalid UTF-8 / control characters in resource.
        bad_resources = [b"ab\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80x",
                         b"abc\xe2\x82", b"\\ud800", b"a\\u0000b",
                         b"tab\\there", b"nl\\nhere"]
        for raw in bad_resources:
            line = (b'{"op":"acquire","id":7,"resource":"bi-' + raw +
                    b'","ttl_ms":60000}\n')
            with Client(path, timeout=5.0) as c:
                c.send_raw_quiet(line)
                try:
                    r = c.read_msg()
                except Closed:
                    raise AssertionError("closed without an answer to %r"
                                         % line)
                assert_error(r, "bad_request")
        for keys in cluster.keys_all("redlock:lock:bi-*"):
            assert keys == [], "a bad resource was locked: %r" % keys
        for keys in cluster.keys_all("redlock:lock:a"):
            assert keys == [], "a\\u0000b was truncated and locked"

        # Very deep nesting (under the line limit).
        for deep in (b"[" * 30000 + b"]" * 30000,
                     b'{"a":' * 10000 + b"1" + b"}" * 10000):
            with Client(path, timeout=5.0) as c:
                c.send_raw_quiet(b'{"op":"ping","id":"deep","x":' + deep +
                                 b"}\n")
                try:
                    r = c.read_msg()
                    assert_error(r, "bad_request")
                except Closed:
                    raise AssertionError("no answer to deep nesting")
        assert daemon.alive(), "daemon died on deep nesting"

        # Every bad-field case, pipelined on one connection.
        with Client(path, timeout=5.0) as c:
            reqs = [
                {"op": "nope", "id": 1},
                {"op": "acquire", "id": 2},
                {"op": "acquire", "resource": "r", "ttl_ms": 1, "id": 3},
                {"op": "release", "lock": "xyz", "id": 4},
                {"op": "ping", "what": 1, "id": 5},
                {"op": "release", "lock": "0" * 32, "id": 6},
                {"op": "acquire", "resource": keeper_res, "id": 7},
            ]
            answers, extra = c.pipeline(reqs)
            codes = {k: v[0]["error"]["code"] for k, v in answers.items()}
            assert codes == {"1": "bad_request", "2": "bad_request",
                             "3": "bad_request", "4": "bad_request",
                             "5": "bad_request", "6": "not_held",
                             "7": "busy"}, codes
        # Oversized lines.
        with Client(path, timeout=5.0) as c:
            c.send_raw_quiet(b'{"op":"ping","x":"' + b"z" * 100000 + b'"}\n')
            assert_error(c.read_msg(), "too_large")

        # Connect/disconnect storm.
        storm = rname("storm")
        t0 = time.monotonic()
        eagain = 0
        for i in range(500):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2.0)
            try:
                # A full listen backlog makes a non-blocking AF_UNIX connect
                # fail with EAGAIN instead of waiting: retry, bounded.
                for _ in range(2000):
                    try:
                        s.connect(str(path))
                        break
                    except BlockingIOError:
                        eagain += 1
                        time.sleep(0.001)
                else:
                    raise AssertionError("connect kept failing with EAGAIN")
                m = i % 6
                try:
                    if m == 1:
                        s.sendall(b'{"op":"acq')
                    elif m == 2:
                        s.sendall(b"{")
                    elif m == 3:
                        s.sendall(b'{"op":"acquire","resource":"%s-%d",'
                                  b'"ttl_ms":60000}\n' % (storm.encode(), i))
                    elif m == 4:
                        s.sendall(b"GET /v1/pi")
                    elif m == 5:
                        s.sendall(b"   \n  ")
                except (BrokenPipeError, ConnectionResetError):
                    pass
            finally:
                s.close()
        print("storm of 500 connections took %.2fs (%d EAGAIN retries on "
              "connect: listen backlog full)" % (time.monotonic() - t0,
                                                 eagain))

        # Still up, and answers.
        assert daemon.alive(), "daemon died:\n" + daemon.stderr_tail()
        with daemon.client() as c:
            assert c.call("ping")["ok"] is True
            h = c.call("health")
            assert h.get("ok") is True, h

        # Acquisitions whose client vanished are released, not leaked.
        def storm_clean():
            return all(k == [] for k in
                       cluster.keys_all("redlock:lock:" + storm + "*"))
        ok, took = poll_until(storm_clean, 3.0 * SLOW, 0.05)
        assert ok, "locks of closed storm connections left: %r" % (
            cluster.keys_all("redlock:lock:" + storm + "*"),)

        # No descriptor leak: the storm's connections are all closed.
        def fds_back():
            return daemon.fd_count() <= fds0 + 5
        ok, took = poll_until(fds_back, 3.0 * SLOW, 0.05)
        assert ok, "daemon fds: %d before, %d after the storm" % (
            fds0, daemon.fd_count())

        # The keeper's lock survived everything and is still its own.
        assert cluster.get_all(key) == [tok.encode()] * 5
        assert keeper.call("ping")["ok"] is True
        assert_ok(keeper.call("extend", lock=tok, ttl_ms=120000))
        assert_ok(keeper.call("release", lock=tok))
        assert cluster.get_all(key) == [None] * 5
    finally:
        keeper.close()
    assert not problems, "\n".join(problems)
