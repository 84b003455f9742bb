"""SIGTERM releases every lock and exits 0."""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from extra import dev_health, http
from rl import (BIN, SLOW, Client, assert_error, assert_ok, exit_meaning,
                lock_key, poll_until, pytest, rname)


def _signal_and_wait(daemon, sig, timeout):
    """Sends sig, waits for the exit (recorded for the teardown) and
    returns the exit code (None if still running)."""
    daemon.proc.send_signal(sig)
    code = None
    try:
        code = daemon.proc.wait(timeout=timeout)
    finally:
        daemon.exit_code = code
    return code


def test_sigterm_releases_everything(cluster, daemon):
    sessions = [daemon.client(timeout=10.0) for _ in range(4)]
    renewing = daemon.client(timeout=10.0)
    taken = []
    try:
        for i in range(20):
            c = sessions[i % 4]
            res = rname("st")
            r = c.call("acquire", resource=res, ttl_ms=60000)
            assert_ok(r, "acquire %d" % i)
            taken.append((res, r["lock"]))
        for i in range(5):
            res = rname("stren")
            r = renewing.call("acquire", resource=res, ttl_ms=60000,
                              renew=True)
            assert_ok(r, "acquire renew %d" % i)
            taken.append((res, r["lock"]))
        keys = cluster.lock_keys_all()
        assert all(len(k) == 25 for k in keys), keys

        # Connections stay open: nothing is released by a close.
        t0 = time.monotonic()
        code = _signal_and_wait(daemon, signal.SIGTERM, 5.0)
        took = time.monotonic() - t0
        print("exit %r %.2fs after SIGTERM" % (code, took))
        assert code == 0, "exit code %r after SIGTERM" % code
        left = cluster.lock_keys_all()
        assert all(k == [] for k in left), (
            "lock keys left after SIGTERM: %r" % [len(k) for k in left])
        # The socket file is removed.
        assert not daemon.socket.exists(), "socket file left behind"
    finally:
        for c in sessions + [renewing]:
            c.close()
        daemon.stop()


def test_sigint_also_clean(cluster, daemon):
    with daemon.client() as c:
        r = c.call("acquire", resource=rname("si"), ttl_ms=60000)
        assert_ok(r)
        daemon.proc.send_signal(signal.SIGINT)
        code = daemon.proc.wait(timeout=5.0)
        daemon.exit_code = code
        assert code == 0, code
        assert cluster.get_all(lock_key(r["resource"])) == [None] * 5
    daemon.stop()


def test_sigterm_with_a_node_paused(cluster, daemon):
    """Shutdown is bounded even when a node does not answer: exit 0 within
    5 s, and the running nodes are cleaned."""
    with daemon.client() as c:
        taken = []
        for i in range(5):
            r = c.call("acquire", resource=rname("sp"), ttl_ms=60000)
            assert_ok(r)
            taken.append(r["resource"])
        cluster.nodes[4].pause()
        try:
            t0 = time.monotonic()
            code = _signal_and_wait(daemon, signal.SIGTERM, 5.0)
            print("exit %r %.2fs after SIGTERM with n5 paused" % (
                code, time.monotonic() - t0))
            assert code == 0
        finally:
            cluster.resume_all()
    for res in taken:
        vals = cluster.get_all(lock_key(res))
        assert vals[:4] == [None] * 4, vals
    daemon.stop()


def test_sigterm_says_which_releases_failed(cluster, daemon):
    """With a majority paused the session releases at exit are answered
    without a quorum: the daemon still exits 0 within its shutdown
    timeout, but does not call the locks released."""
    with daemon.client() as c:
        for i in range(2):
            assert_ok(c.call("acquire", resource=rname("sf"), ttl_ms=60000))
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            code = _signal_and_wait(daemon, signal.SIGTERM, 10.0)
            assert code == 0, daemon.stderr_tail()
        finally:
            cluster.resume_all()
    err = daemon.stderr_text()
    assert ("shutdown: all releases answered, 2 without a quorum: those "
            "locks expire with their TTL") in err, daemon.stderr_tail()
    assert "shutdown: all releases answered\n" not in err
    daemon.stop()


