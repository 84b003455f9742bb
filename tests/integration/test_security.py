"""Security and resource limits. Socket mode regardless of umask,
--allow-uid/--allow-gid, per-connection and daemon-wide caps, only keys
under the prefix, --redis-password-file, 10,000 idle connections, a stuck
client does not stall others."""

import json
import os
import resource
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from extra import (PwRedis, curl1, free_port, http, metric, mkdtemp_open,
                   scrape, socket_listening, wait_metric)
from extra import xdaemons  # noqa: F401 (fixture)
from rl import (SLOW, Closed, Resp, assert_error, assert_ok,
                lock_key, poll_until, rname)

U = "http://localhost"


# -- socket mode -----------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o077])
@pytest.mark.parametrize("mode", [None, "0600"])
def test_socket_mode_regardless_of_umask(cluster, xdaemons, umask, mode):
    extra = [] if mode is None else ["--socket-mode", mode]
    d = xdaemons.start(cluster, name="sm", extra=extra, umask=umask)
    got = stat.S_IMODE(os.stat(d.socket).st_mode)
    want = 0o660 if mode is None else int(mode, 8)
    print("umask %03o, --socket-mode %s: socket mode %04o" % (
        umask, mode, got))
    assert stat.S_ISSOCK(os.stat(d.socket).st_mode)
    assert got == want, "socket mode %04o, want %04o (umask %03o)" % (
        got, want, umask)
    with d.client() as c:
        assert_ok(c.call("ping"))


# -- peer credentials ------------------------------------------------------


def _read_refusal(path, timeout=3.0):
    """Connects and reads until EOF; returns the lines."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    data = b""
    try:
        s.connect(str(path))
        deadline = time.monotonic() + timeout
        for _ in range(1000):
            if time.monotonic() > deadline:
                raise AssertionError("not closed within %.1fs; got %r" % (
                    timeout, data))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    return [ln for ln in data.split(b"\n") if ln]


def _tcp_ready(port):
    def ready(d):
        try:
            return http(("127.0.0.1", port), "GET", "/metrics",
                        timeout=1.0).status == 200
        except (OSError, Closed):
            return False
    return ready


def test_allow_uid_other_refuses_us(cluster, xdaemons):
    assert os.getuid() != 12345
    port = free_port()
    d = xdaemons.start(cluster, name="au",
                       extra=["--allow-uid", "12345", "--metrics-listen",
                              "127.0.0.1:%d" % port],
                       ready=_tcp_ready(port))
    for i in range(3):
        lines = _read_refusal(d.socket)
        print("refused connection %d: %r" % (i, lines))
        assert len(lines) == 1, lines
        msg = json.loads(lines[0])
        assert msg.get("ok") is False and msg["error"]["code"], msg
    # Sending first changes nothing: no answer to the request, no lock.
    res = rname("au")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3.0)
    try:
        s.connect(str(d.socket))
        try:
            s.sendall(json.dumps({"op": "acquire", "id": 1, "resource": res})
                      .encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        for _ in range(100):
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
        assert b'"ok":true' not in data, data
    finally:
        s.close()
    assert cluster.get_all(lock_key(res)) == [None] * 5
    # An HTTP client is refused in HTTP, with the same JSON error.
    r = curl1(d.socket, "http://localhost/v1/ping")
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "--allow-uid")
    m = scrape(("127.0.0.1", port))
    rej = metric(m, "redlockd_client_rejections_total")
    print("redlockd_client_rejections_total = %r" % rej)
    assert rej == 5, rej


def test_allow_uid_zero_allows_us(cluster, xdaemons):
    d = xdaemons.start(cluster, name="a0",
                       extra=["--allow-uid", str(os.getuid())])
    with d.client() as c:
        assert_ok(c.call("ping"))
        r = c.call("acquire", resource=rname("a0"), ttl_ms=2000)
        assert_ok(r)
    m = scrape(d.socket)
    assert metric(m, "redlockd_client_rejections_total") == 0


def test_allow_gid_either_match(cluster, xdaemons):
    d = xdaemons.start(cluster, name="ag",
                       extra=["--allow-uid", "12345", "--allow-gid",
                              str(os.getgid())])
    with d.client() as c:
        assert_ok(c.call("ping"))


_PING_AS = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(3)
s.connect(sys.argv[1])
s.sendall(b'{"op":"ping","id":"u"}\n')
buf = b""
while b"\n" not in buf:
    c = s.recv(4096)
    if not c:
        break
    buf += c
sys.stdout.write(buf.decode())
"""


