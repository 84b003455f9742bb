"""Every error code reachable over NDJSON."""

import json
import socket
import time

from extra import curl1
from rl import (SLOW, Client, Closed, assert_error, assert_ok, err_code,
                lock_key, pytest, rname)


# -- bad_request: a bad field keeps the connection open; the message names
#    the field and the id is echoed.

BAD_FIELDS = [
    ({"op": "frobnicate"}, "op"),
    ({"op": 7}, "op"),
    ({}, "op"),
    ({"op": "acquire"}, "resource"),
    ({"op": "acquire", "resource": ""}, "resource"),
    ({"op": "acquire", "resource": 5}, "resource"),
    ({"op": "acquire", "resource": "x" * 513}, "resource"),
    ({"op": "acquire", "resource": "a\u0001b"}, "resource"),
    ({"op": "acquire", "resource": "r", "ttl_ms": 5}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "ttl_ms": 0}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "ttl_ms": -1}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "ttl_ms": 86400001}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "ttl_ms": "100"}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "ttl_ms": 1.5}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "ttl_ms": None}, "ttl_ms"),
    ({"op": "acquire", "resource": "r", "wait_ms": 300001}, "wait_ms"),
    ({"op": "acquire", "resource": "r", "wait_ms": -1}, "wait_ms"),
    ({"op": "acquire", "resource": "r", "renew": "yes"}, "renew"),
    ({"op": "release"}, "lock"),
    ({"op": "release", "lock": "xyz"}, "lock"),
    ({"op": "release", "lock": "0" * 31}, "lock"),
    ({"op": "release", "lock": "0" * 33}, "lock"),
    ({"op": "release", "lock": "g" * 32}, "lock"),
    ({"op": "release", "lock": 123}, "lock"),
    ({"op": "extend", "lock": "zz"}, "lock"),
    ({"op": "complete", "lock": "not-a-token"}, "lock"),
    ({"op": "complete", "lock": "0" * 32, "keep_ms": 0}, "keep_ms"),
    ({"op": "ping", "bogus": 1}, "bogus"),
    ({"op": "acquire", "resource": "r", "ttl": 1000}, "ttl"),
    ({"op": "ping", "id": {"a": 1}}, "id"),
    ({"op": "ping", "id": [1]}, "id"),
]


@pytest.mark.parametrize("req,field", BAD_FIELDS,
                         ids=[repr(r)[:60] for r, _ in BAD_FIELDS])
def test_bad_request_names_field(daemon_mod, req, field):
    with daemon_mod.client() as c:
        obj = dict(req)
        has_scalar_id = "id" not in obj
        if has_scalar_id:
            obj["id"] = "bad-1"
        c.send(obj)
        r = c.read_msg()
        assert_error(r, "bad_request", field)
        if has_scalar_id:
            assert r.get("id") == "bad-1", (
                "error for a bad field must still echo the id: %r" % r)
        # A bad field is not a framing error: the connection stays usable.
        r2 = c.request({"op": "ping", "id": "after"})
        assert r2.get("ok") is True, r2


def test_unknown_field_message_names_it(daemon_mod):
    with daemon_mod.client() as c:
        r = c.request({"op": "acquire", "resource": rname("uf"),
                       "zzfrobfield": True})
        assert_error(r, "bad_request", "zzfrobfield")


MALFORMED = [
    b'{"op":"ping",\n',
    b'{"op":"ping"\n',
    b'{"op":"ping"}}\n',
    b'{op:ping}\n',
    b"{'op':'ping'}\n",
    b'{"op":"ping","id":1,}\n',
    b'{"op":"ping"} trailing\n',
]


@pytest.mark.parametrize("line", MALFORMED, ids=[repr(m) for m in MALFORMED])
def test_malformed_json_bad_request_then_closed(daemon_mod, line):
    with daemon_mod.client() as c:
        c.send_raw(line)
        r = c.read_msg()
        assert_error(r, "bad_request")
        assert c.is_closed(2.0), (
            "connection not closed after malformed JSON %r" % line)