def test_sigterm_during_fence_repair(cluster, daemon_factory):
    """SIGTERM while a restarted node's fence repair still waits on the
    other nodes: closing those nodes runs the repair's callbacks, which
    must not re-arm the node's quarantine timer (freed already: a
    use-after-free inside libevent, which only the valgrind run sees, ASan
    does not instrument libevent) nor send anything. The long node timeout
    keeps the reads to the paused nodes pending."""
    d = daemon_factory.start(cluster, name="dr",
                             extra=["--quarantine-ms", "200",
                                    "--node-timeout-ms", "20000"])
    others = cluster.nodes[1:]
    try:
        for nd in others:
            nd.pause()
        cluster.nodes[0].restart()

        def n1_quarantined():
            h = d.health()
            n1 = h["nodes"][0]
            return n1 if n1.get("up") and n1.get("quarantined") else None
        n1, _ = poll_until(n1_quarantined, 10.0 * SLOW, 0.05)
        assert n1, "node 1 not seen restarted: %r" % d.health()
        # The 200 ms quarantine ends and the repair reads go out to the
        # paused nodes, where they stay unanswered.
        time.sleep(1.0 * SLOW)
        assert d.health()["nodes"][0]["quarantined"] is True, d.health()
        code, secs = d.stop(5.0 * SLOW)
        print("exit %r %.2fs after SIGTERM during a fence repair"
              % (code, secs))
        assert code == 0, "exit %r%s after SIGTERM; stderr:\n%s" % (
            code, exit_meaning(code), d.stderr_tail(80))
    finally:
        cluster.resume_all()


# -- a waiter's acquire in flight at exit -----------------------------------

SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:")


def _waiter_in_flight(client_a, client_b, pause, resume):
    """A holds R, B waits on R, a majority stalls, A releases: the nodes
    still up announce the release, B's SET goes out and hangs on the
    stalled nodes. Returns R."""
    res = rname("wf")
    r = client_a.call("acquire", resource=res, ttl_ms=60000)
    assert_ok(r, "A acquires")
    client_b.send({"op": "acquire", "id": "b", "resource": res,
                   "ttl_ms": 60000, "wait_ms": 30000})
    time.sleep(0.3 * SLOW)  # B tried once, found it busy, and waits
    pause()
    client_a.send({"op": "release", "id": "a-rel", "lock": r["lock"]})
    time.sleep(0.5 * SLOW)  # the wake-up and B's SET
    return res


def _assert_clean_exit(code, stderr):
    assert code == 0, "exit %r%s; stderr:\n%s" % (
        code, exit_meaning(code), stderr[-4000:])
    for mark in SANITIZER_MARKS:
        assert mark not in stderr, stderr[-4000:]


def _wait_clean_exit(d, cluster, timeout):
    try:
        code = d.proc.wait(timeout=timeout)
    finally:
        cluster.resume_all()
    d.exit_code = code
    _assert_clean_exit(code, d.stderr_text())


@pytest.mark.parametrize("how", ["drain_timeout", "second_signal"])
def test_exit_with_a_waiters_acquire_in_flight(cluster, daemon_factory, how):
    """Before: SIGSEGV in 3 of 3 runs. ops_destroy freed the wake, then
    cluster_destroy ran B's callback, which reached wake_unwatch on freed
    memory."""
    d = daemon_factory.start(cluster, name="wf",
                             extra=["--node-timeout-ms", "20000",
                                    "--shutdown-timeout-ms",
                                    "300" if how == "drain_timeout"
                                    else "10000"])
    a, b = d.client(timeout=10.0), d.client(timeout=10.0)
    try:
        _waiter_in_flight(a, b,
                          lambda: [nd.pause() for nd in cluster.nodes[:3]],
                          cluster.resume_all)
        d.proc.send_signal(signal.SIGTERM)
        if how == "second_signal":
            time.sleep(0.2 * SLOW)
            assert d.proc.poll() is None, "exited before the second signal"
            d.proc.send_signal(signal.SIGTERM)
        _wait_clean_exit(d, cluster, 10.0 * SLOW)
    finally:
        a.close()
        b.close()
        cluster.resume_all()
        d.stop()


