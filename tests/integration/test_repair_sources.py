"""The restart repair when a source node itself restarts while the repair
is reading it, against real redis-servers.

A repair reads a source's done marks one SCAN step at a time. If the source
restarts between two steps, the next step reaches the fresh, empty server
with the old server's cursor; SCAN then ends at once, and the source must
not count as read in full: the marks after that cursor were never seen.
"""

import time

from rl import PREFIX, SLOW, assert_error, lock_key, poll_until, rname
from test_restart_repair import (_complete_on_first_three, _health_nodes,
                                 _restart_seen, _wait_log,
                                 _wait_quarantine_over)


def test_source_restarted_mid_scan_is_not_a_full_read(cluster,
                                                      daemon_factory):
    """Marks on exactly nodes 1-3; node 2 also holds 20000 other marks, so
    its SCAN takes many steps and each step copies to node 1. Node 3 is
    down (paused: it kept its data). Node 1 restarts; its repair reads
    nodes 2, 4 and 5 (all three needed). Node 1 is stalled so that node
    2's repair sits between two steps, node 2 restarts empty meanwhile,
    then node 1 answers again. Node 2's remaining steps reach the empty
    server: node 2 was not read in full, and with node 2 lost and node 3
    down no sound read exists, so node 1 stays quarantined until node 3
    is back and ends up with the mark; the completed resource answers
    done."""
    d = daemon_factory.start(cluster, name="rs",
                             extra=["--quarantine-ms", "300",
                                    "--node-timeout-ms", "2000"])
    ok, _ = poll_until(lambda: not any(n.get("quarantined") for n in
                                       _health_nodes(d)), 40.0 * SLOW, 0.1)
    assert ok, _health_nodes(d)
    res = rname("s14")
    _, mark = _complete_on_first_three(cluster, d, res, 600000)
    fill = ("for i = 1, 20000 do redis.call('SET', ARGV[1] .. i, "
            "'done:' .. string.rep('f', 26) .. i, 'PX', 600000) end "
            "return 1")
    assert cluster.nodes[1].cmd("EVAL", fill, 0, PREFIX + "lock:fill-",
                                timeout=20.0) == 1

    n3 = cluster.nodes[2]
    n3.pause()
    # down once its PINGs go unanswered for the stall limit (8 node
    # timeouts)
    ok, _ = poll_until(lambda: _health_nodes(d)[2]["up"] is False,
                       40.0 * SLOW, 0.1)
    assert ok, "node 3 never seen down: %r" % _health_nodes(d)

    n1 = cluster.nodes[0]
    _restart_seen(cluster, d, [0])
    n1.pause()  # the repair's copies to node 1 wait; no answer is lost
    time.sleep(0.6)  # the quarantine (300 ms) ends, the repair starts
    _restart_seen(cluster, d, [1])
    n1.resume()

    # Either node 1 is still quarantined (no sound read: node 2 lost,
    # node 3 down), or its repair must have copied the mark.
    time.sleep(2.0)
    nodes = _health_nodes(d)
    print("with node 3 down: nodes %r; node 1's value %r" % (
        [(n["up"], n["quarantined"]) for n in nodes],
        n1.cmd("GET", lock_key(res))))
    if nodes[0]["quarantined"] is False:
        assert n1.cmd("GET", lock_key(res)) == mark, (
            "node 1 repaired without the mark while node 3 was down:\n%s"
            % d.stderr_tail(30))

    n3.resume()
    _wait_quarantine_over(d, 0, 30.0 * SLOW)
    _wait_quarantine_over(d, 1, 30.0 * SLOW)
    vals = cluster.get_all(lock_key(res))
    print("after the repairs: %r" % vals)
    assert vals[:3] == [mark] * 3, (vals, d.stderr_tail(30))
    with d.client() as c:
        assert_error(c.call("acquire", resource=res, ttl_ms=5000), "done")
    _wait_log(d, r"node 1: repaired from 3 node\(s\)", 5.0)


def test_failed_counter_read_is_logged(cluster, daemon_factory):
    """A source whose fence counter cannot be read drops out of the repair;
    when the others suffice the repair goes on, and the failed read was
    not logged at all. Node 5's counter is made a list (GET answers
    WRONGTYPE); node 1 restarts and is repaired from nodes 2 to 4."""
    d = daemon_factory.start(cluster, name="cr",
                             extra=["--quarantine-ms", "300"])
    ok, _ = poll_until(lambda: not any(n.get("quarantined") for n in
                                       _health_nodes(d)), 40.0 * SLOW, 0.1)
    assert ok, _health_nodes(d)
    n5 = cluster.nodes[4]
    n5.cmd("DEL", PREFIX + "fence")
    n5.cmd("RPUSH", PREFIX + "fence", "not a counter")
    n2 = cluster.nodes[1]
    try:
        _restart_seen(cluster, d, [0])
        # Node 2 answers only after node 5's error has come: the repair
        # is still going on when it does.
        n2.pause()
        time.sleep(0.8)
        n2.resume()
        _wait_quarantine_over(d, 0, 30.0 * SLOW)
        _wait_log(d, r"node 5: fence counter read: WRONGTYPE", 5.0)
    finally:
        n2.resume()
        n5.cmd("DEL", PREFIX + "fence")
