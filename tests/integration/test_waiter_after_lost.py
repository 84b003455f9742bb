"""A renewing lock that is lost (its renewal answered not
held, or no renewal answered before the give-up) leaves the table from
inside the renewal's callback or the lock timer; the next waiter's attempt
is then scheduled, not run there, and the waiter still gets the lock."""

import contextlib
import time

from rl import SLOW, assert_ok, lock_key, poll_until, rname


def _queued(c, res):
    """Whether the locks listing shows one waiter for res."""
    r = c.call("locks", prefix=res)
    assert_ok(r, "locks")
    return any(e["resource"] == res and e["waiters"] == 1
               for e in r["locks"])


@contextlib.contextmanager
def _held_with_waiter(daemon, res, ttl):
    """A renewing lock of ttl ms on res, and a second connection's acquire
    of res queued behind it: yields (holder, the holder's answer, waiter);
    the waiter's request has the id "w"."""
    with daemon.client(timeout=10.0 * SLOW) as holder, \
            daemon.client(timeout=30.0 * SLOW) as w:
        r = holder.call("acquire", resource=res, ttl_ms=ttl, renew=True)
        assert_ok(r, "holder's renewing acquire")
        w.send({"op": "acquire", "id": "w", "resource": res,
                "ttl_ms": 20000, "wait_ms": int(20000 * SLOW)})
        ok, _ = poll_until(lambda: _queued(holder, res), 5.0 * SLOW)
        assert ok, "the waiter never showed up in the queue"
        assert holder.events == [], holder.events
        yield holder, r, w


def _assert_waiter_holds(cluster, w, res, timeout):
    r = w.response("w", timeout=timeout)
    assert_ok(r, "waiter's acquire after the holder was lost")
    assert r["resource"] == res, r
    vals = cluster.get_all(lock_key(res))
    mine = sum(1 for v in vals if v == r["lock"].encode())
    assert mine >= 3, vals
    assert_ok(w.call("release", lock=r["lock"]))


def test_waiter_gets_lock_when_renewal_finds_it_not_held(cluster, daemon):
    """The key vanishes from every node: the holder's next renewal answers
    not held (renew_done_cb -> lost -> the lock leaves the table), and the
    queued waiter acquires."""
    res = rname("wlost")
    key = lock_key(res)
    ttl = int(1500 * SLOW)
    with _held_with_waiter(daemon, res, ttl) as (holder, r, w):
        cluster.each("DEL", key)
        ev = holder.wait_event(timeout=ttl / 1000.0 + 5.0 * SLOW)
        assert ev.get("event") == "lost", ev
        assert ev.get("lock") == r["lock"], ev
        _assert_waiter_holds(cluster, w, res, 10.0 * SLOW)


def test_waiter_gets_lock_when_renewal_gives_up(cluster, daemon):
    """A quorum of nodes stops answering: no renewal answers before the
    give-up (the lock timer -> lost -> the lock leaves the table). The
    waiter's attempts fail while the nodes are paused and succeed once
    they are back."""
    res = rname("wgive")
    ttl = int(600 * SLOW)
    with _held_with_waiter(daemon, res, ttl) as (holder, r, w):
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            ev = holder.wait_event(timeout=5.0 * SLOW)
            assert ev.get("event") == "lost", ev
            assert ev.get("lock") == r["lock"], ev
            # Let the waiter's attempts meet the paused quorum.
            time.sleep(0.3 * SLOW)
        finally:
            cluster.resume_all()
        _assert_waiter_holds(cluster, w, res, 15.0 * SLOW)