def test_allow_uid_other_user_is_served(cluster, xdaemons):
    """uid 12345 is allowed (the socket is 0666 in a world-traversable
    dir); we (uid 0) are not."""
    if os.getuid() != 0:
        pytest.skip("needs root to run a client as uid 12345")
    sdir = mkdtemp_open()
    try:
        sock = sdir / "au.sock"
        xdaemons.start(cluster, name="au2",
                       extra=["--allow-uid", "12345", "--socket-mode",
                              "0666"], socket_path=sock,
                       ready=socket_listening)
        p = subprocess.run([sys.executable, "-c", _PING_AS, str(sock)],
                           user=12345, group=12345, capture_output=True,
                           timeout=10)
        print("ping as uid 12345: rc=%d %r %r" % (p.returncode, p.stdout,
                                                  p.stderr[-300:]))
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.decode().splitlines()[0]) == \
            {"id": "u", "ok": True}
        lines = _read_refusal(sock)
        assert len(lines) == 1 and json.loads(lines[0])["ok"] is False
    finally:
        import shutil
        shutil.rmtree(sdir, ignore_errors=True)


# -- caps ------------------------------------------------------------------


def test_max_inflight_backpressure_not_errors(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="mi",
                             extra=["--max-inflight", "4"])
    held = rname("mi-held")
    with d.client() as h, d.client(timeout=20.0) as c:
        assert_ok(h.call("acquire", resource=held, ttl_ms=30000))
        objs = []
        # four slow waiters first fill every in-flight slot for ~500 ms
        for i in range(4):
            objs.append({"op": "acquire", "id": i, "resource": held,
                         "wait_ms": 500})
        for i in range(4, 100):
            if i % 3 == 0:
                objs.append({"op": "acquire", "id": i,
                             "resource": rname("mi"), "ttl_ms": 5000})
            else:
                objs.append({"op": "ping", "id": i})
        t0 = time.monotonic()
        answers, extra = c.pipeline(objs, timeout=20.0 * SLOW)
        dt = time.monotonic() - t0
        got = {k: v for k, v in answers.items() if v}
        print("--max-inflight 4: %d of 100 answered in %.0f ms; extra %r" % (
            len(got), dt * 1000, extra[:3]))
        assert len(got) == 100, "unanswered: %r" % [
            k for k, v in answers.items() if not v]
        codes = {}
        for k, v in answers.items():
            assert len(v) == 1, (k, v)
            code = v[0].get("error", {}).get("code") if not v[0].get("ok") \
                else "ok"
            codes[code] = codes.get(code, 0) + 1
        print("answer codes: %r" % codes)
        assert codes.get("limit", 0) == 0, codes
        assert codes == {"busy": 4, "ok": 96}, codes
        assert dt >= 0.45, "the waiters did not hold their slots: %.3f" % dt


def test_max_conn_locks(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="mcl",
                             extra=["--max-conn-locks", "3"])
    with d.client() as a, d.client() as b:
        toks = []
        for i in range(3):
            r = a.call("acquire", resource=rname("mcl"), ttl_ms=10000)
            assert_ok(r)
            toks.append(r["lock"])
        res4 = rname("mcl4")
        r = a.call("acquire", resource=res4, ttl_ms=10000)
        print("4th acquire on one connection: %r" % r)
        assert_error(r, "limit")
        assert cluster.get_all(lock_key(res4)) == [None] * 5
        assert_ok(b.call("acquire", resource=rname("mcl"), ttl_ms=10000))
        assert_ok(a.call("release", lock=toks[0]))
        assert_ok(a.call("acquire", resource=res4, ttl_ms=10000))


def _no_answer(c, id_, secs):
    """Asserts that c gets no answer for id_ within secs (it is queued)."""
    try:
        r = c.response(id_, timeout=secs)
    except socket.timeout:
        return
    raise AssertionError("waiter %r answered at once: %r" % (id_, r))


