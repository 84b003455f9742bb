"""test_resolve.py: node host names are looked up off the event loop.

A node given by name is resolved on a thread of its own, under the node
connect deadline; numeric addresses and unix sockets connect at once. A
name that does not resolve is a node that is down, saying why, and the
daemon serves with the others. A slow resolver (an LD_PRELOAD shim that
makes lookups of *.slow.test sleep) must not stop renewals."""

import os
import shutil
import subprocess
import time
from pathlib import Path

from blackhole import BlackHole
from rl import (SANITIZED, SLOW, assert_ok, lock_key,
                poll_until, pytest, resp_cmd, rname)

HERE = Path(__file__).resolve().parent


def node5_tcp(cluster):
    """Restarts node 5 listening on 127.0.0.1 too; returns its port."""
    n5 = cluster.nodes[4]
    n5.restart_on_free_port()
    return n5.tcp_port


def args_with_node5(cluster, uri5):
    out = []
    for nd in cluster.nodes[:4]:
        out += ["--node", nd.uri]
    return out + ["--node", uri5]


def node5_health(d):
    return d.health()["nodes"][4]


def test_localhost_node_works(cluster, daemon_factory):
    port = node5_tcp(cluster)
    d = daemon_factory.start(
        cluster, name="dl",
        node_args=args_with_node5(cluster, "redis://localhost:%d" % port))
    assert node5_health(d)["up"] is True
    res = rname("local")
    with d.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000)
        assert_ok(r)
        ok, _ = poll_until(lambda: resp_cmd(cluster.nodes[4].path, "GET",
                                            lock_key(res)) is not None,
                           2.0 * SLOW)
        assert ok, "node 5 (localhost) did not get the key"
        # A waiter makes the daemon subscribe on every node: node 5's
        # subscriber connects by name too.
        with d.client() as w:
            w.send({"op": "acquire", "id": "w", "resource": res,
                    "wait_ms": 5000, "ttl_ms": 1000})
            up = "node 5 sub: localhost:%d: up" % port
            ok, _ = poll_until(lambda: up in d.stderr_text(), 3.0 * SLOW)
            assert ok, d.stderr_tail(40)
            assert_ok(c.call("release", lock=r["lock"]))
            assert_ok(w.read_msg(5.0 * SLOW))


def test_unresolvable_node_is_down_with_a_clear_error(cluster,
                                                      daemon_factory):
    host = "redis-does-not-exist.invalid"
    d = daemon_factory.start(
        cluster, name="dx", wait_nodes=False,
        node_args=args_with_node5(cluster, "redis://%s:6379" % host))

    def says_why():
        n = node5_health(d)
        return n if (n["up"] is False and (n.get("last_error") or "")
                     .startswith("resolve %s: " % host)) else None
    n5, _ = poll_until(says_why, 5.0 * SLOW, 0.05)
    assert n5, node5_health(d)
    # The other four serve, with no wait for the lookup.
    res = rname("four")
    with d.client() as c:
        for _ in range(20):
            r = c.call("acquire", resource=res, ttl_ms=5000)
            assert_ok(r)
            assert_ok(c.call("release", lock=r["lock"]))
    assert "resolve %s: " % host in d.stderr_text()


@pytest.fixture
def slowdns(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the LD_PRELOAD shim")
    so = tmp_path / "slowdns.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so),
                    str(HERE / "slowdns.c"), "-ldl"], check=True,
                   timeout=60)
    return so


