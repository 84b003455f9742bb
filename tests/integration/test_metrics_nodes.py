"""Per-node metrics: the restart quarantine and reconnections as a scraper
sees them (redlockd_node_quarantined, redlockd_node_reconnects_total),
and redlockd_build_info naming the daemon's version."""

from extra import metric, scrape
from rl import SLOW, poll_until

QUARANTINE_MS = 1500


def _node_label(m, name, k):
    labels = sorted(lb for (nm, lb), _ in m.items() if nm == name)
    assert len(labels) == 5, labels
    return dict(labels[k])["node"]


def test_quarantine_gauge_and_reconnects_per_node(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="mq", extra=[
        "--quarantine-ms", str(QUARANTINE_MS)])
    m = scrape(d.socket)
    info = [(lb, v) for (nm, lb), v in m.items()
            if nm == "redlockd_build_info"]
    assert len(info) == 1 and info[0][1] == 1, info
    assert dict(info[0][0])["version"], info
    nodes = [_node_label(m, "redlockd_node_up", k) for k in range(5)]
    for n in nodes:
        assert metric(m, "redlockd_node_quarantined", node=n) == 0, m
        assert metric(m, "redlockd_node_reconnects_total", node=n) == 0, m
    # A non-persistent node restarts empty (new run_id): quarantined.
    victim = cluster.nodes[0]
    victim.kill9()
    victim.restart()

    def quarantined():
        mm = scrape(d.socket)
        return [metric(mm, "redlockd_node_quarantined", node=n)
                for n in nodes] == [1, 0, 0, 0, 0] and mm
    mm, _ = poll_until(quarantined, 10.0 * SLOW, 0.02)
    assert mm, scrape(d.socket)
    assert metric(mm, "redlockd_node_reconnects_total", node=nodes[0]) == 1
    assert [metric(mm, "redlockd_node_reconnects_total", node=n)
            for n in nodes[1:]] == [0, 0, 0, 0]
    # ... until the quarantine ends.
    back, _ = poll_until(
        lambda: metric(scrape(d.socket), "redlockd_node_quarantined",
                       node=nodes[0]) == 0,
        (QUARANTINE_MS / 1000.0 + 10.0) * SLOW, 0.05)
    assert back, scrape(d.socket)