def test_max_conn_waiters(cluster, daemon_factory):
    """--max-conn-waiters 2: a third waiter on one connection is refused,
    other connections still queue, the count follows waiters that time out
    or are granted, and a closed connection's waiters leave no trace."""
    d = daemon_factory.start(cluster, name="mcw",
                             extra=["--max-conn-waiters", "2"])
    res = rname("mcw")

    def wait_waiters(n):
        v, secs = wait_metric(d.socket, "redlockd_waiters", n, 5.0 * SLOW)
        assert v == n, "redlockd_waiters %r, want %d" % (v, n)

    def errors():
        return metric(scrape(d.socket), "redlockd_acquisitions_total",
                      result="error") or 0

    def queue_last_slot(c, id_):
        # The connection's second waiter is queued; a third is refused.
        c.send({"op": "acquire", "id": id_, "resource": res,
                "wait_ms": 30000})
        wait_waiters(3)
        _no_answer(c, id_, 0.2)
        assert_error(c.call("acquire", resource=res, wait_ms=30000),
                     "limit", "--max-conn-waiters")

    with d.client() as h, d.client(timeout=30.0) as a, \
            d.client(timeout=30.0) as b:
        held = h.call("acquire", resource=res, ttl_ms=60000)
        assert_ok(held)
        # Two waiters on one connection: the first gives up after 1.5 s.
        a.send({"op": "acquire", "id": "a1", "resource": res,
                "wait_ms": 1500})
        wait_waiters(1)
        a.send({"op": "acquire", "id": "a2", "resource": res,
                "wait_ms": 30000})
        wait_waiters(2)
        e0 = errors()
        r = a.call("acquire", resource=res, wait_ms=30000, timeout=5.0)
        print("third waiter on one connection: %r" % r)
        assert_error(r, "limit", "--max-conn-waiters")
        assert errors() == e0 + 1, "the refusal is not counted"
        # Without wait_ms it is no waiter: busy, not limit.
        assert_error(a.call("acquire", resource=res), "busy")
        # Another connection still queues.
        b.send({"op": "acquire", "id": "b1", "resource": res,
                "wait_ms": 30000})
        wait_waiters(3)
        _no_answer(b, "b1", 0.2)
        # a1 times out: a has room for one more.
        r = a.response("a1", timeout=10.0 * SLOW)
        assert_error(r, "busy")
        wait_waiters(2)
        queue_last_slot(a, "a3")
        # A grant: the release hands the lock to a2, the head of the queue.
        assert_ok(h.call("release", lock=held["lock"]))
        r = a.response("a2", timeout=5.0 * SLOW)
        assert_ok(r, "a2 after the release")
        wait_waiters(2)  # b1, a3
        queue_last_slot(a, "a4")
        # Closing a drops its two waiters and releases a2's lock, which
        # goes to b1, next in line ...
        a.close()
        assert_ok(b.response("b1", timeout=5.0 * SLOW), "b1 after a closed")
        wait_waiters(0)
        # ... and a new connection starts from zero.
        with d.client(timeout=30.0) as a2:
            for i in (1, 2):
                a2.send({"op": "acquire", "id": "n%d" % i, "resource": res,
                         "wait_ms": 30000})
                wait_waiters(i)
            assert_error(a2.call("acquire", resource=res, wait_ms=30000),
                         "limit", "--max-conn-waiters")
            _no_answer(a2, "n1", 0.1)
        wait_waiters(0)


def test_max_locks(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="ml", extra=["--max-locks", "3"])
    with d.client() as a, d.client() as b:
        ra = [a.call("acquire", resource=rname("ml"), ttl_ms=10000)
              for _ in range(2)]
        for r in ra:
            assert_ok(r)
        assert_ok(b.call("acquire", resource=rname("ml"), ttl_ms=10000))
        res = rname("ml4")
        assert_error(b.call("acquire", resource=res, ttl_ms=10000), "limit")
        h = curl1(d.socket, "-X", "POST", U + "/v1/locks",
                  "-d", json.dumps({"resource": res, "ttl_ms": 10000}))
        print("HTTP acquire over --max-locks: %d %r" % (h.status, h.body))
        assert h.status == 429, h
        assert cluster.get_all(lock_key(res)) == [None] * 5
        assert_ok(a.call("release", lock=ra[0]["lock"]))
        assert_ok(b.call("acquire", resource=res, ttl_ms=10000))
    # the sessions closed: every lock was given back, the count too
    v, _ = poll_until(lambda: metric(scrape(d.socket),
                                     "redlockd_locks_held") == 0, 3.0)
    assert v, scrape(d.socket)