def test_malformed_after_good_lines(daemon_mod):
    """A malformed line later in a session: answered once, then closed; the
    lines before it were answered normally."""
    with daemon_mod.client() as c:
        c.send_raw(b'{"op":"ping","id":1}\n{"op":"ping",,}\n'
                   b'{"op":"ping","id":3}\n')
        first = c.read_msg()
        assert first.get("id") == 1 and first.get("ok") is True, first
        r = c.read_msg()
        assert_error(r, "bad_request")
        try:
            rest = c.read_until_closed(2.0)
        except socket.timeout:
            raise AssertionError(
                "connection still open 2 s after a malformed line; lines "
                "read since: %r" % c.lines_before_close[:5])
        assert rest == [], "answered after the malformed line: %r" % rest


def test_non_object_json_refused(daemon_mod):
    """Once NDJSON is chosen, a JSON value that is not an object is refused
    (the connection may be closed or kept; the daemon stays up)."""
    for line in (b"[1,2]\n", b"42\n", b'"ping"\n', b"null\n"):
        with daemon_mod.client() as c:
            assert c.call("ping")["ok"] is True
            c.send_raw(line)
            r = c.read_msg()
            assert_error(r, "bad_request")
    with daemon_mod.client() as c:
        assert c.call("ping")["ok"] is True


def _too_large(path, line, newline=True):
    c = Client(path, timeout=5.0)
    try:
        c.send_raw_quiet(line + (b"\n" if newline else b""))
        r = c.read_msg(5.0)
        assert_error(r, "too_large")
        rest = c.read_until_closed(3.0)
        assert rest == [], "more than one answer to an oversized line: %r" % (
            rest,)
    finally:
        c.close()


def test_too_large_default_limit(daemon_mod):
    body = b'{"op":"acquire","resource":"' + b"a" * 70000 + b'"}'
    assert len(body) > 65536
    _too_large(daemon_mod.socket, body)
    assert daemon_mod.alive()


def test_too_large_without_newline(daemon_mod):
    """The daemon must not buffer an endless line waiting for its newline."""
    body = b'{"op":"ping","pad":"' + b"b" * 70000
    _too_large(daemon_mod.socket, body, newline=False)


def test_too_large_small_limit(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="small",
                             extra=["--max-line-bytes", "2048"])
    # Under the limit: a valid line padded with JSON whitespace is served.
    with d.client() as c:
        r = c.request({"op": "ping", "id": "pad"})
        assert r["ok"] is True
        c.send_raw(b'{"op":"ping","id":"under"' + b" " * 1900 + b"}\n")
        r = c.read_msg()
        assert r.get("ok") is True and r.get("id") == "under", r
    _too_large(d.socket, b'{"op":"ping","id":"over"' + b" " * 3000 + b"}")
    # After a good line on the same connection as well.
    c = d.client()
    try:
        assert c.call("ping")["ok"] is True
        c.send_raw_quiet(b'{"op":"ping"' + b" " * 5000 + b"}\n")
        assert_error(c.read_msg(), "too_large")
        assert c.is_closed(3.0)
    finally:
        c.close()
    with d.client() as c:
        assert c.call("ping")["ok"] is True


