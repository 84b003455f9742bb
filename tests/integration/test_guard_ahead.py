"""Replies read ahead toward a guard's (node.c, guard_read): the acquire's
reply is in, the guard's not yet. Whatever happens then (the acquire times
out, the connection drops, the daemon stops) frees the replies read ahead
once, and the node goes on answering in order."""

import time

from rl import PREFIX, SLOW, assert_ok, poll_until, resp_cmd, rname
from test_noscript_order import Gate


def _replies(buf):
    """(start, end, bytes) of each complete top-level reply in buf (no
    arrays: INFO, GET, SET NX GET and the acquire script answer none)."""
    out, pos = [], 0
    while True:
        i = buf.find(b"\r\n", pos)
        if i < 0:
            return out
        end = i + 2
        if buf[pos:pos + 1] == b"$" and buf[pos + 1:pos + 2] != b"-":
            end = i + 2 + int(buf[pos + 1:i]) + 2
            if end > len(buf):
                return out
        out.append((pos, end, buf[pos:end]))
        pos = end


def _guard_at(buf, mark):
    """Where the reply of the guard after the acquire starts: a reply with
    the mark that does not follow an INFO reply (the check every second
    is INFO, then the same GET)."""
    rs = _replies(buf)
    for j in range(1, len(rs)):
        if mark in rs[j][2] and b"# Replication" not in rs[j - 1][2]:
            return rs[j][0]
    return None


def _start(cluster, daemon_factory, name, extra=()):
    n5 = cluster.nodes[4]
    g5 = Gate(n5.path)
    nodes = []
    for nd in cluster.nodes[:4]:
        nodes += ["--node", nd.uri]
    nodes += ["--node", g5.uri]
    d = daemon_factory.start(cluster, name=name, node_args=nodes,
                             extra=["--node-timeout-ms", str(int(300 * SLOW))]
                             + list(extra))
    return d, g5


def _read_ahead(g5, c, res):
    """An acquire whose reply from node 5 is let through, the guard's held:
    the acquire wins on nodes 1-4 meanwhile."""
    g5.shut()
    t = time.monotonic()
    r = c.call("acquire", resource=res, ttl_ms=5000)
    assert_ok(r)
    # The acquire's and the guard's replies (SET NX GET: $-1 then the
    # mark as a bulk; the script: :1 or the like, then the mark).
    mark = resp_cmd(g5.upstream, "GET", PREFIX + "dataset")
    assert g5.wait_held(lambda b: _guard_at(b, mark) is not None,
                        5.0 * SLOW), g5.held
    with g5.cv:
        g5.allow = _guard_at(g5.held, mark)
        g5.cv.notify_all()
    return r, t


def test_ahead_then_timeout_then_late_guard(cluster, daemon_factory):
    d, g5 = _start(cluster, daemon_factory, "gat")
    try:
        with d.client(timeout=10.0 * SLOW) as c:
            res = rname("ahead")
            _read_ahead(g5, c, res)
            time.sleep(0.6 * SLOW)  # past the node timeout
            g5.reopen()
            assert_ok(c.call("acquire", resource=rname("next"), ttl_ms=5000))
            assert d.alive()
            ok, _ = poll_until(lambda: d.health()["nodes"][4].get("up"),
                               5.0 * SLOW)
            assert ok, d.health()
    finally:
        g5.reopen()
        daemon_factory.teardown([])
        g5.close()


def test_ahead_then_connection_lost(cluster, daemon_factory):
    d, g5 = _start(cluster, daemon_factory, "gal", ["--acquire-script"])
    try:
        with d.client(timeout=10.0 * SLOW) as c:
            _read_ahead(g5, c, rname("lost"))
            time.sleep(0.1)
            for s in g5.conns:
                try:
                    s.close()
                except OSError:
                    pass
            ok, _ = poll_until(
                lambda: "dropping connection (read)" in d.stderr_text(),
                5.0 * SLOW)
            assert ok, d.stderr_tail(30)
            g5.reopen()
            assert_ok(c.call("acquire", resource=rname("next"), ttl_ms=5000))
            assert d.alive()
    finally:
        g5.reopen()
        daemon_factory.teardown([])
        g5.close()


def test_ahead_then_daemon_stops(cluster, daemon_factory):
    d, g5 = _start(cluster, daemon_factory, "gas",
                   ["--node-timeout-ms", "8000"])
    try:
        with d.client(timeout=10.0 * SLOW) as c:
            _read_ahead(g5, c, rname("stop"))
            time.sleep(0.1)
        code, secs = d.stop(10.0 * SLOW)
        assert code == 0, d.stderr_tail(60)
    finally:
        g5.reopen()
        daemon_factory.teardown([])
        g5.close()