@pytest.mark.parametrize("flag", ["--max-conn-locks", "--max-locks"])
def test_lock_limits_hold_for_pipelined_acquires(cluster, daemon_factory,
                                                 flag):
    """Eight acquires pipelined at once all pass the check made when they
    are read (nothing is held yet); the limit must still hold when they
    win: the rest answer limit and leave nothing on the nodes."""
    d = daemon_factory.start(cluster, name="lp", extra=[flag, "2"])
    with d.client() as c:
        res = [rname("lp") for _ in range(8)]
        ans, _ = c.pipeline([{"op": "acquire", "id": i, "resource": r,
                              "ttl_ms": 20000} for i, r in enumerate(res)])
        rsps = [v[0] for v in ans.values()]
        codes = sorted("ok" if r.get("ok") else r["error"]["code"]
                       for r in rsps)
        print("%s 2, 8 pipelined acquires: %r" % (flag, codes))
        assert codes == ["limit"] * 6 + ["ok"] * 2, codes
        assert metric(scrape(d.socket), "redlockd_locks_held") == 2
        held = {r["resource"] for r in rsps if r.get("ok")}

        def nothing_else_left():
            return all(cluster.get_all(lock_key(r)) == [None] * 5
                       for r in res if r not in held)
        assert poll_until(nothing_else_left, 3.0)[0]


def test_waiter_over_max_conn_locks_when_it_wins(cluster, daemon_factory):
    """A waiter queued while its connection was under --max-conn-locks wins
    after the connection reached it: limit, and the lock goes straight to
    the next waiter instead of making it wait out the validity."""
    d = daemon_factory.start(cluster, name="lw",
                             extra=["--max-conn-locks", "1"])
    res = rname("lw")
    with d.client() as h, d.client(timeout=10.0) as a, \
            d.client(timeout=10.0) as b:
        held = h.call("acquire", resource=res, ttl_ms=20000)
        a.send({"op": "acquire", "id": "wa", "resource": res,
                "ttl_ms": 20000, "wait_ms": 8000})
        time.sleep(0.2)
        b.send({"op": "acquire", "id": "wb", "resource": res,
                "ttl_ms": 20000, "wait_ms": 8000})
        time.sleep(0.2)
        assert_ok(a.call("acquire", resource=rname("lw2"), ttl_ms=20000))
        t0 = time.monotonic()
        assert_ok(h.call("release", lock=held["lock"]))
        assert_error(a.response("wa", timeout=5.0), "limit")
        rb = b.response("wb", timeout=8.0)
        dt = time.monotonic() - t0
        print("b got %r %.2f s after the release" % (rb, dt))
        assert_ok(rb, "next waiter")
        assert dt < 3.0, "b waited %.1f s: it waited out a validity" % dt


# -- prefix ----------------------------------------------------------------


def _scan_all(path):
    keys = []
    with Resp(path) as r:
        cur = b"0"
        for _ in range(10000):
            cur, batch = r.cmd("SCAN", cur, "COUNT", 1000)
            keys += batch
            if cur == b"0":
                break
    return keys


