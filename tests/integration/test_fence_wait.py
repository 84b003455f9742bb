"""From the contract: fencing tokens, wait_ms with
FIFO wake-up, renew."""

import time

from rl import (PREFIX, SLOW, assert_error, assert_ok, lock_key, poll_until,
                rname)


def test_fence_strictly_increasing(cluster, daemon):
    res = rname("fence")
    other = rname("fence-other")
    fences = []
    with daemon.client() as c:
        for i in range(6):
            r = c.call("acquire", resource=res if i % 2 == 0 else other,
                       fence=True, ttl_ms=10000)
            assert_ok(r, "fenced acquire")
            f = r.get("fence")
            assert isinstance(f, int) and not isinstance(f, bool), r
            fences.append(f)
            assert_ok(c.call("release", lock=r["lock"]))
            if i == 2:
                # Lose a node's counter: kill -9 and restart it empty.
                cluster.nodes[0].restart()
                daemon.wait_all_up(10.0 * SLOW)
            if i == 3:
                cluster.nodes[1].pause()
            if i == 4:
                cluster.nodes[1].resume()
    print("fences (even: %s, odd: %s):" % (res, other), fences)
    for seq in (fences[0::2], fences[1::2]):
        assert all(a < b for a, b in zip(seq, seq[1:])), fences
    # The counter is one key per node, written back to at least a quorum.
    counters = cluster.each("GET", PREFIX + "fence")
    at_max = [v for v in counters
              if isinstance(v, bytes) and int(v) >= fences[-1]]
    assert len(at_max) >= 3, counters


def test_wait_ms_fifo_wakeup(cluster, daemon):
    res = rname("wait")
    with daemon.client() as a, daemon.client() as b, \
            daemon.client() as c:
        tok = a.call("acquire", resource=res, ttl_ms=60000)["lock"]
        b.send({"op": "acquire", "resource": res, "wait_ms": 10000,
                "ttl_ms": 60000, "id": "b"})
        time.sleep(0.2)
        c.send({"op": "acquire", "resource": res, "wait_ms": 10000,
                "ttl_ms": 60000, "id": "c"})
        time.sleep(0.2)
        t0 = time.monotonic()
        assert_ok(a.call("release", lock=tok))
        rb = b.response("b", timeout=5.0)
        woke = time.monotonic() - t0
        print("first waiter woke %.1f ms after release" % (woke * 1000))
        assert_ok(rb, "first waiter")
        assert cluster.get_all(lock_key(res)) == [rb["lock"].encode()] * 5
        assert woke < 1.0 * SLOW, woke
        assert_ok(b.call("release", lock=rb["lock"]))
        rc = c.response("c", timeout=5.0)
        assert_ok(rc, "second waiter")
        assert_ok(c.call("release", lock=rc["lock"]))


def test_wait_ms_expiry_of_foreign_lock(cluster, daemon):
    """A lock held elsewhere (written on the nodes directly) with a short
    PTTL: a waiter gets it after it expires, within wait_ms."""
    res = rname("wexp")
    key = lock_key(res)
    for nd in cluster.nodes:
        nd.cmd("SET", key, "e" * 32, "PX", 600)
    with daemon.client() as c:
        t0 = time.monotonic()
        r = c.call("acquire", resource=res, wait_ms=5000, timeout=10.0)
        print("acquired %.0f ms after start (foreign PTTL 600 ms)" % (
            (time.monotonic() - t0) * 1000))
        assert_ok(r, "waiter after foreign expiry")
        # A quorum holds our token; a node whose foreign key had not yet
        # expired at that instant may still hold it (or nothing, since).
        vals = cluster.get_all(key)
        mine = sum(1 for v in vals if v == r["lock"].encode())
        assert mine >= 3, vals
        assert all(v in (r["lock"].encode(), b"e" * 32, None)
                   for v in vals), vals


def test_renew_keeps_lock_alive(cluster, daemon):
    res = rname("renew")
    key = lock_key(res)
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=300, renew=True)
        assert_ok(r, "acquire renew")

        def still():
            return cluster.get_all(key) == [r["lock"].encode()] * 5
        # Past several ttls, the lock is still everywhere.
        for _ in range(10):
            time.sleep(0.1)
            assert still(), cluster.get_all(key)
        assert not c.events, c.events
        assert_ok(c.call("release", lock=r["lock"]))
        assert cluster.get_all(key) == [None] * 5


def test_renew_lost_event(cluster, daemon):
    """When renewal cannot keep a quorum, a lost event arrives."""
    res = rname("lost")
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=600, renew=True)
        assert_ok(r, "acquire renew")
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            ev = c.wait_event(timeout=5.0 * SLOW)
        finally:
            cluster.resume_all()
        assert ev.get("event") == "lost", ev
        assert ev.get("lock") == r["lock"] and ev.get("resource") == res, ev
        assert "id" not in ev, ev
        assert_error(c.call("extend", lock=r["lock"]), "not_held")

    def gone():
        return cluster.get_all(lock_key(res)) == [None] * 5
    ok, _ = poll_until(gone, 3.0 * SLOW)
    assert ok, cluster.get_all(lock_key(res))
