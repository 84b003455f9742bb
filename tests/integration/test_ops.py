"""Every operation over NDJSON, checked on the wire and
on every Redis node."""

import json
import re
import time
import uuid

from rl import (PREFIX, TOKEN_RE, Cluster, Daemon, RedisNode, assert_error,
                assert_ok, lock_key, poll_until, pytest,
                rname)


def _acquire(c, resource, ttl_ms=30000, **kw):
    r = c.call("acquire", resource=resource, ttl_ms=ttl_ms, **kw)
    assert_ok(r, "acquire %s" % resource)
    return r


def test_ping(daemon_mod):
    with daemon_mod.client() as c:
        r = c.request({"op": "ping", "id": 1})
        assert r.get("ok") is True, r
        assert r.get("id") == 1, r
        assert "error" not in r, r


def test_acquire_sets_key_on_every_node(cluster_mod, daemon_mod):
    res = rname("acq")
    ttl = 20000
    with daemon_mod.client() as c:
        r = _acquire(c, res, ttl)
        tok = r.get("lock")
        assert isinstance(tok, str) and TOKEN_RE.match(tok), r
        assert r.get("resource") == res, r
        v = r.get("validity_ms")
        assert isinstance(v, int) and not isinstance(v, bool), r
        assert 0 < v <= ttl, r
        assert "fence" not in r, "fence returned without being asked: %r" % r
        key = lock_key(res)
        assert cluster_mod.get_all(key) == [tok.encode()] * 5
        for p in cluster_mod.pttl_all(key):
            assert isinstance(p, int) and 0 < p <= ttl, (
                cluster_mod.pttl_all(key))
        # A second acquisition of the same resource is refused.
        with daemon_mod.client() as c2:
            assert_error(c2.call("acquire", resource=res), "busy")
        assert_error(c.call("acquire", resource=res), "busy")
        # The refused attempts left the holder's key alone.
        assert cluster_mod.get_all(key) == [tok.encode()] * 5
        assert_ok(c.call("release", lock=tok))


def test_tokens_are_unique(daemon_mod):
    with daemon_mod.client() as c:
        toks = set()
        for i in range(20):
            r = _acquire(c, rname("uniq"))
            toks.add(r["lock"])
        assert len(toks) == 20


def test_extend_raises_pttl_on_every_node(cluster_mod, daemon_mod):
    res = rname("ext")
    with daemon_mod.client() as c:
        tok = _acquire(c, res, ttl_ms=5000)["lock"]
        key = lock_key(res)
        r = c.call("extend", lock=tok, ttl_ms=60000)
        assert_ok(r, "extend")
        if "validity_ms" in r:
            assert 0 < r["validity_ms"] <= 60000, r
        pttls = cluster_mod.pttl_all(key)
        for p in pttls:
            assert isinstance(p, int) and 5000 < p <= 60000, (
                "PTTL not raised on every node: %r" % pttls)
        assert cluster_mod.get_all(key) == [tok.encode()] * 5
        assert_ok(c.call("release", lock=tok))


def test_release_then_not_held(cluster_mod, daemon_mod):
    res = rname("rel")
    with daemon_mod.client() as c:
        tok = _acquire(c, res)["lock"]
        key = lock_key(res)
        assert cluster_mod.get_all(key) == [tok.encode()] * 5
        assert_ok(c.call("release", lock=tok), "release")
        assert cluster_mod.get_all(key) == [None] * 5
        assert_error(c.call("release", lock=tok), "not_held")
        assert_error(c.call("extend", lock=tok, ttl_ms=10000), "not_held")
        # The resource is free again.
        tok2 = _acquire(c, res)["lock"]
        assert tok2 != tok
        assert_ok(c.call("release", lock=tok2))


def test_complete_leaves_done_mark(cluster_mod, daemon_mod):
    res = rname("cmp")
    keep = 120000
    with daemon_mod.client() as c:
        tok = _acquire(c, res)["lock"]
        key = lock_key(res)
        assert_ok(c.call("complete", lock=tok, keep_ms=keep), "complete")
        assert cluster_mod.get_all(key) == [("done:" + tok).encode()] * 5
        for p in cluster_mod.pttl_all(key):
            assert isinstance(p, int) and keep - 10000 < p <= keep, (
                cluster_mod.pttl_all(key))
        assert_error(c.call("acquire", resource=res), "done")
        with daemon_mod.client() as c2:
            assert_error(c2.call("acquire", resource=res), "done")
        # A done mark is not a lock: the mark stays as it was.
        assert cluster_mod.get_all(key) == [("done:" + tok).encode()] * 5


def test_complete_default_keep(cluster_mod, daemon_mod):
    res = rname("cmpd")
    with daemon_mod.client() as c:
        tok = _acquire(c, res)["lock"]
        assert_ok(c.call("complete", lock=tok), "complete")
        key = lock_key(res)
        assert cluster_mod.get_all(key) == [("done:" + tok).encode()] * 5
        for p in cluster_mod.pttl_all(key):
            assert 86400000 - 60000 < p <= 86400000, (
                cluster_mod.pttl_all(key))


def test_health(cluster_mod, daemon_mod):
    with daemon_mod.client() as c:
        r = c.request({"op": "health", "id": "h"})
    assert r.get("ok") is True, r
    assert r.get("id") == "h", r
    assert r.get("quorum") == 3, r
    nodes = r.get("nodes")
    assert isinstance(nodes, list) and len(nodes) == 5, r
    addrs = []
    for n in nodes:
        assert isinstance(n.get("addr"), str) and n["addr"], n
        assert n.get("up") is True, n
        addrs.append(n["addr"])
    assert len(set(addrs)) == 5, addrs
    # Each configured node is recognisable by its socket path.
    for nd in cluster_mod.nodes:
        assert any(str(nd.path) in a for a in addrs), (nd.path, addrs)


