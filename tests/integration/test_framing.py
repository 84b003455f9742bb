"""NDJSON framing across reads: lines handled straight from the socket read,
partial lines kept for the next read, oversized lines caught whether they
arrive at once or in pieces, and a connection paused with lines still
unread (the daemon's fast path reads into a stack buffer and keeps only
what is left over)."""

import json
import socket
import time

from rl import SLOW, Client, Closed, assert_error, assert_ok, rname
from test_bad_input import _send_and_drain


def _warm(c):
    # The first read picks the framing and goes through the buffered path;
    # later reads on an empty buffer take the in-place path under test.
    assert_ok(c.request({"op": "ping"}))


def _answers(c, n, timeout=10.0):
    got = {}
    for _ in range(n):
        rsp = c.read_msg(timeout=timeout)
        got[Client.key(rsp.get("id"))] = rsp
    return got


def test_line_split_across_writes(daemon_mod):
    with daemon_mod.client() as c:
        _warm(c)
        c.send_raw(b'{"op":"ping","id":1}\n{"op":"pi')
        time.sleep(0.05)  # the daemon reads the partial line on its own
        c.send_raw(b'ng","id":2}\n')
        got = _answers(c, 2)
        assert set(got) == {Client.key(1), Client.key(2)}, got
        for rsp in got.values():
            assert_ok(rsp)


def test_request_byte_by_byte(daemon_mod):
    res = rname("bytes")
    line = Client.encode({"op": "acquire", "resource": res, "ttl_ms": 5000,
                          "id": "b"})
    with daemon_mod.client() as c:
        _warm(c)
        for i in range(len(line)):
            c.send_raw(line[i:i + 1])
            if i % 7 == 0:
                time.sleep(0.002)
        rsp = c.response("b")
        assert_ok(rsp)
        assert rsp["resource"] == res
        rel = c.request({"op": "release", "lock": rsp["lock"]})
        assert_ok(rel)


def test_partial_line_then_many_lines_in_one_write(daemon_mod):
    with daemon_mod.client() as c:
        _warm(c)
        c.send_raw(b'{"op":"ping",')
        time.sleep(0.05)
        rest = b'"id":0}\n' + b"".join(
            Client.encode({"op": "ping", "id": i}) + (b"\n" if i % 3 else b"")
            for i in range(1, 300))
        c.send_raw(rest)
        got = _answers(c, 300)
        assert set(got) == {Client.key(i) for i in range(300)}
        for rsp in got.values():
            assert_ok(rsp)


def test_oversized_line_in_pieces(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="d", extra=["--max-line-bytes",
                                                       "1024"])
    with d.client() as c:
        _warm(c)
        # Under the limit in each piece, over it together, no newline yet.
        c.send_raw(b'{"op":"ping","id":"' + b"x" * 700)
        time.sleep(0.05)
        c.send_raw_quiet(b"y" * 700)
        rsp = c.read_msg(timeout=5.0)
        assert_error(rsp, "too_large")
        try:
            extra = c.read_msg(timeout=5.0)
        except Closed:
            extra = None
        assert extra is None, extra
    # The daemon is still there for everyone else.
    with d.client() as c2:
        assert_ok(c2.request({"op": "ping"}))


def test_oversized_line_with_good_lines_before_it(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="d", extra=["--max-line-bytes",
                                                       "1024"])
    with d.client() as c:
        _warm(c)
        c.send_raw_quiet(Client.encode({"op": "ping", "id": "ok1"}) +
                         Client.encode({"op": "ping", "id": "ok2"}) +
                         b'{"op":"ping","id":"' + b"z" * 2000 + b'"}\n')
        got = [c.read_msg(timeout=5.0) for _ in range(3)]
        assert [g.get("id") for g in got[:2]] == ["ok1", "ok2"], got
        assert_ok(got[0])
        assert_ok(got[1])
        assert_error(got[2], "too_large")


