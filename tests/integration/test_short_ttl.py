"""A round whose TTL is shorter than the node timeout stops waiting as soon
as no validity could be left: a short lock fails fast instead of waiting
out the (longer) node timeout, says why, and leaves nothing behind."""

import time

from rl import assert_ok, err_code, lock_key, poll_until, rname


def test_short_ttl_fails_fast_with_a_majority_paused(cluster, daemon):
    res = rname("short")
    paused = cluster.nodes[1:4]
    for nd in paused:
        nd.pause()
    try:
        with daemon.client(timeout=10.0) as c:
            t0 = time.monotonic()
            r = c.call("acquire", resource=res, ttl_ms=40)
            took = time.monotonic() - t0
            print("ttl 40 ms, 3 of 5 paused: answered in %.1f ms: %r" %
                  (took * 1000, r))
            assert err_code(r) == "no_quorum", r
            assert "validity" in r["error"]["message"], r
            # The node timeout is 250 ms (500 under sanitizers); the round
            # ends when its ~37 ms of validity are gone.
            assert took < 0.2, took
    finally:
        for nd in paused:
            nd.resume()
    # Whatever the paused nodes applied is rolled back (or expired).
    _, secs = poll_until(lambda: cluster.get_all(lock_key(res)) == [None] * 5,
                         5.0, what="no key left")
    assert cluster.get_all(lock_key(res)) == [None] * 5


def test_short_ttl_still_succeeds_when_nodes_answer(cluster, daemon):
    with daemon.client() as c:
        r = c.call("acquire", resource=rname("short-ok"), ttl_ms=50)
        assert_ok(r)
        assert 0 < r["validity_ms"] <= 50, r
