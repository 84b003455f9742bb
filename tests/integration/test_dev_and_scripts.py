"""--dev (the embedded five-node cluster) and the EVALSHA -> EVAL fallback
when a node has lost its script cache."""

import glob
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

from extra import dev_health
from rl import BIN, SLOW, Client, assert_ok, err_code, lock_key, \
    poll_until, pytest, resp_cmd, rname


@pytest.fixture
def work():
    """A short-named temp dir for the daemon's socket, removed whatever
    the test's outcome."""
    d = tempfile.mkdtemp(prefix="rlit-dev-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _dev_dirs():
    return set(glob.glob(os.path.join(tempfile.gettempdir(),
                                      "redlockd-dev-*")))


def _read_banner(p):
    """What a --dev daemon printed on stdout up to its "is ready" banner,
    read within a bound."""
    seen = b""
    deadline = time.monotonic() + 20.0 * SLOW
    for _ in range(100000):
        if b"is ready on" in seen or time.monotonic() > deadline:
            break
        r, _w, _x = select.select([p.stdout], [], [], 0.5)
        if r:
            chunk = os.read(p.stdout.fileno(), 4096)
            if not chunk:
                break
            seen += chunk
    assert b"is ready on" in seen, seen
    return seen


def test_dev_runs_five_nodes_and_cleans_up(work):
    sock = os.path.join(work, "d.sock")
    before = _dev_dirs()
    p = subprocess.Popen([str(BIN), "--dev", "--socket", sock],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(os.environ, TMPDIR=tempfile.gettempdir()))
    try:
        # The banner comes once all five count toward quorums.
        start = time.monotonic()
        banner = _read_banner(p)
        print("--dev was ready after %.2f s" % (time.monotonic() - start))
        h = dev_health(sock)
        assert h, "--dev has no quorum after its banner"
        assert len(h["nodes"]) == 5 and h["quorum"] == 3, h
        assert all(n["up"] and n["addr"].startswith("unix:")
                   for n in h["nodes"]), h
        with Client(sock) as c:
            r = c.call("acquire", resource=rname("dev"), ttl_ms=5000)
            assert_ok(r)
            assert_ok(c.call("release", lock=r["lock"]))
        new = _dev_dirs() - before
        assert len(new) == 1, new
        dev_dir = new.pop()
        assert len(glob.glob(os.path.join(dev_dir, "node*.sock"))) == 5
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=15)
    assert p.returncode == 0, (p.returncode, err.decode()[-2000:])
    text = (banner + out).decode()
    # Ready-to-paste examples for the socket in use.
    assert "socat - UNIX-CONNECT:%s" % sock in text, text
    assert "curl --unix-socket %s" % sock in text, text
    # Everything it started is gone: the temp dir and the socket.
    assert not os.path.exists(dev_dir), os.listdir(dev_dir)
    assert not os.path.exists(sock)
    left = subprocess.run(["pgrep", "-f", re.escape(dev_dir)],
                          capture_output=True, text=True).stdout.strip()
    assert left == "", "redis-server children left: %s" % left
    assert os.listdir(work) == [], os.listdir(work)


def test_dev_banner_comes_once_every_node_counts(work):
    """The "is ready" banner is printed once all five nodes count toward
    quorums, so the example it shows, pasted at once, succeeds: at the
    moment the banner is read, health shows every node up, marked and out
    of quarantine, and an acquire is granted on the first try."""
    sock = os.path.join(work, "d.sock")
    p = subprocess.Popen([str(BIN), "--dev", "--socket", sock],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        _read_banner(p)
        with Client(sock) as c:
            h = c.call("health")
            print("health when the banner was read: %r" % h)
            assert h["ok"] is True, h
            assert [(n["up"], n.get("quarantined"), n.get("not_counted"))
                    for n in h["nodes"]] == [(True, False, None)] * 5, h
            r = c.call("acquire", resource=rname("banner"), ttl_ms=5000)
            assert_ok(r)
            assert_ok(c.call("release", lock=r["lock"]))
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=15)
    assert p.returncode == 0, p.returncode


