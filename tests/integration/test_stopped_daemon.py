"""A daemon stopped while its client runs on (SIGSTOP, a paused container):
the client hears nothing while it is stopped, another daemon grants the
lock once its TTL has passed, and the stopped daemon, once it runs again,
tells its client the lock is lost rather than going on renewing a lock
that is another's. proto/README, "A stopped daemon", says so."""

import os
import signal
import time

from rl import SLOW, assert_ok, rname


def test_stopped_daemon_says_lost_when_it_runs_again(cluster,
                                                      daemon_factory):
    a = daemon_factory.start(cluster, name="stopa")
    b = daemon_factory.start(cluster, name="stopb")
    res = rname("stopped")
    ttl = int(1000 * SLOW)
    with a.client(timeout=15.0) as ca, b.client(timeout=30.0) as cb:
        held = ca.call("acquire", resource=res, ttl_ms=ttl, renew=True)
        assert_ok(held)
        os.kill(a.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            got = cb.call("acquire", resource=res, ttl_ms=20000,
                          wait_ms=int(10000 * SLOW))
            assert_ok(got)
            # Not before the stopped daemon's lock could have ended.
            assert time.monotonic() - t0 >= held["validity_ms"] / 1000.0 * 0.5
            assert ca.events == [], ca.events
        finally:
            os.kill(a.pid, signal.SIGCONT)
        ev = ca.wait_event(timeout=10.0 * SLOW)
        assert ev.get("event") == "lost" and ev["lock"] == held["lock"], ev
        assert ca.call("locks", prefix=res)["locks"] == []
        # The other daemon's holder keeps it: nothing renewed over it.
        assert_ok(cb.call("extend", lock=got["lock"], ttl_ms=20000))
        assert_ok(cb.call("release", lock=got["lock"]))
