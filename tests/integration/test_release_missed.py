"""A release or a lost acquire's rollback that a node missed reaches it
once it is back.

A node dropped by the stall rule (paused, so what waited in its socket
runs when it runs again) or down is not sent a release: it kept the key,
held by nobody, until its TTL. A release proved with such nodes missing
now leaves the daemon a record of them, as a lock given up does: each is
sent the delete when it is back, and the token answers not_held (which is
what a released token answers anyway). A release that fails (no_quorum)
leaves no record: the lock stays its owner's and a retry asks the nodes.
An acquire round lost while nodes were dropped has its rollback sent to
them likewise, so the SET that waited in a paused node's socket does not
stand for a whole TTL."""

import json
import time

from rl import (PREFIX, SLOW, assert_error, assert_ok, http, lock_key,
                poll_until, rname)

TTL = 60000  # far longer than any bound below: a key left is a key stale


def _nodes_up(daemon):
    return [n.get("up") is True for n in daemon.health().get("nodes", [])]


def _drop(cluster, daemon, client, count):
    """Pauses nodes 1..count and waits until the stall rule dropped them
    (an acquire of another resource meets them)."""
    for nd in cluster.nodes[:count]:
        nd.pause()
    client.send({"op": "acquire", "id": "probe", "resource": rname("probe"),
                 "ttl_ms": 1000})
    ok, _ = poll_until(lambda: _nodes_up(daemon)[:count] == [False] * count,
                       15.0 * SLOW, 0.05)
    assert ok, "the paused nodes were never dropped: %r" % daemon.health()


def _back(cluster, daemon):
    cluster.resume_all()
    daemon.wait_all_up(20.0 * SLOW)


def _assert_gone(cluster, keys):
    """Every key leaves every node well within its 60 s TTL."""
    def left():
        return [(k, cluster.get_all(k), cluster.pttl_all(k)) for k in keys
                if cluster.get_all(k) != [None] * 5]
    ok, _ = poll_until(lambda: not left(), 10.0 * SLOW, 0.05)
    assert ok, "keys stayed on the nodes that missed the delete: %r" % left()


def test_release_with_a_node_dropped_reaches_it_when_back(cluster, daemon):
    """NDJSON release of a lock and of a permit while node 1 is dropped:
    ok, and once node 1 is back their keys leave it; extend, complete and
    release by the tokens answer not_held meanwhile."""
    res, sem = rname("rmiss"), rname("rmisssem")
    with daemon.client(timeout=20.0 * SLOW) as c:
        a = c.call("acquire", resource=res, ttl_ms=TTL)
        assert_ok(a, "acquire")
        p = c.call("acquire", resource=sem, ttl_ms=TTL, permits=2)
        assert_ok(p, "acquire a permit")
        keys = [lock_key(res), "%ssem:%d:%s" % (PREFIX, p["permit"], sem)]
        try:
            _drop(cluster, daemon, c, 1)
            assert_ok(c.call("release", lock=a["lock"]), "release")
            assert_ok(c.call("release", lock=p["lock"]), "release a permit")
        finally:
            _back(cluster, daemon)
        _assert_gone(cluster, keys)
        assert_error(c.call("extend", lock=a["lock"], resource=res,
                            ttl_ms=TTL), "not_held")
        assert_error(c.call("complete", lock=a["lock"], resource=res,
                            keep_ms=60000), "not_held")
        assert_error(c.call("release", lock=a["lock"]), "not_held")
        assert_error(c.call("release", lock=p["lock"], resource=sem),
                     "not_held")
        assert ("done:" + a["lock"]).encode() not in cluster.get_all(keys[0])
        assert_ok(c.call("acquire", resource=res, ttl_ms=5000),
                  "acquire after the release")


def test_http_release_with_a_node_dropped_reaches_it_when_back(cluster,
                                                               daemon):
    """The same through HTTP: DELETE of an HTTP lock while node 1 is
    dropped answers 200, and its key leaves node 1 once it is back."""
    res = rname("rmisshttp")
    body = json.dumps({"resource": res, "ttl_ms": TTL}).encode()
    r = http(daemon.socket, "POST", "/v1/locks", body,
             {"Content-Type": "application/json"}, timeout=10.0 * SLOW)
    assert r.status == 200, r
    token = r.json()["lock"]
    with daemon.client(timeout=20.0 * SLOW) as c:
        try:
            _drop(cluster, daemon, c, 1)
            d = http(daemon.socket, "DELETE", "/v1/locks/" + token,
                     timeout=10.0 * SLOW)
            assert d.status == 200, d
        finally:
            _back(cluster, daemon)
    _assert_gone(cluster, [lock_key(res)])
    d = http(daemon.socket, "DELETE", "/v1/locks/%s?resource=%s" % (token, res),
             timeout=10.0 * SLOW)
    assert d.json().get("error", {}).get("code") == "not_held", d


def test_failed_release_leaves_the_lock_to_its_retry(cluster, daemon):
    """A release with nodes 1-3 dropped answers no_quorum: nothing is
    remembered, so once they are back the retry deletes the lock (ok, not
    not_held) and the key leaves every node."""
    res = rname("rmissfail")
    with daemon.client(timeout=20.0 * SLOW) as c:
        a = c.call("acquire", resource=res, ttl_ms=TTL)
        assert_ok(a, "acquire")
        try:
            _drop(cluster, daemon, c, 3)
            assert_error(c.call("release", lock=a["lock"]), "no_quorum")
        finally:
            _back(cluster, daemon)
        assert_ok(c.call("release", lock=a["lock"]), "the release retried")
        _assert_gone(cluster, [lock_key(res)])


def test_lost_acquire_rollback_reaches_dropped_nodes(cluster, daemon):
    """Acquires sent while nodes 1-3 are paused, up to the moment the stall
    rule drops them: the last ones' SETs wait in the paused nodes' sockets
    and their rounds are lost by the drop, with no connection left for
    the rollback. When the nodes run again those SETs run; the rollback
    must follow once the nodes are back, not leave the keys for 60 s."""
    base = rname("rmissacq")
    keys = []
    with daemon.client(timeout=20.0 * SLOW) as c:
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            for n in range(400):
                res = "%s-%d" % (base, n)
                keys.append(lock_key(res))
                c.send({"op": "acquire", "id": "a%d" % n, "resource": res,
                        "ttl_ms": TTL})
                time.sleep(0.05)
                if _nodes_up(daemon)[:3] == [False] * 3:
                    break
            assert _nodes_up(daemon)[:3] == [False] * 3, daemon.health()
        finally:
            _back(cluster, daemon)
    _assert_gone(cluster, keys)