def _dev_stop_during(work, sig, when):
    """Starts --dev, sends sig once `when` says so (it gets the new dev
    dir, or None), and checks that everything started is gone and the exit
    status is 0. Returns the daemon's stderr."""
    sock = os.path.join(work, "d.sock")
    before = _dev_dirs()
    p = subprocess.Popen([str(BIN), "--dev", "--socket", sock],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=dict(os.environ, TMPDIR=tempfile.gettempdir()))
    dev_dir = None
    try:
        def started():
            new = _dev_dirs() - before
            return new.pop() if new else None
        dev_dir, _ = poll_until(started, 20.0 * SLOW, 0.002,
                                what="--dev temp dir")
        assert dev_dir, "--dev made no temp dir"
        ok, _ = poll_until(lambda: when(dev_dir, sock), 20.0 * SLOW, 0.01)
        assert ok
        p.send_signal(sig)
        _, err = p.communicate(timeout=30 * SLOW)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            if dev_dir:  # what a failed run left; the asserts below fail
                shutil.rmtree(dev_dir, ignore_errors=True)
    err = err.decode(errors="replace")
    assert p.returncode == 0, (p.returncode, err[-2000:])
    assert not os.path.exists(dev_dir), os.listdir(dev_dir)
    assert not os.path.exists(sock)
    left = subprocess.run(["pgrep", "-f", re.escape(dev_dir)],
                          capture_output=True, text=True).stdout.strip()
    assert left == "", "redis-server children left: %s" % left
    assert os.listdir(work) == [], os.listdir(work)
    return err


def test_dev_sigterm_while_nodes_start(work):
    """SIGTERM as soon as --dev has made its temp dir, while its nodes are
    starting: no temp dir, node or socket may be left, and the exit is a
    clean 0 (the signal waits until start-up can be undone)."""
    _dev_stop_during(work, signal.SIGTERM, lambda d, s: True)


def test_dev_sighup_stops_cleanly(work):
    """Closing the terminal (SIGHUP) stops --dev like SIGTERM, cleaning up
    instead of dying on the default action."""
    def healthy(d, sock):
        try:
            with Client(sock, timeout=1.0) as c:
                return c.call("health").get("ok")
        except OSError:
            return False
    err = _dev_stop_during(work, signal.SIGHUP, healthy)
    assert "SIGHUP: stopping" in err, err[-2000:]


def test_dev_without_redis_server_says_so(work):
    sock = os.path.join(work, "d.sock")
    p = subprocess.run([str(BIN), "--dev", "--socket", sock,
                        "--redis-server", "/nonexistent/redis-server"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert "redis-server" in lines[0] and "apt-get install" in lines[0], \
        lines[0]


def test_noscript_falls_back_to_eval(cluster, daemon):
    res = rname("noscript")
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000)
        assert_ok(r)
        # Every node forgets its scripts (as after SCRIPT FLUSH or a
        # failover to a fresh replica): the daemon must resend as EVAL.
        for nd in cluster.nodes:
            assert resp_cmd(nd.path, "SCRIPT", "FLUSH") == "OK"
        assert_ok(c.call("extend", lock=r["lock"], ttl_ms=20000))
        # The answer comes with a quorum; the last node's EVAL may still
        # be on its way (a NOSCRIPT round trip more), so poll, bounded.
        pttl, _ = poll_until(
            lambda: (lambda p: p if all(10000 < x <= 20000 for x in p)
                     else None)(cluster.pttl_all(lock_key(res))),
            1.0 * SLOW, 0.01)
        assert pttl, cluster.pttl_all(lock_key(res))
        assert_ok(c.call("release", lock=r["lock"]))
        gone, _ = poll_until(
            lambda: cluster.get_all(lock_key(res)) == [None] * 5,
            1.0 * SLOW, 0.01)
        assert gone, cluster.get_all(lock_key(res))
        r2 = c.call("acquire", resource=res, ttl_ms=5000, fence=True)
        assert_ok(r2)
        assert err_code(c.call("acquire", resource=res)) == "busy"
