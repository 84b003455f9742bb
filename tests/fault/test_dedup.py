"""test_dedup.py: the bounded pytest suite over dedup.py (about a minute).

    /usr/bin/python3 -m pytest tests/fault/test_dedup.py -q

Update ids offered to several workers, acquired, handled and completed
under the nemeses where the done marks are at stake (node restarts and
flushes, daemon kills, a mix), then the dedup checker: no handling after
one whose complete answered ok, no overlap, fences increasing per id, no
win after done where a complete answered ok. The checker itself is shown
failing twice: on a doubled handling fed to it, and on the scripted run
with --unsafe-no-quarantine --unsafe-no-fence-repair. Seeds are random; a
failure names the seed: rerun it with
    /usr/bin/python3 tests/fault/dedup.py --only NAME --seed SEED -v
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dedup  # noqa: E402
import rl  # noqa: E402  (put on sys.path by nemesis)


def _run(name, **kw):
    if not rl.BIN.exists():
        pytest.skip("redlockd not built at %s" % rl.BIN)
    r = dedup.SCRIPTED[name](cycles=1) if name in dedup.SCRIPTED else \
        dedup.run_dedup(name, **kw)
    dedup.print_row(r)
    return r


@pytest.mark.parametrize("name", ["restart", "flush", "daemon-kill",
                                  "mixed"])
def test_dedup_nemesis(name):
    r = _run(name)
    bad = dedup.dedup_verdict(r)
    assert not bad, "%s seed %s: %s" % (name, r["seed"], "; ".join(bad))
    assert r["handlings"] > 0 and r["completes"].get("ok")


def test_dedup_safe_mark_repaired():
    r = _run("dedup-safe")
    assert not dedup.dedup_verdict(r)
    assert r["completes"] == {"ok": 1}, r["completes"]


def test_dedup_rolling_restart_keeps_marks():
    """Every node restarted in turn, 0.4 s apart, within one quarantine:
    the update stays done (no repeat excused by the best-effort repair)."""
    r = _run("dedup-rolling")
    assert not dedup.dedup_verdict(r)
    assert r["completes"] == {"ok": 1}, r["completes"]
    assert r["dedup_codes"].get("done"), r["dedup_codes"]


def test_dedup_unsafe_is_caught():
    r = _run("dedup-unsafe")
    assert not dedup.dedup_verdict(r, expect_violations=True)
    assert r["again"] >= 1


def _h(uid, start, end, fence, complete="ok", sent=None):
    return {"id": uid, "resource": "update:%d" % uid, "start": start,
            "end": end, "sent": start if sent is None else sent,
            "fence": fence, "validity_ms": 1000, "daemon": "d1",
            "complete": complete, "c_recv": end + 0.001}


def test_checker_catches_a_doubled_handling():
    first = _h(7, 1.0, 1.1, 5)
    again = _h(7, 1.5, 1.6, 6)
    out = dedup.check_dedup([first, again], [], 60000, [])
    assert out["again"] == [(first, again)]
    done = {"id": 7, "sent": 1.2, "recv": 1.21, "code": "done",
            "daemon": "d2"}
    out = dedup.check_dedup([first, again], [done], 60000, [])
    assert out["done_won"] == [(done, again)]
    # The same repeat after a complete that answered no_quorum: no promise.
    first["complete"] = "no_quorum"
    out = dedup.check_dedup([first, again], [done], 60000, [])
    assert not out["again"] and not out["done_won"]
    assert out["done_won_free"] == [(done, again)]
    # Past keep_ms the mark has expired: a new handling is the contract.
    first["complete"] = "ok"
    assert not dedup.check_dedup([first, again], [], 100, [])["again"]
