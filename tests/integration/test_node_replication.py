"""A lock node that syncs from a master loses its keys without a restart:
REPLICAOF replaces its data set with the master's and keeps its run_id,
so the restart quarantine, which looks for a new run_id, never saw it. A
node that turned replica and was promoted back is then writable, empty and
counted at once: of a lock held on exactly three nodes, one replaced, a
second client got the same lock. The daemon now reads INFO replication at
each handshake and every second: a replica is named in a warning, and a new
replication id on a node sends it through the quarantine of a restart,
even when it is marked persistent.

The master is one more redis-server on 127.0.0.1 (replication needs TCP);
the lock nodes stay on unix sockets."""

from rl import SLOW, RedisNode, assert_ok, lock_key, poll_until, rname

REPLICA_WARNING = "is a replica of 127.0.0.1:%d"


def _sync_and_promote(node, master):
    """node syncs master's (empty) data set, then is a primary again."""
    node.cmd("REPLICAOF", "127.0.0.1", str(master.tcp_port))
    ok, _ = poll_until(lambda: b"master_link_status:up" in
                       node.cmd("INFO", "replication"), 10.0 * SLOW, 0.05)
    assert ok, node.cmd("INFO", "replication")
    node.cmd("REPLICAOF", "NO", "ONE")


def _node_health(d, k):
    return d.health()["nodes"][k]


def test_node_replaced_by_a_master_is_quarantined(cluster, daemon_factory):
    """The Redlock case a restart quarantine exists for: a lock held on
    exactly three nodes (two refused it when it was taken), and one of
    the three loses its key. Before, nodes 3, 4 and 5 then granted the
    same lock to a second client."""
    master = RedisNode(cluster.dir, 9, tcp_port="free")
    master.start()
    try:
        d = daemon_factory.start(cluster, name="repl",
                                 extra=["--quarantine-ms", "4000"])
        res = rname("repl")
        with d.client() as c:
            for k in (3, 4):  # out of memory: they refuse the SET
                cluster.nodes[k].cmd("CONFIG", "SET", "maxmemory", "1")
            try:
                assert_ok(c.call("acquire", resource=res, ttl_ms=30000))
            finally:
                for k in (3, 4):
                    cluster.nodes[k].cmd("CONFIG", "SET", "maxmemory", "0")
            held = cluster.get_all(lock_key(res))
            assert [v is not None for v in held] == [True] * 3 + [False] * 2
            mark = len(d.stderr_text())
            _sync_and_promote(cluster.nodes[2], master)
            assert cluster.nodes[2].cmd("GET", lock_key(res)) is None
            ok, _ = poll_until(
                lambda: _node_health(d, 2).get("quarantined") is True,
                10.0 * SLOW, 0.05)
            assert ok, (_node_health(d, 2), d.stderr_tail(30))
            log = d.stderr_text()[mark:]
            assert "node 3: %s: replication id changed" % \
                cluster.nodes[2].uri.replace("unix://", "unix:") in log, log
            assert "node 3: its keys were replaced by a master's" in log, log
            with d.client() as other:
                r2 = other.call("acquire", resource=res, ttl_ms=5000)
                assert r2["ok"] is False, \
                    "a second holder: %r (held on nodes %r)" % (
                        r2, [v is not None for v in
                             cluster.get_all(lock_key(res))])
                assert r2["error"]["code"] in ("busy", "no_quorum"), r2
    finally:
        master.stop()


def test_persistent_node_replaced_by_a_master_is_quarantined(
        cluster, daemon_factory):
    """?persistent=1 skips the quarantine after a restart, since the AOF
    brings the keys back; a sync from a master replaces them anyway."""
    master = RedisNode(cluster.dir, 9, tcp_port="free")
    master.start()
    n5 = cluster.nodes[4]
    n5.turn_aof_on()  # its URI says ?persistent=1
    try:
        d = daemon_factory.start(cluster, name="replp",
                                 extra=["--quarantine-ms", "4000"])
        assert n5.uri.endswith("?persistent=1") and n5.uri in d.argv
        _sync_and_promote(n5, master)
        ok, _ = poll_until(
            lambda: _node_health(d, 4).get("quarantined") is True,
            10.0 * SLOW, 0.05)
        assert ok, (_node_health(d, 4), d.stderr_tail(30))
        # and the quarantine ends: it counts again
        ok, _ = poll_until(
            lambda: _node_health(d, 4).get("quarantined") is False and
            _node_health(d, 4).get("up") is True, 15.0 * SLOW, 0.1)
        assert ok, (_node_health(d, 4), d.stderr_tail(30))
    finally:
        master.stop()


def test_replica_is_warned_once(cluster, daemon_factory):
    """A node left a replica is named once, not at every check (each second) nor
    after the reconnect its sync causes; it costs a vote, not the lock."""
    master = RedisNode(cluster.dir, 9, tcp_port="free")
    master.start()
    n5 = cluster.nodes[4]
    try:
        d = daemon_factory.start(cluster, name="repw")
        n5.cmd("REPLICAOF", "127.0.0.1", str(master.tcp_port))
        warn = REPLICA_WARNING % master.tcp_port
        ok, _ = poll_until(lambda: warn in d.stderr_text(), 10.0 * SLOW,
                           0.1)
        assert ok, d.stderr_tail(30)
        with d.client() as c:
            assert_ok(c.call("acquire", resource=rname("repw"),
                             ttl_ms=5000))
        # a later check sees the sync: a reconnect, no new warning
        ok, _ = poll_until(lambda: "replication id changed" in
                           d.stderr_text(), 10.0 * SLOW, 0.1)
        assert ok, d.stderr_tail(30)
        ok, _ = poll_until(lambda: _node_health(d, 4)["up"] is True,
                           5.0 * SLOW, 0.05)
        assert ok, _node_health(d, 4)
        assert d.stderr_text().count(warn) == 1, d.stderr_tail(30)
    finally:
        n5.cmd("REPLICAOF", "NO", "ONE")
        master.stop()