def test_only_prefixed_keys(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="px",
                             extra=["--prefix", "t1:",
                                    "--quarantine-ms", "200"])
    for nd in cluster.nodes:
        # the data-set mark is what the daemon writes as it meets a node
        assert [k for k in _scan_all(nd.path) if k != b"t1:dataset"] == [], \
            "nodes not empty at start"
    with d.client() as a, d.client() as b:
        r = a.call("acquire", resource="orders:1", ttl_ms=5000, fence=True)
        assert_ok(r)
        assert_ok(a.call("extend", lock=r["lock"], ttl_ms=6000))
        assert_error(b.call("acquire", resource="orders:1", wait_ms=200),
                     "busy")
        b.send({"op": "acquire", "id": "w", "resource": "orders:1",
                "wait_ms": 5000})
        time.sleep(0.1)
        assert_ok(a.call("release", lock=r["lock"]))
        rb = b.response("w")
        assert_ok(rb)
        assert_ok(b.call("complete", lock=rb["lock"], keep_ms=60000))
        assert_error(a.call("acquire", resource="orders:1"), "done")
        rr = a.call("acquire", resource="renew:1", ttl_ms=300, renew=True)
        assert_ok(rr)
        h = curl1(d.socket, "-X", "POST", U + "/v1/locks",
                  "-d", json.dumps({"resource": "http:1", "fence": True}))
        assert h.status == 200, h
        # a failed acquire (no quorum) rolls back under the prefix too
        for nd in cluster.nodes[:3]:
            nd.pause()
        assert_error(a.call("acquire", resource="nq:1", timeout=5.0),
                     "no_quorum")
        cluster.resume_all()
        time.sleep(0.5)
        # a restarted node gets its fence counter repaired
        cluster.nodes[4].restart()
        d.wait_all_up(10.0 * SLOW)
        poll_until(lambda: cluster.nodes[4].cmd("GET", "t1:fence"), 5.0,
                   0.05)
        r = a.call("acquire", resource="after:1", fence=True, ttl_ms=2000)
        assert_ok(r)
    per_node = [_scan_all(nd.path) for nd in cluster.nodes]
    print("keys per node: %r" % per_node)
    for k, keys in enumerate(per_node):
        bad = [x for x in keys if not x.startswith(b"t1:")]
        assert not bad, "node %d holds keys outside t1:: %r" % (k + 1, bad)
        allowed = [x for x in keys if x in (b"t1:fence", b"t1:dataset") or
                   x.startswith(b"t1:lock:")]
        assert allowed == keys, "unexpected keys on node %d: %r" % (k + 1,
                                                                   keys)
    assert any(b"t1:fence" in keys for keys in per_node), per_node
    assert all(b"t1:dataset" in keys for keys in per_node), per_node
    assert any(b"t1:lock:orders:1" in keys for keys in per_node), per_node


# -- password file ---------------------------------------------------------


def test_redis_password_file(cluster, xdaemons):
    pw = "pwfile-%s" % os.urandom(8).hex()
    reds = [PwRedis(cluster.dir, "pf%d" % i, pw) for i in range(3)]
    pwfile = cluster.dir / "redis.pw"
    pwfile.write_text(pw + "\n")
    os.chmod(pwfile, 0o600)
    try:
        for r in reds:
            r.start()
        args = []
        for r in reds:
            args += ["--node", "unix://%s" % r.path]
        d = xdaemons.start(cluster, name="pf", node_args=args,
                           extra=["--redis-password-file", str(pwfile)])
        h = http(d.socket, "GET", "/v1/health")
        assert h.status == 200 and all(n["up"] for n in h.json()["nodes"]), h
        with d.client() as c:
            r = c.call("acquire", resource=rname("pf"), ttl_ms=5000)
            assert_ok(r)
            got = reds[0].cmd("GET", lock_key(r["resource"]))
            assert got == r["lock"].encode(), got
            assert_ok(c.call("release", lock=r["lock"]))
        with open("/proc/%d/cmdline" % d.pid, "rb") as f:
            cmdline = f.read()
        with open("/proc/%d/environ" % d.pid, "rb") as f:
            environ = f.read()
        assert str(pwfile).encode() in cmdline, cmdline
        texts = {"cmdline": cmdline.decode(errors="replace"),
                 "environ": environ.decode(errors="replace"),
                 "health": h.body.decode(),
                 "metrics": http(d.socket, "GET", "/metrics").body.decode()}
        xdaemons.teardown()
        texts["stderr"] = d.stderr_text()
        for what, text in texts.items():
            assert pw not in text, "the password shows in %s" % what
        print("password absent from %s" % ", ".join(sorted(texts)))
    finally:
        for r in reds:
            r.stop()


# -- 10,000 idle connections ----------------------------------------------