def test_not_held_busy_done(cluster_mod, daemon_mod):
    res = rname("codes")
    with daemon_mod.client() as a, daemon_mod.client() as b:
        assert_error(a.call("release", lock="0123456789abcdef" * 2),
                     "not_held")
        assert_error(a.call("extend", lock="0123456789abcdef" * 2),
                     "not_held")
        assert_error(a.call("complete", lock="0123456789abcdef" * 2),
                     "not_held")
        tok = a.call("acquire", resource=res)["lock"]
        assert_error(b.call("acquire", resource=res), "busy")
        t0 = time.monotonic()
        r = b.call("acquire", resource=res, wait_ms=300)
        waited = time.monotonic() - t0
        assert_error(r, "busy")
        print("busy after wait_ms=300 took %.3fs" % waited)
        assert waited >= 0.25, "busy answered before wait_ms ran out"
        assert_ok(a.call("complete", lock=tok))
        assert_error(b.call("acquire", resource=res), "done")
        # "waiting stops" on done: wait_ms does not make it wait.
        t0 = time.monotonic()
        assert_error(b.call("acquire", resource=res, wait_ms=5000), "done")
        print("done with wait_ms=5000 took %.3fs" % (time.monotonic() - t0))
        assert time.monotonic() - t0 < 2.0


def test_limit_max_connections(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="lim",
                             extra=["--max-connections", "2"])
    a = d.client()
    b = d.client()
    try:
        assert a.call("ping")["ok"] is True
        assert b.call("ping")["ok"] is True
        third = Client(d.socket, timeout=3.0)
        try:
            try:
                line = third.read_line(0.5)
            except socket.timeout:
                third.send_raw_quiet(b'{"op":"ping","id":3}\n')
                line = third.read_line(3.0)
            r = json.loads(line)
            assert_error(r, "limit")
            assert third.is_closed(3.0), "3rd connection not closed"
        finally:
            third.close()
        # The two admitted clients are unaffected.
        assert a.call("ping")["ok"] is True
        assert b.call("ping")["ok"] is True
    finally:
        a.close()
    # A slot is free again once a client left.

    def admitted():
        try:
            with d.client(timeout=2.0) as c:
                return c.call("ping").get("ok") is True
        except (OSError, Closed, AssertionError):
            return False
    ok = False
    for _ in range(50):
        if admitted():
            ok = True
            break
        time.sleep(0.05)
    b.close()
    assert ok, "no connection admitted after one of two clients left"


