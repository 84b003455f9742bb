"""What the daemon checks of each node's configuration, at each handshake
and every 5 s while the node is up.

Eviction: a node that may evict keys (a maxmemory with any policy but
noeviction) can drop a lock key before its ttl, which is that node losing
the lock. INFO memory tells: such a node is named once in a warning, in
/v1/health ("eviction": its policy) and in redlockd_node_may_evict; a
node fixed shows as fixed.

Persistence: ?persistent=1 turns the restart quarantine off for a node,
safe only with its AOF on. A node so marked whose INFO persistence says
appendonly is off is warned about and quarantined after a restart like
any node without persistence."""

from extra import metric, scrape
from rl import SLOW, assert_ok, lock_key, poll_until, rname

WARNING = "may evict lock keys before their ttl"


def _warnings(d, addr):
    return [ln for ln in d.stderr_text().splitlines()
            if WARNING in ln and addr in ln]


def _reconnect(d, node, addr, want):
    """Drops the daemon's connections to node and waits until its next
    handshake shows eviction == want (None: no member)."""
    node.cmd("CLIENT", "KILL", "TYPE", "normal")
    node.cmd("CLIENT", "KILL", "TYPE", "pubsub")

    def shown():
        h = d.health()
        nd = [n for n in h["nodes"] if n["addr"] == addr][0]
        return nd["up"] and nd.get("eviction") == want and h
    h, _ = poll_until(shown, 10.0 * SLOW, 0.02)
    assert h, d.health()


def test_evicting_nodes_are_named_once(cluster, daemon_factory):
    policies = [("104857600", "allkeys-lru"), ("104857600", "volatile-ttl"),
                ("0", "allkeys-lru"), ("104857600", "noeviction"), None]
    for node, p in zip(cluster.nodes, policies):
        if p is not None:
            node.cmd("CONFIG", "SET", "maxmemory", p[0])
            node.cmd("CONFIG", "SET", "maxmemory-policy", p[1])
    d = daemon_factory.start(cluster, name="ev")
    h = d.health()
    addrs = [n["addr"] for n in h["nodes"]]
    # Only a maxmemory with an evicting policy: volatile-* too, since
    # every lock key has a ttl; without a maxmemory nothing is evicted.
    assert [n.get("eviction") for n in h["nodes"]] == [
        "allkeys-lru", "volatile-ttl", None, None, None], h
    m = scrape(d.socket)
    assert [metric(m, "redlockd_node_may_evict", node=a)
            for a in addrs] == [1, 1, 0, 0, 0], m
    assert len(_warnings(d, addrs[0])) == 1, d.stderr_tail()
    assert "maxmemory-policy allkeys-lru with maxmemory 104857600" in \
        _warnings(d, addrs[0])[0]
    assert len(_warnings(d, addrs[1])) == 1, d.stderr_tail()
    for a in addrs[2:]:
        assert _warnings(d, a) == [], d.stderr_tail()
    # The daemon still counts them: the operator is told, not locked out.
    with d.client() as c:
        assert_ok(c.call("acquire", resource=rname("ev"), ttl_ms=5000))

    # A reconnect to the same policy does not repeat the warning ...
    _reconnect(d, cluster.nodes[1], addrs[1], "volatile-ttl")
    assert len(_warnings(d, addrs[1])) == 1, d.stderr_tail()
    # ... a node fixed in between shows as fixed ...
    cluster.nodes[0].cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    _reconnect(d, cluster.nodes[0], addrs[0], None)
    assert metric(scrape(d.socket), "redlockd_node_may_evict",
                  node=addrs[0]) == 0
    # ... and one broken again is named again.
    cluster.nodes[0].cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu")
    _reconnect(d, cluster.nodes[0], addrs[0], "allkeys-lfu")
    assert len(_warnings(d, addrs[0])) == 2, d.stderr_tail()
    assert "maxmemory-policy allkeys-lfu" in _warnings(d, addrs[0])[1]


def test_policy_changed_on_a_live_node_shows_without_a_reconnect(
        cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="ev2")
    addr = d.health()["nodes"][2]["addr"]
    reconnects = metric(scrape(d.socket), "redlockd_node_reconnects_total",
                        node=addr)
    cluster.nodes[2].cmd("CONFIG", "SET", "maxmemory", "104857600")
    cluster.nodes[2].cmd("CONFIG", "SET", "maxmemory-policy",
                         "allkeys-random")

    # Read again every 5 s while the node is up.
    def shown():
        h = d.health()
        return h["nodes"][2].get("eviction") == "allkeys-random" and h
    h, _ = poll_until(shown, 12.0 * SLOW, 0.1)
    assert h, d.health()
    assert [n.get("eviction") for n in h["nodes"]].count(None) == 4, h
    assert len(_warnings(d, addr)) == 1, d.stderr_tail()
    assert metric(scrape(d.socket), "redlockd_node_reconnects_total",
                  node=addr) == reconnects


PERSIST_WARNING = "marked ?persistent=1 but appendonly is off"


def test_persistent_node_without_aof_is_quarantined_after_a_restart(
        cluster, daemon_factory):
    n1 = cluster.nodes[0]
    args = ["--node", n1.uri + "?persistent=1"] + cluster.node_args()[2:]
    d = daemon_factory.start(cluster, name="pa", node_args=args,
                             extra=["--quarantine-ms", "60000"])
    assert d.stderr_text().count(PERSIST_WARNING) == 1, d.stderr_tail()
    assert not any(n["quarantined"] for n in d.health()["nodes"])
    res = rname("pa")
    with d.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=30000)
        assert_ok(r)
        # The restart empties node 1: taken for persistent, it would count
        # at once, and with two more nodes lost the lock would be free.
        n1.restart()

        def quarantined():
            h = d.health()
            return h["nodes"][0]["up"] and h["nodes"][0]["quarantined"] and h
        h, _ = poll_until(quarantined, 10.0 * SLOW, 0.02)
        assert h, (d.health(), d.stderr_tail())
        assert n1.cmd("GET", lock_key(res)) is None
        cluster.nodes[1].pause()
        cluster.nodes[2].pause()
        try:
            with d.client() as o:  # never granted: busy on nodes 4 and 5
                r2 = o.call("acquire", resource=res, ttl_ms=1000)
                assert r2["ok"] is False, r2
                assert r2["error"]["code"] in ("busy", "no_quorum"), r2
        finally:
            cluster.nodes[1].resume()
            cluster.nodes[2].resume()
        assert_ok(c.call("release", lock=r["lock"]))
    # Once seen, the warning is not repeated by a reconnect to the same
    # configuration.
    assert d.stderr_text().count(PERSIST_WARNING) == 1, d.stderr_tail()