def test_lines_held_back_by_max_inflight_are_all_answered(cluster,
                                                          daemon_factory):
    # --max-inflight 4 pauses reading with most of one write still unread;
    # every line must be answered once reading resumes.
    d = daemon_factory.start(cluster, name="d", extra=["--max-inflight", "4"])
    tag = rname("held")
    reqs = [{"op": "acquire", "resource": "%s-%d" % (tag, i),
             "ttl_ms": 5000, "id": i} for i in range(60)]
    with d.client(timeout=10.0) as c:
        _warm(c)
        answers, extra = c.pipeline(reqs, timeout=20.0)
        assert not extra, extra
        assert all(len(v) == 1 for v in answers.values()), answers
        locks = []
        for v in answers.values():
            assert_ok(v[0])
            locks.append(v[0]["lock"])
        assert len(set(locks)) == 60
        rel, extra = c.pipeline([{"op": "release", "lock": t, "id": "r%d" % i}
                                 for i, t in enumerate(locks)], timeout=20.0)
        assert not extra, extra
        for v in rel.values():
            assert_ok(v[0])


def _half_close(d, data, warm=False):
    """Sends data, shuts the writing side, returns every answer."""
    with d.client(timeout=5.0 * SLOW) as c:
        if warm:
            _warm(c)
        c.send_raw(data)
        c.sock.shutdown(socket.SHUT_WR)
        return [json.loads(ln) for ln in c.read_until_closed(5.0 * SLOW)]


def test_unterminated_last_line_is_answered(daemon_mod):
    """A request without its newline when the peer half-closes
    (`printf '{"op":"ping"}' | socat ...`) is answered with an error that
    names the newline, after the complete lines' answers, whether it came
    in the read that picked the framing or in a later one. A blank tail is
    no request."""
    for data, warm in ((b'{"op":"ping","id":1}', False),
                       (b'{"op":"ping","id":0}\n{"op":"ping","id":1}', True),
                       (b'{"op":"pi', True)):
        msgs = _half_close(daemon_mod, data, warm)
        assert all(m.get("ok") is True for m in msgs[:-1]), msgs
        last = msgs[-1]
        assert last.get("ok") is False, msgs
        assert last["error"]["code"] == "bad_request", msgs
        assert "newline" in last["error"]["message"], msgs
        assert "id" not in last, msgs
        assert len(msgs) == data.count(b"\n") + 1, msgs
    msgs = _half_close(daemon_mod, b'{"op":"ping","id":1}\n \r\t', True)
    assert msgs == [{"id": 1, "ok": True}], msgs
    with Client(daemon_mod.socket, timeout=5.0 * SLOW) as c:
        assert_ok(c.call("ping"))


def test_byte_order_mark_at_the_start_is_dropped(daemon_mod):
    """A UTF-8 BOM as a stream's first bytes (some Windows tools write one)
    is dropped, also when it arrives in pieces, for NDJSON and HTTP alike;
    anywhere else it is a byte like any other."""
    bom = b"\xef\xbb\xbf"
    with daemon_mod.client(timeout=5.0 * SLOW) as c:
        c.send_raw(bom + b'{"op":"ping","id":1}\n')
        assert c.read_msg() == {"id": 1, "ok": True}
        c.send_raw(bom + b'{"op":"ping","id":2}\n')
        rsp = c.read_msg()
        assert rsp.get("ok") is False, rsp
        assert rsp["error"]["code"] == "bad_request", rsp
    with daemon_mod.client(timeout=5.0 * SLOW) as c:
        for k in range(3):
            c.send_raw(bom[k:k + 1])
            time.sleep(0.05)
        c.send_raw(b'{"op":"ping","id":3}\n')
        assert c.read_msg() == {"id": 3, "ok": True}
    got = _send_and_drain(daemon_mod.socket, bom + b"GET /v1/ping HTTP/1.1"
                          b"\r\nHost: x\r\nConnection: close\r\n\r\n",
                          5.0 * SLOW)
    assert got.startswith(b"HTTP/1.1 200 "), got
    # Part of a BOM is no BOM: its first byte picks HTTP, which refuses it.
    got = _send_and_drain(daemon_mod.socket, b'\xef\xbb{"op":"ping"}\n',
                          5.0 * SLOW)
    assert got.startswith(b"HTTP/1.1 400 "), got