def _read_to_eof(sock, timeout):
    data = b""
    deadline = time.monotonic() + timeout
    for _ in range(1000):
        if time.monotonic() > deadline:
            raise AssertionError("not closed within %.1fs: %r" % (timeout,
                                                                  data))
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_limit_max_connections_answers_http_in_http(cluster, daemon_factory):
    """A connection refused at accept is answered in the framing of its
    first bytes: curl gets 429 with the JSON error (HEAD: the head alone),
    not an NDJSON line it would take for HTTP/0.9."""
    d = daemon_factory.start(cluster, name="limh",
                             extra=["--max-connections", "1"])
    with d.client() as a:
        assert_ok(a.call("ping"))
        r = curl1(d.socket, "http://localhost/v1/ping")
        assert r.status == 429, r
        assert_error(r.json(), "limit", "--max-connections")
        assert r.headers.get("connection") == "close", r.headers
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5.0)
        try:
            s.connect(str(d.socket))
            s.sendall(b"HEAD /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
            data = _read_to_eof(s, 5.0)
        finally:
            s.close()
        assert data.startswith(b"HTTP/1.1 429 "), data
        assert data.endswith(b"\r\n\r\n"), "HEAD answer has a body: %r" % data
        assert_ok(a.call("ping"))


def test_refusals_held_for_framing_are_bounded(cluster, daemon_factory):
    """Refused connections wait (1 s) for bytes that tell their framing,
    but at most 32 at once: the rest are answered in NDJSON at once, so
    idle refused peers cannot pile up the daemon's fds."""
    d = daemon_factory.start(cluster, name="limb",
                             extra=["--max-connections", "1"])
    with d.client() as a:
        assert_ok(a.call("ping"))
        socks = []
        try:
            for _ in range(40):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.settimeout(5.0 * SLOW)
                s.connect(str(d.socket))
                socks.append(s)
            t0 = time.monotonic()
            at_once = 0
            for s in socks:
                s.setblocking(False)
            time.sleep(0.3)
            for s in socks:
                try:
                    if s.recv(65536):
                        at_once += 1
                except BlockingIOError:
                    pass
            print("answered within 0.3 s: %d of 40" % at_once)
            assert at_once >= 8, at_once
            assert at_once < 40, "none was held for its framing"
            for s in socks:
                s.settimeout(5.0 * SLOW)
            lines = [_read_to_eof(s, 5.0 * SLOW) for s in socks]
            print("all answered after %.2f s" % (time.monotonic() - t0))
        finally:
            for s in socks:
                s.close()
        assert sum(1 for ln in lines if ln) >= 40 - at_once, lines
        for ln in lines:
            if ln:
                assert_error(json.loads(ln), "limit")
        assert_ok(a.call("ping"))


def test_no_quorum_three_paused(cluster, daemon):
    res = rname("nq")
    for nd in cluster.nodes[:3]:
        nd.pause()
    try:
        with daemon.client(timeout=10.0) as c:
            t0 = time.monotonic()
            r = c.call("acquire", resource=res, ttl_ms=10000)
            print("no_quorum answer after %.3fs" % (time.monotonic() - t0))
            assert_error(r, "no_quorum")
            assert "lock" not in r, r
    finally:
        cluster.resume_all()


def test_shutting_down_during_shutdown(cluster, daemon):
    """While shutdown is releasing (made to last ~node timeout by a paused
    node), a request on an open connection is answered shutting_down (or
    the connection closes); it never takes a lock."""
    hold = daemon.client()
    c = daemon.client(timeout=10.0)
    try:
        assert_ok(hold.call("acquire", resource=rname("held"),
                            ttl_ms=60000))
        cluster.nodes[4].pause()
        daemon.proc.send_signal(15)
        time.sleep(0.02)
        res = rname("late")
        got = []
        try:
            for i in range(3):
                c.send_raw_quiet(Client.encode(
                    {"op": "acquire", "resource": "%s-%d" % (res, i),
                     "id": i}))
                got.append(c.response(i, timeout=6.0))
        except Closed:
            got.append("closed")
        print("answers during shutdown:", got)
        for r in got:
            assert r == "closed" or err_code(r) == "shutting_down", got
        assert got[0] != "closed", (
            "no shutting_down answer although shutdown was still running")
        code = daemon.proc.wait(timeout=5.0)
        daemon.exit_code = code
        assert code == 0, code
    finally:
        cluster.resume_all()
        hold.close()
        c.close()
        daemon.stop()
    for keys in cluster.keys_all("redlock:lock:" + res + "*"):
        assert keys == [], keys


def test_shutting_down_waiter(cluster, daemon):
    """A waiting acquire during SIGTERM gets shutting_down (or its
    connection is closed); the daemon exits 0 within the bound."""
    res = rname("sd")
    key = lock_key(res)
    # Held by a foreign owner, written straight to every node, so that the
    # daemon's own shutdown release cannot free it.
    for nd in cluster.nodes:
        nd.cmd("SET", key, "f" * 32, "PX", 60000)
    c = daemon.client(timeout=10.0)
    try:
        c.send({"op": "acquire", "resource": res, "wait_ms": 20000,
                "id": "w"})
        time.sleep(0.3)
        with daemon.client() as c2:  # it is really waiting
            assert c2.call("ping")["ok"] is True
        daemon.proc.send_signal(15)
        try:
            r = c.response("w", timeout=6.0)
            assert err_code(r) == "shutting_down", r
            print("waiter got:", r)
        except Closed:
            print("waiter's connection closed without an answer")
        code = daemon.proc.wait(timeout=5.0)
        daemon.exit_code = code
        assert code == 0, "exit %r after SIGTERM" % code
    finally:
        c.close()
        daemon.stop()
    # The foreign lock is untouched.
    assert cluster.get_all(key) == [b"f" * 32] * 5
