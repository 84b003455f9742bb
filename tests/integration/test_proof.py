"""What release, extend and complete may claim, and what a lock's owner is
told when the lock goes through someone else.

- `not_held` needs proof: more nodes than a quorum can spare are without
  the token. A release is `ok` only when that holds after its delete.
  Fewer answers (nodes paused or answering errors) are `no_quorum`.
- A failed extend to a shorter ttl may still land on the nodes that did not
  answer: the owner's lock is counted valid only that long, so a renewing
  owner renews at once or hears `lost` before anyone else can take it.
- A session lock released or completed through another connection of the
  same daemon sends its owner `lost` at once (through another daemon, the
  owner's next renewal finds it gone).
- With 32 nodes, the most the daemon takes, a failed fence write-back
  still rolls back every node.

Real redis-servers; paused with SIGSTOP for less than the 2 s stall limit,
and refusing scripts through ACL rules."""

import socket
import time

import pytest

from extra import metric, scrape
from rl import (PREFIX, Cluster, Daemon, assert_ok, err_code, lock_key,
                rname)


def _deny_scripts(nodes):
    for nd in nodes:
        nd.cmd("ACL", "SETUSER", "default", "-evalsha", "-eval")


def _allow_all(nodes):
    for nd in nodes:
        nd.cmd("ACL", "SETUSER", "default", "+@all")


def test_release_answered_by_a_minority_is_no_quorum(cluster, daemon):
    """3 of 5 nodes paused: the 2 that answer cannot show the lock gone
    from a quorum."""
    res = rname("rmin")
    with daemon.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
        for nd in cluster.nodes[2:]:
            nd.pause()
        try:
            rel = c.call("release", lock=tok, resource=res, timeout=5)
        finally:
            cluster.resume_all()
        print("release with 3 of 5 paused: %r" % rel)
        assert err_code(rel) == "no_quorum", rel
        # The delete was queued on the paused nodes and applies on resume:
        # a retry now finds the lock gone everywhere.
        r = c.call("release", lock=tok, resource=res)
        assert err_code(r) == "not_held", r
        assert cluster.get_all(lock_key(res)) == [None] * 5


def test_release_refused_by_a_quorum_is_no_quorum(cluster, daemon):
    """3 of 5 nodes answer the release script with an error: the key stays
    on a quorum, so the release must not say ok."""
    res = rname("rerr")
    with daemon.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
        _deny_scripts(cluster.nodes[2:])
        try:
            rel = c.call("release", lock=tok, resource=res, timeout=5)
        finally:
            _allow_all(cluster.nodes[2:])
        keys = cluster.get_all(lock_key(res))
        print("release: %r; keys after: %r" % (rel, keys))
        assert sum(k == tok.encode() for k in keys) == 3, keys
        assert err_code(rel) == "no_quorum", rel
        assert_ok(c.call("release", lock=tok, resource=res), "retry")


@pytest.mark.parametrize("op", ["release", "complete"])
def test_not_held_needs_proof(cluster, daemon, op):
    """One node lacks the token, two answer errors, two are paused: one
    node without the token proves nothing (the lock is on four)."""
    res = rname("unp")
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(r, "acquire")
        tok = r["lock"]
        cluster.nodes[0].cmd("DEL", lock_key(res))
        _deny_scripts(cluster.nodes[1:3])
        for nd in cluster.nodes[3:]:
            nd.pause()
        try:
            ans = c.call(op, lock=tok, resource=res, timeout=5)
        finally:
            _allow_all(cluster.nodes[1:3])
            cluster.resume_all()
        print("%s with 1 without, 2 errors, 2 paused: %r" % (op, ans))
        assert err_code(ans) == "no_quorum", ans


