"""Issue 2, item 10.10: SIGTERM releases every lock and exits 0."""

import signal
import time

from rl import assert_ok, lock_key, rname


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
        daemon.proc.send_signal(signal.SIGTERM)
        code = None
        try:
            code = daemon.proc.wait(timeout=5.0)
        finally:
            daemon.exit_code = code
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
            daemon.proc.send_signal(signal.SIGTERM)
            code = None
            try:
                code = daemon.proc.wait(timeout=5.0)
            finally:
                daemon.exit_code = code
            print("exit %r %.2fs after SIGTERM with n5 paused" % (
                code, time.monotonic() - t0))
            assert code == 0
        finally:
            cluster.resume_all()
    for res in taken:
        vals = cluster.get_all(lock_key(res))
        assert vals[:4] == [None] * 4, vals
    daemon.stop()
