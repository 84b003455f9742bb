"""A release, extend or complete whose resource is not the one its token
was taken for addresses another lock (none, in practice): it answers
not_held and must leave the lock the token names held and renewing. A
complete that fails must not stop the renewal either."""

import time

from rl import (SLOW, assert_error, assert_ok, lock_key, poll_until,
                rname)

# Short enough that a lock whose renewal stopped is gone within the test,
# long enough for a noisy machine (and scaled for sanitizers/valgrind).
TTL = int(1500 * SLOW)
RPC_S = 10.0 * SLOW  # bound on every single answer


def _holders(cluster, key, tok):
    return sum(1 for v in cluster.get_all(key) if v == tok.encode())


def _mismatch_keeps_lock(cluster, a, b, op, **extra):
    """a acquires with renew and sends op with its token and another
    resource; checks the answer and that, past two ttls, the lock is still
    held by the token (renewed) and b cannot take it. Returns (resource,
    token); the caller finishes."""
    res = rname("tr")
    other = rname("tr-other")
    r = a.call("acquire", resource=res, ttl_ms=TTL, renew=True)
    assert_ok(r, "acquire with renew")
    tok = r["lock"]
    bad = a.call(op, lock=tok, resource=other, **extra)
    assert_error(bad, "not_held")
    # Nothing was written for the other resource.
    assert cluster.get_all(lock_key(other)) == [None] * 5
    time.sleep(2.5 * TTL / 1000.0)
    held = _holders(cluster, lock_key(res), tok)
    assert held >= 3, (
        "after %s with resource %r the lock on %r was not renewed: held "
        "on %d node(s) %.0f ms later (ttl %d): %r" % (
            op, other, res, held, 2.5 * TTL, TTL,
            cluster.get_all(lock_key(res))))
    rb = b.call("acquire", resource=res, ttl_ms=TTL)
    assert_error(rb, "busy")
    assert not a.events, "unexpected events: %r" % a.events
    return res, tok


def _clients(daemon):
    return daemon.client(timeout=RPC_S), daemon.client(timeout=RPC_S)


def test_release_other_resource_keeps_lock(cluster, daemon):
    a, b = _clients(daemon)
    with a, b:
        res, tok = _mismatch_keeps_lock(cluster, a, b, "release")
        # The table still knows the token: a release without resource.
        assert_ok(a.call("release", lock=tok), "proper release")
        assert cluster.get_all(lock_key(res)) == [None] * 5
        rb = b.call("acquire", resource=res, ttl_ms=TTL)
        assert_ok(rb, "acquire after release")
        assert_ok(b.call("release", lock=rb["lock"]))


def test_extend_other_resource_keeps_lock(cluster, daemon):
    a, b = _clients(daemon)
    with a, b:
        res, tok = _mismatch_keeps_lock(cluster, a, b, "extend")
        r = a.call("extend", lock=tok)
        assert_ok(r, "proper extend")
        assert r.get("resource") == res, r
        assert_ok(a.call("release", lock=tok, resource=res),
                  "release naming the right resource")
        assert cluster.get_all(lock_key(res)) == [None] * 5
        assert_error(a.call("release", lock=tok), "not_held")


def test_complete_other_resource_keeps_lock(cluster, daemon):
    a, b = _clients(daemon)
    with a, b:
        res, tok = _mismatch_keeps_lock(cluster, a, b, "complete",
                                        keep_ms=60000)
        assert_ok(a.call("complete", lock=tok, keep_ms=60000),
                  "proper complete")
        done = ("done:" + tok).encode()
        vals = cluster.get_all(lock_key(res))
        assert sum(1 for v in vals if v == done) >= 3, vals
        assert_error(b.call("acquire", resource=res, ttl_ms=TTL), "done")
        # Completed: the table forgot it, and no lost event followed.
        assert_error(a.call("release", lock=tok), "not_held")
        assert not a.events, "unexpected events: %r" % a.events


def _all_down(daemon):
    nodes = daemon.health().get("nodes") or []
    return len(nodes) == 5 and all(n.get("up") is False for n in nodes)


def test_failed_complete_keeps_renewing(cluster, daemon):
    """Every node paused until the daemon counts it down, so a complete
    reaches none: no_quorum, and nothing of it is queued on the paused
    nodes to land when they wake. (With a complete that lands on a minority,
    the lock would be left on too few nodes to survive a renewal that runs
    while only some of them are back.) Once the nodes are back, the daemon
    must go on renewing the lock."""
    ttl = int(9000 * SLOW)
    res = rname("tr-fail")
    key = lock_key(res)
    with daemon.client(timeout=RPC_S) as a, \
            daemon.client(timeout=RPC_S) as b:
        r = a.call("acquire", resource=res, ttl_ms=ttl, renew=True)
        assert_ok(r, "acquire with renew")
        tok = r["lock"]
        try:
            for nd in cluster.nodes:
                nd.pause()
            down, took = poll_until(lambda: _all_down(daemon),
                                    10.0 * SLOW, 0.05)
            assert down, "paused nodes never shown down: %r" % (
                daemon.health(),)
            print("paused nodes down after %.2fs" % took)
            rc = a.call("complete", lock=tok)
            assert_error(rc, "no_quorum")
        finally:
            cluster.resume_all()
        daemon.wait_all_up(10.0 * SLOW)
        assert not a.events, "lost during the pause: %r" % a.events
        assert cluster.get_all(key) == [tok.encode()] * 5, \
            cluster.get_all(key)
        # Left alone, the PTTL only falls with the clock; more than that
        # left means the daemon renewed the lock.
        t_base = time.monotonic()
        base = cluster.pttl_all(key)

        def renewed():
            fell = (time.monotonic() - t_base) * 1000.0
            now = cluster.pttl_all(key)
            return all(n > 0 and n > p - fell + 300
                       for n, p in zip(now, base))
        ok, took = poll_until(renewed, ttl / 1000.0 + 1.0 * SLOW, 0.05)
        assert ok, ("no renewal after a failed complete: PTTL went %r -> "
                    "%r (ttl %d), lock on nodes %r" % (
                        base, cluster.pttl_all(key), ttl,
                        cluster.get_all(key)))
        print("renewed %.2fs after the nodes were back" % took)
        assert not a.events, "unexpected events: %r" % a.events
        assert_error(b.call("acquire", resource=res, ttl_ms=ttl), "busy")
        assert_ok(a.call("release", lock=tok), "release after it all")
        assert cluster.get_all(key) == [None] * 5