def test_complete_that_fails_keeps_renewing(cluster, daemon):
    """A complete that proves nothing leaves a renewing lock renewing:
    its owner still holds it, and the done mark never formed."""
    res = rname("cren")
    with daemon.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=600, renew=True)["lock"]
        _deny_scripts(cluster.nodes[2:])
        try:
            ans = c.call("complete", lock=tok, resource=res, timeout=5)
        finally:
            _allow_all(cluster.nodes[2:])
        assert err_code(ans) == "no_quorum", ans
        time.sleep(1.5)  # 2.5 ttls: held only if renewal went on
        keys = cluster.get_all(lock_key(res))
        assert sum(k == tok.encode() for k in keys) >= 3, keys
        with pytest.raises(socket.timeout):
            c.wait_event(timeout=0.2)
        assert_ok(c.call("release", lock=tok))


def test_failed_shorter_extend_bounds_the_validity(cluster, daemon):
    """A renewing owner's extend to 1000 ms fails (3 nodes paused) but
    lands on the paused nodes when they resume. Before that shorter ttl
    can run out, the owner must either still hold the lock (renewed at
    once) or have heard lost; never may another client acquire while the
    owner believes it holds it."""
    res = rname("shrink")
    owner = daemon.client(timeout=10.0)
    other = daemon.client()
    try:
        tok = owner.call("acquire", resource=res, ttl_ms=30000,
                         renew=True)["lock"]
        for nd in cluster.nodes[2:]:
            nd.pause()
        try:
            ext = owner.call("extend", lock=tok, ttl_ms=1000, timeout=5)
        finally:
            cluster.resume_all()
        assert err_code(ext) == "no_quorum", ext
        t_ext = time.monotonic()
        time.sleep(1.5)  # past the shorter ttl
        r2 = other.call("acquire", resource=res, ttl_ms=5000)
        keys = cluster.get_all(lock_key(res))
        told = owner.events[:]
        if r2.get("ok") is True and not told:
            try:  # sent before the keys could go, so already in the socket
                told.append(owner.wait_event(timeout=0.5))
            except socket.timeout:
                pass
        print("1.5 s after the failed extend: keys %r, owner events %r, "
              "second acquire %r" % (keys, told, r2))
        if r2.get("ok") is True:
            assert any(e.get("event") == "lost" and e.get("lock") == tok
                       for e in told), (
                "two holders: the owner was not told its lock was lost, "
                "%.1f s after the extend" % (time.monotonic() - t_ext))
        else:
            # Renewed at once: still the owner's, on a quorum.
            assert sum(k == tok.encode() for k in keys) >= 3, keys
    finally:
        owner.close()
        other.close()


def test_failed_shorter_extend_renews_at_once(cluster, daemon):
    """With every node answering again, the renewal that follows a failed
    shorter extend restores the lock's own ttl well before the shorter one
    would have ended it."""
    res = rname("shrk2")
    with daemon.client(timeout=10.0) as owner:
        tok = owner.call("acquire", resource=res, ttl_ms=30000,
                         renew=True)["lock"]
        _deny_scripts(cluster.nodes[2:])
        try:
            ext = owner.call("extend", lock=tok, ttl_ms=2000, timeout=5)
        finally:
            _allow_all(cluster.nodes[2:])
        assert err_code(ext) == "no_quorum", ext
        # Nodes 1-2 applied the 2000 ms ttl; the renewal must bring all
        # five back to about 30 s.
        time.sleep(0.5)
        pttls = cluster.pttl_all(lock_key(res))
        print("PTTLs 0.5 s after the failed extend: %r" % pttls)
        assert all(isinstance(p, int) and p > 20000 for p in pttls), pttls
        assert_ok(owner.call("release", lock=tok))


@pytest.mark.parametrize("op", ["release", "complete"])
def test_owner_told_when_another_connection_ends_its_lock(cluster, daemon,
                                                          op):
    """The owner hears lost at once; it is not counted as a lock that
    could not be kept (redlockd_locks_lost_total, which operators alert on):
    someone holding its token let it go."""
    res = rname("tp")
    with daemon.client() as owner, daemon.client() as other:
        tok = owner.call("acquire", resource=res, ttl_ms=30000,
                         renew=True)["lock"]
        lost0 = metric(scrape(daemon.socket), "redlockd_locks_lost_total")
        assert_ok(other.call(op, lock=tok, resource=res), op)
        ev = owner.wait_event(timeout=3.0)
        print("owner got %r" % ev)
        assert ev.get("event") == "lost" and ev.get("lock") == tok, ev
        assert ev.get("resource") == res, ev
        assert metric(scrape(daemon.socket),
                      "redlockd_locks_lost_total") == lost0