def test_ten_thousand_idle_connections(cluster, xdaemons):
    n = 10000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n + 500
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip("RLIMIT_NOFILE hard limit %d < %d" % (hard, need))
    lim = need if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim, hard))
    socks = []
    try:
        d = xdaemons.start(cluster, name="10k", nofile=lim,
                           extra=["--max-connections", str(n + 100)])
        rss0 = d.rss_kb()
        t0 = time.monotonic()
        retries = 0
        for i in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10.0)
            socks.append(s)
            # a unix connect answers EAGAIN (not a wait) when the listen
            # backlog is full: retry, bounded
            for _ in range(2000):
                try:
                    s.connect(str(d.socket))
                    break
                except BlockingIOError:
                    retries += 1
                    time.sleep(0.001)
            else:
                raise AssertionError("connect %d: backlog stays full" % i)
        t_conn = time.monotonic() - t0
        print("connected %d in %.1f s (%d EAGAIN retries)" % (
            n, t_conn, retries))

        def gauge_now():
            try:
                return metric(scrape(d.socket),
                              "redlockd_client_connections") or 0
            except BlockingIOError:  # the backlog is still full: the
                return 0             # daemon is accepting the last ones
        v, secs = poll_until(lambda: gauge_now() >= n, 10.0 * SLOW, 0.1)
        gauge = metric(scrape(d.socket), "redlockd_client_connections")
        lat = []
        with d.client() as c:
            for _ in range(20):
                t1 = time.monotonic()
                assert_ok(c.call("ping"))
                lat.append((time.monotonic() - t1) * 1000)
            r = c.call("acquire", resource=rname("10k"), ttl_ms=2000)
            assert_ok(r)
        rss = d.rss_kb()
        print("%d idle connections in %.1f s; gauge %r; ping max %.2f ms "
              "(median %.2f); RSS %d kB -> %d kB (%.2f kB/conn); fds %d" % (
                  n, t_conn, gauge, max(lat), sorted(lat)[len(lat) // 2],
                  rss0, rss, (rss - rss0) / float(n), d.fd_count()))
        assert gauge is not None and gauge >= n, gauge
        assert max(lat) < 1000.0 * SLOW, lat
        # every one of them is still served
        for s in socks[::1000]:
            s.sendall(b'{"op":"ping","id":1}\n')
            assert b'"ok":true' in s.recv(4096)
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    v, secs = poll_until(
        lambda: (metric(scrape(d.socket), "redlockd_client_connections")
                 or 0) <= 1, 10.0 * SLOW, 0.1)
    assert v, scrape(d.socket)


# -- stuck client ----------------------------------------------------------


def test_stuck_client_does_not_stall_others(cluster, daemon):
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.connect(str(daemon.socket))
    stuck.setblocking(False)
    line = b'{"op":"ping","id":"s"}\n'
    chunk = line * 4096
    sent = [0]
    stop = threading.Event()

    def flood():
        deadline = time.monotonic() + 10.0
        for _ in range(1000000):
            if stop.is_set() or time.monotonic() > deadline:
                return
            try:
                sent[0] += stuck.send(chunk)
            except BlockingIOError:
                time.sleep(0.005)
            except OSError:
                return

    th = threading.Thread(target=flood, daemon=True)
    th.start()
    lat = []
    try:
        time.sleep(0.5)
        with daemon.client() as c:
            for i in range(50):
                t1 = time.monotonic()
                if i % 5 == 0:
                    r = c.call("acquire", resource=rname("st"), ttl_ms=2000)
                    assert_ok(r)
                    assert_ok(c.call("release", lock=r["lock"]))
                else:
                    assert_ok(c.call("ping"))
                lat.append((time.monotonic() - t1) * 1000)
                time.sleep(0.02)
        stalled_at = sent[0]
        time.sleep(0.3)
        print("stuck client wrote %.1f MB (then blocked: %s); other client "
              "max %.2f ms, median %.2f ms" % (
                  sent[0] / 1e6, sent[0] == stalled_at, max(lat),
                  sorted(lat)[len(lat) // 2]))
        assert max(lat) < 1000.0 * SLOW, lat
        rss = daemon.rss_kb()
        print("daemon RSS with the stuck client: %d kB" % rss)
        assert rss < 200 * 1024, "daemon buffers the stuck client: %d kB" % rss
    finally:
        stop.set()
        th.join(timeout=5.0)
        stuck.close()
    with daemon.client() as c:
        assert_ok(c.call("ping"))