@pytest.mark.parametrize("id_", ["abc", "", "é☃ \"q\" \\ \n\t", 42, 0, -7,
                                 3.5, None, True, False])
def test_id_echoed(daemon_mod, id_):
    with daemon_mod.client() as c:
        c.send({"op": "ping", "id": id_})
        r = c.read_msg()
        assert "id" in r, "id %r not echoed: %r" % (id_, r)
        assert r["id"] == id_ and type(r["id"]) is type(id_), (id_, r)
        assert r.get("ok") is True, r
        # Also on errors, and on every op.
        c.send({"op": "release", "lock": "0" * 32, "id": id_})
        r = c.read_msg()
        assert "id" in r and r["id"] == id_, (id_, r)
        assert_error(r, "not_held")


def test_id_large_integer_echoed_exactly(daemon_mod):
    """The id is echoed as given, not rounded through a double."""
    big = 9007199254740993  # 2**53 + 1: not representable as a double
    with daemon_mod.client() as c:
        c.send({"op": "ping", "id": big})
        r = c.read_msg()
        assert r.get("id") == big, r
        assert r.get("ok") is True, r


def test_no_id_key_when_none_sent(daemon_mod):
    res = rname("noid")
    with daemon_mod.client() as c:
        c.send({"op": "ping"})
        r = c.read_msg()
        assert r.get("ok") is True and "id" not in r, r
        c.send({"op": "acquire", "resource": res})
        r = c.read_msg()
        assert r.get("ok") is True and "id" not in r, r
        c.send({"op": "release", "lock": r["lock"]})
        r = c.read_msg()
        assert r.get("ok") is True and "id" not in r, r
        c.send({"op": "release", "lock": "0" * 32})
        r = c.read_msg()
        assert r.get("ok") is False and "id" not in r, r


def test_only_contract_keys_written(cluster, daemon):
    """'Nothing else is written': only <prefix>lock:* and <prefix>fence."""
    with daemon.client() as c:
        a = _acquire(c, rname("k"), fence=True)
        b = _acquire(c, rname("k"))
        assert_ok(c.call("extend", lock=b["lock"], ttl_ms=40000))
        assert_ok(c.call("complete", lock=a["lock"]))
        assert_ok(c.call("release", lock=b["lock"]))
        c.call("health")
    allowed = re.compile(("^%slock:.+$|^%sfence$|^%sdataset$" %
                          (PREFIX, PREFIX, PREFIX)).encode())
    for i, keys in enumerate(cluster.keys_all("*")):
        assert isinstance(keys, list), keys
        bad = [k for k in keys if not allowed.match(k)]
        assert not bad, "node %d has keys outside the contract: %r" % (
            i + 1, bad)


def test_complete_mark_expires(cluster_mod, daemon_mod):
    """After keep_ms the done mark is gone and the resource can be taken
    again."""
    res = rname("cmpx")
    with daemon_mod.client() as c:
        tok = _acquire(c, res)["lock"]
        assert_ok(c.call("complete", lock=tok, keep_ms=300))
        assert_error(c.call("acquire", resource=res), "done")
        time.sleep(0.5)
        assert cluster_mod.get_all(lock_key(res)) == [None] * 5
        r = _acquire(c, res)
        assert_ok(c.call("release", lock=r["lock"]))


def test_prefix(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="pfx",
                             extra=["--prefix", "myapp:"])
    res = rname("pfx")
    with d.client() as c:
        r = _acquire(c, res, fence=True)
        # The answer comes at quorum; the last nodes' SETs may still be on
        # their way, so wait for all five (bounded) before reading keys.
        key = b"myapp:lock:" + res.encode()
        want = [r["lock"].encode()] * 5
        vals, _ = poll_until(lambda: cluster.get_all(key) == want and want,
                             5.0, what="the key on all five nodes")
        assert vals == want, cluster.get_all(key)
        for keys in cluster.keys_all("redlock:*"):
            assert keys == [], "default prefix used despite --prefix: %r" % (
                keys,)
        fences = cluster.each("GET", "myapp:fence")
        assert sum(1 for v in fences if v is not None) >= 3, fences
        assert_ok(c.call("release", lock=r["lock"]))
        gone, _ = poll_until(lambda: cluster.get_all(key) == [None] * 5,
                             5.0, what="the key gone from all five nodes")
        assert gone, cluster.get_all(key)


def test_password_node_hidden_in_health_and_logs():
    """A TCP node with a password: AUTH works (the node is up and holds the
    key), and neither health nor the daemon's log shows the password."""
    secret = "s3cret-" + uuid.uuid4().hex[:8]
    c = Cluster(5)
    pw = RedisNode(c.dir, 5, password=secret, tcp_port="free")
    c.nodes[4] = pw
    c.start()
    d = None
    try:
        d = Daemon(c, name="pw").start()
        h = d.health()
        assert h.get("ok") is True, h
        text = json.dumps(h)
        assert secret not in text, "password in health: %r" % h
        assert any(str(pw.tcp_port) in n.get("addr", "") and
                   n.get("up") is True for n in h["nodes"]), h
        res = rname("pw")
        with d.client() as cl:
            r = _acquire(cl, res)
            assert c.get_all(lock_key(res)) == [r["lock"].encode()] * 5
            assert_ok(cl.call("release", lock=r["lock"]))
        code, secs = d.stop()
        assert code == 0, code
        assert secret not in d.stderr_text(), "password in the daemon log"
    finally:
        if d is not None:
            d.kill()
        c.stop()