def test_exit_with_acquires_queued_in_the_cluster(cluster, daemon_factory):
    """More acquires than the cluster sends at once (4096) wait in its
    queue; at exit cluster_destroy freed them without their callbacks, and
    their calls leaked (LeakSanitizer, under REDLOCKD_SANITIZED). Every
    pending callback runs exactly once now."""
    d = daemon_factory.start(cluster, name="wq",
                             extra=["--node-timeout-ms", "20000",
                                    "--max-inflight", "5000",
                                    "--shutdown-timeout-ms", "300"])
    c = d.client(timeout=10.0)
    try:
        for nd in cluster.nodes[:3]:
            nd.pause()
        n = 4200
        c.sock.sendall(b"".join(
            c.encode({"op": "acquire", "id": "q%d" % i,
                      "resource": rname("wq"), "ttl_ms": 60000})
            for i in range(n)))
        time.sleep(1.5 * SLOW)  # every line read and its round started
        d.proc.send_signal(signal.SIGTERM)
        _wait_clean_exit(d, cluster, 20.0 * SLOW)
    finally:
        c.close()
        cluster.resume_all()
        d.stop()


def _dev_dirs(tmp):
    return set(glob.glob(os.path.join(tmp, "redlockd-dev-*")))


def test_dev_exit_with_a_waiters_acquire_in_flight():
    """The same under --dev: before, the crash left the five redis-servers
    and the temp dir behind."""
    work = tempfile.mkdtemp(prefix="rlit-wf-")
    sock = os.path.join(work, "d.sock")
    # --dev makes its directory under TMPDIR: our own, so that another
    # daemon's --dev run on the machine is not counted as ours.
    before = _dev_dirs(work)
    errf = open(os.path.join(work, "stderr"), "w+b")
    p = subprocess.Popen([str(BIN), "--dev", "--socket", sock,
                          "--node-timeout-ms", "20000",
                          "--shutdown-timeout-ms", "300"],
                         stdout=subprocess.DEVNULL, stderr=errf,
                         env=dict(os.environ, TMPDIR=work))
    dev_dir = None
    stopped = []
    try:
        h, _ = poll_until(lambda: dev_health(sock), 20.0 * SLOW, 0.05,
                          what="--dev healthy")
        assert h, "--dev never became healthy"
        new = _dev_dirs(work) - before
        assert len(new) == 1, new
        dev_dir = new.pop()
        pids = [int(x) for x in subprocess.run(
            ["pgrep", "-f", re.escape(dev_dir)], capture_output=True,
            text=True).stdout.split()]
        assert len(pids) == 5, pids

        def pause():
            for pid in pids[:3]:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        with Client(sock, timeout=10.0) as a, Client(sock, timeout=10.0) as b:
            _waiter_in_flight(a, b, pause, None)
            p.send_signal(signal.SIGTERM)
            code = p.wait(timeout=15.0 * SLOW)
        errf.seek(0)
        _assert_clean_exit(code, errf.read().decode(errors="replace"))
        assert not os.path.exists(dev_dir), os.listdir(dev_dir)
        left = subprocess.run(["pgrep", "-f", re.escape(dev_dir)],
                              capture_output=True, text=True).stdout.strip()
        assert left == "", "redis-server children left: %s" % left
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        if p.poll() is None:
            p.kill()
            p.wait()
        if dev_dir:
            for pid in subprocess.run(["pgrep", "-f", re.escape(dev_dir)],
                                      capture_output=True,
                                      text=True).stdout.split():
                os.kill(int(pid), signal.SIGKILL)
            shutil.rmtree(dev_dir, ignore_errors=True)
        errf.close()
        shutil.rmtree(work, ignore_errors=True)


# -- what SIGTERM does with each kind of lock -------------------------------