def test_renewals_go_on_while_a_name_resolves_slowly(cluster,
                                                     daemon_factory,
                                                     slowdns, monkeypatch):
    port = node5_tcp(cluster)
    monkeypatch.setenv("LD_PRELOAD", str(slowdns))
    # Under a sanitizer: longer locks, and a lookup that still outlasts
    # them, within the connect deadline (5 s with --node-timeout-ms 500).
    monkeypatch.setenv("SLOWDNS_MS", str(int(1500 * SLOW)))
    if SANITIZED:
        monkeypatch.setenv("ASAN_OPTIONS", os.environ.get(
            "ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    d = daemon_factory.start(
        cluster, name="ds",
        node_args=args_with_node5(cluster, "redis://n5.slow.test:%d" % port))
    monkeypatch.delenv("LD_PRELOAD")
    res = rname("slow")
    with d.client(timeout=10.0) as c:
        # 500 ms locks, renewed every ~170 ms: a loop that stops for a
        # 1.5 s lookup loses them.
        r = c.call("acquire", resource=res, ttl_ms=int(500 * SLOW),
                   renew=True)
        assert_ok(r)
        # Node 5 goes away: every reconnect looks its name up again.
        cluster.nodes[4].kill9()
        t_end = time.monotonic() + 4.0
        while time.monotonic() < t_end:
            try:
                ev = c.wait_event(timeout=t_end - time.monotonic())
            except OSError:  # socket.timeout: no event, as it should be
                break
            assert ev.get("event") != "lost", (
                "renewals stopped while node 5's name resolved: %r" % ev)
        n5 = node5_health(d)
        assert n5["up"] is False, n5
        # Still held: a second client cannot take it.
        with d.client() as other:
            rsp = other.call("acquire", resource=res)
            assert rsp.get("ok") is False, rsp
        assert_ok(c.call("release", lock=r["lock"]))
    # Node 5 back: found by name again, up within the lookup time.
    cluster.nodes[4].start()
    up, _ = poll_until(lambda: node5_health(d)["up"] is True, 10.0 * SLOW,
                       0.1)
    assert up, node5_health(d)


def test_lookup_past_the_connect_deadline_times_out(cluster, daemon_factory,
                                                    slowdns, monkeypatch):
    port = node5_tcp(cluster)
    monkeypatch.setenv("LD_PRELOAD", str(slowdns))
    monkeypatch.setenv("SLOWDNS_MS", "4000")
    # Lookups are slow for this long, then answer at once: every lookup
    # thread has ended when the daemon stops (valgrind counts a thread
    # still in getaddrinfo at exit as a leak).
    slow_for = 4.0 * SLOW
    monkeypatch.setenv("SLOWDNS_UNTIL", "%.3f" % (time.time() + slow_for))
    if SANITIZED:
        monkeypatch.setenv("ASAN_OPTIONS", os.environ.get(
            "ASAN_OPTIONS", "") + ":verify_asan_link_order=0")
    # --node-timeout-ms 100: the connect deadline is its floor, 1 s.
    d = daemon_factory.start(
        cluster, name="dt", wait_nodes=False,
        extra=["--node-timeout-ms", "100"],
        node_args=args_with_node5(cluster, "redis://n5.slow.test:%d" % port))
    monkeypatch.delenv("LD_PRELOAD")
    want = "resolve n5.slow.test: timed out"
    n5, _ = poll_until(lambda: node5_health(d).get("last_error") == want
                       and node5_health(d), 5.0 * SLOW, 0.05)
    assert n5 and n5["up"] is False, node5_health(d)
    with d.client() as c:
        r = c.call("acquire", resource=rname("t"), ttl_ms=5000)
        assert_ok(r)
        assert_ok(c.call("release", lock=r["lock"]))
    assert want in d.stderr_text()
    # Once lookups answer in time again, the node comes up by its name.
    up, _ = poll_until(lambda: node5_health(d)["up"] is True,
                       slow_for + 10.0 * SLOW, 0.1)
    assert up, node5_health(d)


def test_unreachable_node_is_warned_once(cluster, daemon_factory, tmp_path):
    """A node that refuses every connect from the start (here a unix path
    nothing listens on) is named at the default log level, like a name that
    does not resolve, and once: the reconnects that fail alike stay at
    debug."""
    gone = tmp_path / "nothing.sock"
    d = daemon_factory.start(
        cluster, name="dn", wait_nodes=False, extra=["--log-level", "info"],
        node_args=args_with_node5(cluster, "unix://%s" % gone))
    warn = "WARN  node 5: unix:%s: connect: " % gone
    ok, _ = poll_until(lambda: warn in d.stderr_text(), 3.0 * SLOW, 0.05)
    assert ok, d.stderr_tail(40)
    assert node5_health(d)["last_error"].startswith("connect: ")
    # The first reconnects come within a second or two (capped back-off).
    time.sleep(1.5 * SLOW)
    assert d.stderr_text().count(warn) == 1, d.stderr_tail(40)


def test_paused_node_is_warned_once_with_what_timed_out(
        cluster, daemon_factory):
    """A node that takes the connection but never answers the handshake (a
    paused redis-server) is named at the default log level, once per
    outage, saying which half timed out; the reconnects that time out alike
    stay at debug. It was either silent or warned at every attempt,
    depending on which of two deadlines fired first."""
    cluster.nodes[4].pause()
    d = daemon_factory.start(
        cluster, name="hs", wait_nodes=False,
        extra=["--log-level", "info", "--node-timeout-ms", "100"])
    warn = ("WARN  node 5: %s: handshake failed: the node accepted the "
            "connection but did not answer in time" % cluster.nodes[4].uri
            .replace("unix://", "unix:"))
    ok, _ = poll_until(lambda: warn in d.stderr_text(), 3.0 * SLOW, 0.05)
    assert ok, d.stderr_tail(40)
    h = node5_health(d)
    assert h["up"] is False and "did not answer in time" in h["last_error"]
    # Connect deadline: 10 node timeouts, at least 1 s; two more attempts.
    time.sleep(3.0 * SLOW)
    assert d.stderr_text().count(warn) == 1, d.stderr_tail(40)
    cluster.nodes[4].resume()
    up, _ = poll_until(lambda: node5_health(d)["up"] is True, 5.0 * SLOW,
                       0.05)
    assert up, node5_health(d)


def test_connect_that_hangs_is_warned_once(cluster, daemon_factory):
    """A TCP node whose connects hang (a listener whose accept queue is
    full: the kernel drops the SYNs, as for a host that is gone) is warned
    about once, as a connect timeout, not a handshake one."""
    hole = BlackHole()
    try:
        d = daemon_factory.start(
            cluster, name="ch", wait_nodes=False,
            extra=["--log-level", "info", "--node-timeout-ms", "100"],
            node_args=args_with_node5(
                cluster, "redis://127.0.0.1:%d" % hole.port))
        warn = "WARN  node 5: 127.0.0.1:%d: connect: timed out" % hole.port
        ok, _ = poll_until(lambda: warn in d.stderr_text(), 3.0 * SLOW,
                           0.05)
        assert ok, d.stderr_tail(40)
        assert node5_health(d)["last_error"] == "connect: timed out"
        time.sleep(3.0 * SLOW)
        assert d.stderr_text().count(warn) == 1, d.stderr_tail(40)
    finally:
        hole.close()
