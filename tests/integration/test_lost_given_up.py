"""A lock given up while a majority of nodes is paused stays given up.

The stall rule drops the paused nodes, the renewing lock is given up (the
lost event) and its release reaches only the nodes up. When the paused
nodes run again they run the renewals that waited in their sockets, which
start the key's TTL again there, and the daemon reconnects to them. A
complete or extend by token and resource must then answer not_held and
mark nothing (proto/README.md, complete), and the release must be finished
on those nodes once they are back, not left to their TTL. A session closed
while nodes are down leaves its locks on them likewise, until they are
back."""

import time

from rl import (PREFIX, SLOW, assert_error, assert_ok, lock_key, poll_until,
                rname)


def _nodes_up(daemon):
    return [n.get("up") is True for n in daemon.health().get("nodes", [])]


def _pause_majority_until_down(cluster, daemon, poke=None):
    """Pauses nodes 1-3 (then calls poke, when given) and waits until the
    daemon has dropped them."""
    for nd in cluster.nodes[:3]:
        nd.pause()
    if poke is not None:
        poke()
    ok, _ = poll_until(lambda: _nodes_up(daemon)[:3] == [False] * 3,
                       15.0 * SLOW, 0.05)
    assert ok, "the paused nodes were never dropped: %r" % daemon.health()


def _resume_and_reconnect(cluster, daemon):
    cluster.resume_all()
    daemon.wait_all_up(20.0 * SLOW)


def _lose_renewing_lock(cluster, daemon, holder, ttl, **acquire):
    """A renewing lock taken by holder, then given up with nodes 1-3 paused
    and dropped; they run again and the daemon reconnects to them. Returns
    the acquire's answer."""
    r = holder.call("acquire", ttl_ms=ttl, renew=True, **acquire)
    assert_ok(r, "renewing acquire")
    try:
        _pause_majority_until_down(cluster, daemon)
        ev = holder.wait_event(timeout=ttl / 1000.0 + 15.0 * SLOW)
        assert ev.get("event") == "lost", ev
        assert ev.get("lock") == r["lock"], ev
    finally:
        _resume_and_reconnect(cluster, daemon)
    return r


def _assert_deleted_not_expired(cluster, key, token, bound):
    """Waits until key is on no node, and checks that it went by a delete:
    the last time a node was seen holding token under key, its PTTL was
    still far from running out (a key left to expire is last seen with a
    PTTL about one poll long)."""
    last_pttl = {}

    def gone():
        vals = cluster.get_all(key)
        pttls = cluster.pttl_all(key)
        for i, (v, p) in enumerate(zip(vals, pttls)):
            if v is not None:
                assert v == token.encode(), (i, vals)
                last_pttl[i] = p
        return all(v is None for v in vals)
    ok, _ = poll_until(gone, bound, 0.05)
    assert ok, ("the given-up lock stayed on the nodes: %r (pttl %r)"
                % (cluster.get_all(key), cluster.pttl_all(key)))
    expired = {i: p for i, p in last_pttl.items() if p < 500}
    assert not expired, ("the key expired on node(s) %r (last pttl seen "
                         "%r) instead of being deleted" % (
                             sorted(i + 1 for i in expired), last_pttl))


def test_complete_and_extend_after_give_up_answer_not_held(cluster, daemon):
    """After the lost event, with the paused nodes back and holding the
    key again, complete and extend by token and resource answer not_held,
    no node carries a done mark, and the key leaves every node by the
    release the daemon finishes once they are back."""
    res = rname("gu")
    key = lock_key(res)
    ttl = 6000
    with daemon.client(timeout=20.0 * SLOW) as holder, \
            daemon.client(timeout=20.0 * SLOW) as other:
        r = _lose_renewing_lock(cluster, daemon, holder, ttl, resource=res)
        token = r["lock"]
        done = ("done:" + token).encode()

        c = other.call("complete", lock=token, resource=res, keep_ms=60000)
        assert_error(c, "not_held")
        e = other.call("extend", lock=token, resource=res, ttl_ms=ttl)
        assert_error(e, "not_held")
        vals = cluster.get_all(key)
        assert done not in vals, vals
        # The holder itself, by token alone, is refused as well.
        c = holder.call("complete", lock=token, keep_ms=60000)
        assert_error(c, "not_held")

        _assert_deleted_not_expired(cluster, key, token, ttl / 1000.0 +
                                    10.0 * SLOW)
        assert done not in cluster.get_all(key)
        assert_error(other.call("release", lock=token, resource=res),
                     "not_held")
        # The resource is free for a new holder at once.
        assert_ok(other.call("acquire", resource=res, ttl_ms=5000),
                  "acquire after the given-up lock's release")


def test_given_up_permit_is_refused_and_released(cluster, daemon):
    """A semaphore's permit given up the same way: complete by its permit
    and by its semaphore's name alone answer not_held, the slot's key
    carries no done mark, and it leaves every node."""
    res = rname("gusem")
    ttl = 6000
    with daemon.client(timeout=20.0 * SLOW) as holder, \
            daemon.client(timeout=20.0 * SLOW) as other:
        r = _lose_renewing_lock(cluster, daemon, holder, ttl, resource=res,
                                permits=2)
        token, permit = r["lock"], r["permit"]
        key = "%ssem:%d:%s" % (PREFIX, permit, res)
        done = ("done:" + token).encode()

        assert_error(other.call("complete", lock=token, resource=res,
                                permit=permit, keep_ms=60000), "not_held")
        assert_error(other.call("extend", lock=token, resource=res,
                                permit=permit, ttl_ms=ttl), "not_held")
        assert_error(other.call("complete", lock=token, resource=res,
                                keep_ms=60000), "not_held")
        assert done not in cluster.get_all(key)
        _assert_deleted_not_expired(cluster, key, token, ttl / 1000.0 +
                                    10.0 * SLOW)
        assert done not in cluster.get_all(key)


def test_session_closed_with_nodes_down_is_released_when_they_return(
        cluster, daemon):
    """A session closes while nodes 1-3 are paused and dropped: its lock's
    release reaches nodes 4-5 only. Once 1-3 are back, the release is
    finished there, long before the lock's 60 s TTL."""
    res = rname("guclose")
    key = lock_key(res)
    holder = daemon.client(timeout=10.0 * SLOW)
    try:
        r = holder.call("acquire", resource=res, ttl_ms=60000)
        assert_ok(r, "acquire")
        token = r["lock"]
        try:
            # An acquire of another resource meets the paused nodes, so
            # the stall rule drops them.
            _pause_majority_until_down(
                cluster, daemon,
                lambda: holder.send({"op": "acquire", "id": "probe",
                                     "resource": rname("probe"),
                                     "ttl_ms": 1000}))
        finally:
            holder.close()
            time.sleep(0.2 * SLOW)  # the close is handled with 1-3 down
            _resume_and_reconnect(cluster, daemon)
        ok, _ = poll_until(lambda: cluster.get_all(key) == [None] * 5,
                           10.0 * SLOW, 0.05)
        assert ok, ("the closed session's lock stayed on the nodes that "
                    "were down: %r (pttl %r)" % (cluster.get_all(key),
                                                 cluster.pttl_all(key)))
        assert token.encode() not in cluster.get_all(key)
    finally:
        holder.close()