def test_owner_not_told_of_its_own_release(cluster, daemon):
    res = rname("own")
    with daemon.client() as owner:
        tok = owner.call("acquire", resource=res, ttl_ms=30000,
                         renew=True)["lock"]
        assert_ok(owner.call("release", lock=tok))
        with pytest.raises(socket.timeout):
            owner.wait_event(timeout=0.5)


def test_32_nodes_fence_writeback_failure_rolls_back():
    """32 nodes, the most the daemon takes. Nodes 1-16 start with a high
    fence counter, so the write-back must raise the counter on the other
    16, whose ACL refuses SET on the counter (but not on lock keys, nor
    INCR): the write-back fails, the acquisition answers no_quorum, and
    every node must be rolled back (a bit mask of 32 nodes once came out
    0, leaving the key everywhere for its whole ttl). Sixteen, not fewer:
    the fence is decided by the first quorum (17) to answer, which must
    hold a high counter whichever nodes answer first, and the sixteen high
    ones alone are not a quorum for the write-back."""
    c = Cluster(32).start()
    d = None
    try:
        d = Daemon(c, name="d32", extra=["--node-timeout-ms", "1000"])
        d.start(timeout=30)
        fence_key = PREFIX + "fence"
        for nd in c.nodes[:16]:
            nd.cmd("SET", fence_key, "100")
        for nd in c.nodes[16:]:
            nd.cmd("ACL", "SETUSER", "default", "-set",
                   "(~%slock:* +set)" % PREFIX)
        res = rname("f32")
        with d.client() as cl:
            r = cl.call("acquire", resource=res, ttl_ms=30000, fence=True,
                        timeout=10)
        print("32-node fenced acquire: %r" % r)
        assert err_code(r) == "no_quorum", r
        _allow_all(c.nodes[16:])

        def none_left():
            return all(k is None for k in c.get_all(lock_key(res)))
        for _ in range(50):
            if none_left():
                break
            time.sleep(0.05)
        keys = c.get_all(lock_key(res))
        assert none_left(), "%d of 32 nodes still hold the key" % sum(
            1 for k in keys if k is not None)
    finally:
        if d is not None:
            d.stop()
        c.stop()


def test_done_mark_on_a_minority_is_not_done(cluster, daemon):
    """A complete that reached one node only (its lock still held on the
    rest) leaves a done mark there. That proves nothing: a second acquirer
    hears busy, not done, so a waiter waits on, and gets the lock once
    its holder lets go instead of giving up on a resource never done."""
    res = rname("dmin")
    with daemon.client() as a, daemon.client(timeout=10.0) as b:
        tok = a.call("acquire", resource=res, ttl_ms=30000)["lock"]
        cluster.nodes[0].cmd("SET", lock_key(res), "done:" + tok, "PX",
                             "60000")
        r = b.call("acquire", resource=res, ttl_ms=5000)
        assert err_code(r) == "busy", r
        b.send({"op": "acquire", "id": "w", "resource": res, "ttl_ms": 5000,
                "wait_ms": 8000})
        time.sleep(0.3)
        assert_ok(a.call("release", lock=tok), "holder's release")
        got = b.response("w", timeout=10.0)
        print("waiter after the holder's release: %r" % got)
        assert_ok(got, "waiter")
        # Marks on a quorum are done, as ever.
        assert_ok(b.call("release", lock=got["lock"]))
        for nd in cluster.nodes[:3]:
            nd.cmd("SET", lock_key(res), "done:x", "PX", "60000")
        assert err_code(b.call("acquire", resource=res)) == "done"
