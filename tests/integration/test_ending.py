"""A release or complete that could not be proved
keeps the lock (a retry asks the nodes again), and while one is in flight
the lost event still comes before the validity ends."""

import socket
import time

from rl import (SLOW, assert_error, assert_ok, err_code, lock_key,
                poll_until, pytest, rname)


def test_release_retried_after_no_quorum_asks_the_nodes(cluster, daemon):
    """Before: the first release dropped the lock from the table before
    its answer, so the retry answered not_held ("unknown token") without
    asking any node, while the key still stood on the stalled majority."""
    res = rname("rr")
    key = lock_key(res)
    with daemon.client(timeout=10.0) as c:
        r = c.call("acquire", resource=res, ttl_ms=60000)
        assert_ok(r)
        lock = r["lock"]
        stalled = cluster.nodes[:3]
        for nd in stalled:
            nd.pause()
        try:
            first = c.call("release", lock=lock)
            assert err_code(first) == "no_quorum", first
            # The stalled nodes still hold the key: not_held would be a lie.
            retry = c.call("release", lock=lock)
            print("release with a stalled majority: %r, retry: %r"
                  % (first, retry))
            assert err_code(retry) == "no_quorum", retry
        finally:
            for nd in stalled:
                nd.resume()
        # Recovery: the release goes through (or is proved done by the
        # earlier attempts, which the resumed nodes now run).
        again = c.call("release", lock=lock)
        assert again.get("ok") is True or err_code(again) == "not_held", \
            again
        vals, _ = poll_until(lambda: cluster.get_all(key) == [None] * 5,
                             3.0 * SLOW, 0.05)
        assert vals, cluster.get_all(key)
        # Proved gone: the table let go of it.
        assert_error(c.call("release", lock=lock), "not_held")


@pytest.mark.parametrize("op", ["complete", "release"])
def test_lost_before_validity_ends_with_an_op_in_flight(cluster,
                                                        daemon_factory, op):
    """Before: a complete in flight paused renewal and give-up alike until
    its answer, which a stalled majority delays by the node timeout: the
    lost event came after the validity had ended."""
    d = daemon_factory.start(cluster, name="pf",
                             extra=["--node-timeout-ms", "5000"])
    res = rname("pf")
    ttl = int(1000 * SLOW)
    with d.client(timeout=15.0) as c:
        r = c.call("acquire", resource=res, ttl_ms=ttl, renew=True)
        t_ok = time.monotonic()
        assert_ok(r)
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            c.send({"op": op, "id": "end", "lock": r["lock"]})
            deadline = t_ok + r["validity_ms"] / 1000.0
            try:
                ev = c.wait_event(timeout=8.0 * SLOW)
            except socket.timeout:
                ev = None
            t_ev = time.monotonic()
            print("%s in flight: lost event %.0f ms after the ok, validity "
                  "%d ms" % (op, (t_ev - t_ok) * 1000, r["validity_ms"]))
            assert ev is not None and ev.get("event") == "lost", ev
            assert ev.get("lock") == r["lock"], ev
            assert t_ev < deadline, (
                "lost came %.0f ms after the ok; the validity (%d ms) had "
                "ended" % ((t_ev - t_ok) * 1000, r["validity_ms"]))
        finally:
            cluster.resume_all()
        # The op's own answer still comes (no quorum: the stalled nodes
        # answered too late).
        rsp = c.response("end", timeout=10.0 * SLOW)
        print("%s answered %r" % (op, rsp))
        assert rsp.get("ok") is True or err_code(rsp) in (
            "no_quorum", "not_held"), rsp


def test_complete_after_lost_leaves_no_mark(cluster, daemon_factory):
    """After a lost event the lock is gone from the daemon: a complete by
    its token is not_held and marks nothing, so the update is not taken
    for done by a worker whose lock did not last the work."""
    d = daemon_factory.start(cluster, name="cal",
                             extra=["--node-timeout-ms", "300"])
    res = rname("cal")
    with d.client(timeout=15.0) as c:
        r = c.call("acquire", resource=res, ttl_ms=int(1000 * SLOW),
                   renew=True)
        assert_ok(r)
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            ev = c.wait_event(timeout=8.0 * SLOW)
            assert ev.get("event") == "lost" and ev["lock"] == r["lock"], ev
        finally:
            cluster.resume_all()
        assert_error(c.call("complete", lock=r["lock"], keep_ms=60000),
                     "not_held")
        vals = cluster.get_all(lock_key(res))
        assert not any(v is not None and v.startswith(b"done:")
                       for v in vals), vals
        # Nothing stands in the way of a retry once the key expires.
        ok, _ = poll_until(lambda: c.call("acquire", resource=res,
                                          ttl_ms=5000).get("ok") is True,
                           5.0 * SLOW, 0.1)
        assert ok
