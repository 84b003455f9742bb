"""Locks taken on an NDJSON connection die with it."""

import time

from rl import SLOW, assert_ok, lock_key, poll_until, rname


def test_close_releases_session_locks(cluster, daemon):
    a = daemon.client()
    b = daemon.client()
    try:
        mine = []
        for i in range(5):
            res = rname("sess")
            r = a.call("acquire", resource=res, ttl_ms=60000)
            assert_ok(r, "acquire on session a")
            mine.append((res, r["lock"]))
        theirs = rname("other")
        rb = b.call("acquire", resource=theirs, ttl_ms=60000)
        assert_ok(rb, "acquire on session b")
        for res, tok in mine:
            assert cluster.get_all(lock_key(res)) == [tok.encode()] * 5

        a.close()
        t0 = time.monotonic()

        def gone():
            return all(cluster.get_all(lock_key(res)) == [None] * 5
                       for res, _ in mine)
        ok, took = poll_until(gone, 1.5 * SLOW, 0.02)
        print("session locks gone from all nodes %.0f ms after close" % (
            took * 1000))
        left = {res: cluster.get_all(lock_key(res)) for res, _ in mine}
        assert ok, "session locks still on nodes %.2fs after close: %r" % (
            time.monotonic() - t0, left)

        # The other connection's lock survives and is still releasable.
        time.sleep(0.3)
        assert cluster.get_all(lock_key(theirs)) == [rb["lock"].encode()] * 5
        assert_ok(b.call("extend", lock=rb["lock"], ttl_ms=60000))
        assert_ok(b.call("release", lock=rb["lock"]))
        assert cluster.get_all(lock_key(theirs)) == [None] * 5
    finally:
        a.close()
        b.close()


def test_session_lock_not_usable_after_close(cluster, daemon):
    """After its session closed, the token is gone: not_held from anyone,
    and the resource is free again."""
    res = rname("gone")
    with daemon.client() as a:
        tok = a.call("acquire", resource=res, ttl_ms=60000)["lock"]
    with daemon.client() as b:
        def free():
            r = b.call("acquire", resource=res, ttl_ms=60000)
            return r if r.get("ok") else None
        r, took = poll_until(free, 1.5 * SLOW, 0.05)
        assert r, "resource not free after its session closed"
        r2 = b.call("release", lock=tok)
        assert r2.get("ok") is False and r2["error"]["code"] == "not_held", r2
        assert cluster.get_all(lock_key(res)) == [r["lock"].encode()] * 5
