"""The bounded soak for CI: mixed load, renewals, reconnects; the daemon's
RSS must stay flat and it must exit cleanly. Longer: SOAK_SECONDS=600."""

import os

import soak


def test_soak_rss_flat():
    seconds = int(os.environ.get("SOAK_SECONDS", "90"))
    r = soak.run(seconds, max_growth_kb=4096)
    assert len(r["samples"]) >= seconds - 2, r["samples"]
    assert r["exit_code"] == 0, r
    assert not r["unexpected"], r["unexpected"]
    # The load really ran: every kind of work happened.
    c = r["counts"]
    for key in ("acquire:ok", "release:ok", "renew-acquire:ok",
                "wait-acquire:ok", "http-acquire:ok", "http-release:ok",
                "churn", "node-restarts", "node-pauses"):
        assert c.get(key, 0) > 0, (key, c)
    assert r["growth_kb"] <= 4096, r["samples"]