def test_sigterm_leaves_http_locks_to_their_ttl(cluster, daemon,
                                                daemon_factory):
    """An HTTP lock's holder cannot be told, and any daemon can extend or
    release it by token and resource: released at SIGTERM, another client
    could take it while its holder still believes it holds it (a sidecar
    rollout broke exclusion so). It stays until its TTL or a release."""
    res = rname("hs")
    r = http(daemon.socket, "POST", "/v1/locks",
             body=json.dumps({"resource": res, "ttl_ms": 60000}).encode())
    assert r.status == 200, r
    lock = r.json()["lock"]
    code, _ = daemon.stop(5.0)
    assert code == 0, code
    key = lock_key(res)
    # On a quorum at least (a node may have answered the SET late or
    # failed it: the grant needs only a quorum), with its TTL running.
    vals, pttls = cluster.get_all(key), cluster.pttl_all(key)
    held = [p for v, p in zip(vals, pttls) if v == lock.encode()]
    assert len(held) >= 3 and all(p > 50000 for p in held), (vals, pttls)
    # Its holder goes on through another daemon.
    d2 = daemon_factory.start(cluster, name="hs2")
    with d2.client() as c:
        assert_ok(c.call("extend", lock=lock, resource=res, ttl_ms=30000))
        assert_ok(c.call("release", lock=lock, resource=res))
    assert cluster.get_all(key) == [None] * 5


def test_sigterm_tells_session_owners_before_releasing(cluster, daemon):
    """A session lock dies with its connection: its owner gets a lost event
    for each lock, then the close, and the release goes to the nodes after.
    With every node stalled the releases cannot be answered, yet the owner
    is told at once."""
    owner = daemon.client(timeout=10.0)
    idle = daemon.client(timeout=10.0)
    try:
        locks = {}
        for i in range(3):
            res = rname("ss")
            r = owner.call("acquire", resource=res, ttl_ms=60000,
                           renew=(i == 0))
            assert_ok(r)
            locks[r["lock"]] = res
        for nd in cluster.nodes:
            nd.pause()
        t0 = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        lines = owner.read_until_closed(timeout=3.0 * SLOW)
        took = time.monotonic() - t0
        events = [json.loads(ln) for ln in lines] + owner.events
        lost = {ev["lock"]: ev["resource"] for ev in events
                if ev.get("event") == "lost"}
        print("owner told %d lost and closed %.0f ms after SIGTERM"
              % (len(lost), took * 1000))
        assert lost == locks, (lost, locks)
        # Nothing was released yet: every node is stalled.
        for nd in cluster.nodes:
            nd.resume()
        code = daemon.proc.wait(timeout=5.0 * SLOW)
        daemon.exit_code = code
        assert code == 0, code
        for lk, res in locks.items():
            vals = cluster.get_all(lock_key(res))
            assert vals == [None] * 5, (
                "session lock %s left at SIGTERM: %r" % (lk, vals))
        # A connection that held no lock is not told anything.
        assert idle.events == [], idle.events
    finally:
        cluster.resume_all()
        owner.close()
        idle.close()
        daemon.stop()


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2],
                         ids=["SIGUSR1", "SIGUSR2"])
def test_sigusr_is_logged_and_ignored(cluster, daemon, sig):
    """SIGUSR1 and SIGUSR2 have no action: by default they killed the
    daemon without releasing its locks, and left its socket behind. Now a
    warning says so, and the session's lock stays held and renewed."""
    name = signal.Signals(sig).name
    with daemon.client() as c:
        res = rname("usr")
        r = c.call("acquire", resource=res, ttl_ms=600, renew=True)
        assert_ok(r)
        daemon.proc.send_signal(sig)
        warn = "WARN  redlockd: %s: ignored: redlockd has no action for " \
            "it (SIGTERM stops)" % name
        ok, _ = poll_until(lambda: warn in daemon.stderr_text(), 5.0 * SLOW,
                           0.05)
        assert ok, daemon.stderr_tail(20)
        time.sleep(1.0)  # past the ttl: held only if renewed
        assert daemon.proc.poll() is None
        held = cluster.get_all(lock_key(res))
        assert sum(v is not None for v in held) >= 3, held
        with daemon.client() as other:
            assert_error(other.call("acquire", resource=res, ttl_ms=600),
                         "busy")
        assert_ok(c.call("ping"))
