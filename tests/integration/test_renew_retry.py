"""A renewal that fails is tried again at its own time, never in a burst.

With a majority paused the stall rule drops those nodes, and each renewal
of a renewing lock fails at once on the nodes that are left. The retries
come closer together as the give-up nears, but each waits for the time
redlock_renew_failed gives it: none may go out early with other renewals,
or the last stretch before the lost event becomes a burst of thousands of
renewals, each a command to every sound node."""

from extra import metric, scrape
from rl import SLOW, assert_ok, rname


def _commands(node):
    info = node.cmd("INFO", "stats").decode()
    for line in info.splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    raise AssertionError("no total_commands_processed in INFO")


def test_retries_until_lost_stay_few(cluster, daemon):
    ttl = 6000
    with daemon.client(timeout=10.0 * SLOW) as c:
        r = c.call("acquire", resource=rname("retry"), ttl_ms=ttl,
                   renew=True)
        assert_ok(r, "renewing acquire")
        sound = cluster.nodes[3:]
        before = [_commands(nd) for nd in sound]
        failed0 = metric(scrape(daemon.socket), "redlockd_renewals_total",
                         result="failed") or 0
        try:
            for nd in cluster.nodes[:3]:
                nd.pause()
            ev = c.wait_event(timeout=ttl / 1000.0 + 15.0 * SLOW)
            assert ev.get("event") == "lost", ev
            assert ev.get("lock") == r["lock"], ev
            failed = (metric(scrape(daemon.socket), "redlockd_renewals_total",
                             result="failed") or 0) - failed0
            sent = [_commands(nd) - b for nd, b in zip(sound, before)]
        finally:
            cluster.resume_all()
    # A retry at most every ttl/30 (200 ms) and the last stretch at least
    # 1 ms apart make a few dozen; the burst made tens of thousands. The
    # sound nodes also answer the daemon's pings and the scrape's nothing.
    assert failed <= 300, "%d renewals failed before the lost event" % failed
    assert max(sent) <= 1000, "the sound nodes got %r commands" % sent
