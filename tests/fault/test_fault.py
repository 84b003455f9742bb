"""test_fault.py: the bounded fault-injection suite (pytest wrapper of
nemesis.py). `scripts/test --suite fault` runs

    /usr/bin/python3 -m pytest tests/fault -q

Each nemesis runs for a few seconds against five real redis-servers and two
daemons, then the checker asserts: no overlapping holds, strictly increasing
fences per resource, no key left under the prefix, flat daemon RSS, exit 0 on
SIGTERM. The sem-* ones run the semaphore workload (README "Semaphores"):
also never more holders than permits, and the lock checks per permit. The
scripted scenarios pin single behaviours down. Seeds are random;
a failure message names the seed: rerun it with
    /usr/bin/python3 tests/fault/nemesis.py --only NAME --seed SEED -v
FAULT_JSON=path appends every result to that file (JSON lines).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nemesis  # noqa: E402
import rl  # noqa: E402  (put on sys.path by nemesis)


def _record(r):
    path = os.environ.get("FAULT_JSON")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(r, default=str) + "\n")


def _explain(r):
    lines = []
    for a, b in r.get("overlap_examples", []):
        lines.append("overlap: %s / %s" % (a, b))
    for a, b in r.get("fence_examples", []):
        lines.append("fence: %s then %s" % (a, b))
    for g in r.get("over_n_examples", []):
        lines.append("more than %d holders: %s" % (r["permits"],
                                                   " & ".join(g)))
    lines += ["event %7.3f %s" % e for e in r.get("events", [])[-40:]]
    for name, tail in r.get("daemon_stderr", {}).items():
        lines.append("--- %s stderr tail ---\n%s" % (name, tail))
    return "\n".join(lines)


def _show(r):
    nemesis.print_table([r])
    nemesis.print_details(r)
    _record(r)


def _run(name):
    if not rl.BIN.exists():
        pytest.skip("redlockd not built at %s" % rl.BIN)
    r = nemesis.run(name)
    _show(r)
    if r.get("skipped"):
        pytest.skip(r["skipped"])
    return r


# -------------------------------------------------------------------------
# the tools themselves


def _proxy_for(node_dir):
    """A redis-server on TCP and a faultproxy in front of it."""
    port = rl.free_tcp_port()

    class W:  # the little a Node and Proxy need of a World
        dir = Path(node_dir)
    nd = nemesis.Node(W, 1, port)
    nd.start()
    px = nemesis.Proxy(W, nd).start()
    return nd, px


def _ping(port, timeout=1.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64)


def test_faultproxy_modes():
    d = tempfile.mkdtemp(prefix="rlfault-proxy-")
    nd = px = None
    try:
        nd, px = _proxy_for(d)
        assert _ping(px.port) == b"+PONG\r\n"

        px.cmd("delay 100")
        t = time.monotonic()
        assert _ping(px.port) == b"+PONG\r\n"
        assert time.monotonic() - t >= 0.19  # 100 ms each way

        px.cmd("loss 1.0 50")  # every chunk stalls; nothing is lost
        t = time.monotonic()
        with socket.create_connection(("127.0.0.1", px.port), 2) as s:
            s.sendall(b"SET k v\r\nGET k\r\n")
            buf = b""
            for _ in range(20):
                buf += s.recv(64)
                if buf.count(b"\r\n") >= 3:
                    break
        assert buf == b"+OK\r\n$1\r\nv\r\n"
        assert time.monotonic() - t >= 0.09

        px.cmd("pass")
        held = socket.create_connection(("127.0.0.1", px.port), 2)
        held.sendall(b"PING\r\n")
        assert held.recv(64) == b"+PONG\r\n"
        px.cmd("drop")  # a black hole: accepted, never answered
        held.settimeout(0.4)
        held.sendall(b"PING\r\n")
        with pytest.raises(socket.timeout):
            held.recv(64)
        with socket.create_connection(("127.0.0.1", px.port), 2) as s:
            s.settimeout(0.4)
            s.sendall(b"PING\r\n")
            with pytest.raises(socket.timeout):
                s.recv(64)
        px.cmd("pass")  # the black-holed connection stays dead
        with pytest.raises(socket.timeout):
            held.recv(64)
        held.close()
        assert _ping(px.port) == b"+PONG\r\n"

        held = socket.create_connection(("127.0.0.1", px.port), 2)
        px.cmd("reset")
        held.settimeout(2)
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(5):
                held.sendall(b"PING\r\n")
                if not held.recv(64):
                    raise AssertionError("FIN, not RST")
                time.sleep(0.05)
        held.close()

        px.cmd("partition")
        with pytest.raises(ConnectionRefusedError):
            _ping(px.port)
        px.cmd("pass")
        assert rl.poll_until(lambda: _ping(px.port) == b"+PONG\r\n", 5)[0]
        assert "mode=pass" in px.cmd("status")
    finally:
        if px is not None:
            px.stop()
        if nd is not None:
            nd.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_clockshift_on_redis_server():
    """Debian's redis-server (jemalloc) starts and serves under the shim, and
    a jump forward expires its keys early; MONOTONIC is untouched."""
    d = tempfile.mkdtemp(prefix="rlfault-clock-")

    class W:
        dir = Path(d)
    nd = nemesis.Node(W, 1, rl.free_tcp_port(), shim=True)
    try:
        nd.set_clock(0)
        for _ in range(3):  # start-up under the shim, repeatedly
            nd.start()
            nd.kill9()
        nd.start()
        t0 = int(nd.cmd("TIME")[0])
        nd.cmd("SET", "k", "v", "PX", 5000)
        assert 0 < nd.cmd("PTTL", "k") <= 5000
        nd.set_clock(6000)
        time.sleep(0.05)
        assert nd.cmd("GET", "k") is None
        assert int(nd.cmd("TIME")[0]) - t0 >= 5
        nd.set_clock(0)
        time.sleep(0.05)
        assert abs(int(nd.cmd("TIME")[0]) - int(time.time())) <= 1
        # The shim under load: many clients, clock flipping.
        if shutil.which("redis-benchmark") is None:
            return
        p = subprocess.run(["redis-benchmark", "-s", str(nd.path), "-n",
                            "20000", "-c", "8", "-q", "-t", "set,get"],
                           capture_output=True, timeout=60)
        assert p.returncode == 0
        assert rl.resp_ping(nd.path)
    finally:
        nd.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_clockshift_monotonic_untouched():
    d = tempfile.mkdtemp(prefix="rlfault-clock-")
    try:
        f = Path(d) / "clock"
        f.write_text("3600000\n")
        env = dict(os.environ, LD_PRELOAD=str(nemesis.tool("clockshift")),
                   CLOCKSHIFT_FILE=str(f))
        code = ("import time;print(time.time(), time.monotonic(), "
                "time.clock_gettime(time.CLOCK_BOOTTIME))")
        before = (time.time(), time.monotonic())
        out = subprocess.run([sys.executable, "-c", code], env=env,
                             capture_output=True, text=True, timeout=30)
        wall, mono, _ = map(float, out.stdout.split())
        assert 3590 < wall - before[0] < 3610
        assert 0 <= mono - before[1] < 10
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -------------------------------------------------------------------------
# nemeses


@pytest.mark.parametrize("name", list(nemesis.NEMESES))
def test_nemesis(name):
    r = _run(name)
    bad = nemesis.verdict(r)
    assert not bad, "%s (seed %s): %s\n%s" % (name, r.get("seed"),
                                              "; ".join(bad), _explain(r))
    assert r["holds"] > 0, "no hold at all under %s" % name


# The semaphore workload under the nemeses that touch what a permit rests
# on (~60 s with the demonstration below); nemesis.py runs every sem-*.
SEM_IN_CI = ("sem-restart", "sem-flush", "sem-proxy-partition", "sem-mixed")


@pytest.mark.parametrize("name", SEM_IN_CI)
def test_semaphore_nemesis(name):
    """Never more holders than permits, never two of one permit, fences
    increasing per permit, no slot key left."""
    r = _run(name)
    bad = nemesis.verdict(r)
    assert not bad, "%s (seed %s): %s\n%s" % (name, r.get("seed"),
                                              "; ".join(bad), _explain(r))
    # Nothing was tested unless some semaphore was full at some point.
    assert max(r["most_at_once"].values()) == r["permits"], _explain(r)


def test_semaphore_quarantine_unsafe_shows_violations():
    """quarantine-unsafe with A holding every permit: B's permit is a holder
    too many, overlaps the A of its slot, with a lower fence. The checker
    must see all three."""
    r = _run("sem-quarantine-unsafe")
    bad = nemesis.verdict(r, expect_violations=True)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["b_won_during_a"] > 0, _explain(r)
    assert r["over_n"] > 0 and r["overlaps"] > 0, _explain(r)
    assert r["fence_violations"] > 0, _explain(r)


def test_fence_answer_is_the_written_back_value():
    r = _run("fence-late-answer")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)


def test_release_reaches_every_node_up():
    r = _run("release-reach")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)


def test_lost_lock_stays_given_up():
    r = _run("lost-complete")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["holds"] >= 2 * r["cycles"], _explain(r)


def test_refused_mark_never_lets_a_second_holder_in():
    """A node full while the daemon first connects comes up with no
    data-set mark. Once it takes writes it must not count until its mark
    stands, and once it has voted for A, a FLUSHALL of it must quarantine
    it: B, asking 2.5 s after the flush, is refused while A holds, and
    gets the lock once A released."""
    r = _run("refused-mark")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["b_won_during_a"] == 0, _explain(r)
    assert len(r["b_refused"]) == r["cycles"], _explain(r)
    assert all(len(codes) == 10 for codes in r["b_refused"]), _explain(r)
    assert r["holds"] == 2 * r["cycles"], _explain(r)
    # while full, health said why the node did not count
    assert all("OOM" in (why or "") for why in r["not_counted"]), \
        _explain(r)


def test_restart_quarantine_safe():
    """Defaults (quarantine + fence repair): no overlap, no inversion, and B
    still gets the lock once A's validity and the quarantine are over."""
    r = _run("quarantine-safe")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["b_won_during_a"] == 0
    assert r["holds"] >= r["cycles"] * 7, _explain(r)


def test_restart_quarantine_unsafe_shows_violations():
    """The same scenario with --unsafe-no-quarantine
    --unsafe-no-fence-repair: the violations the defaults prevent."""
    r = _run("quarantine-unsafe")
    bad = nemesis.verdict(r, expect_violations=True)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["overlaps"] > 0 and r["b_won_during_a"] > 0, _explain(r)
    assert r["fence_violations"] > 0, _explain(r)


def test_clock_jump_on_a_bare_quorum_is_fenced():
    """Redlock's own limit: one node's clock jumping forward under a lock
    held by a bare quorum lets a second holder in (the checker must see
    it), and the fence still orders the two."""
    r = _run("clock-bare-quorum")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["overlaps_clock"] > 0 and r["fence_violations"] == 0


def test_fresh_daemon_after_node_restart():
    """A daemon started after two nodes of a lock's three restarted empty,
    over 3 s after the others started: it tells the two by their start
    times and quarantines them, so B waits out A's validity and gets a
    fence above A's. (Restarts within 3 s of the cluster's own start are
    the documented limit; nemesis.py's gap-fresh-daemon shows it.)"""
    r = _run("fresh-daemon")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["b_won_during_a"] == 0, _explain(r)
    assert len(r["fresh_seen"]) == r["cycles"], _explain(r)
    for cyc, (seen, killed) in enumerate(zip(r["fresh_seen"], r["killed"])):
        assert set(killed) <= set(seen), (
            "cycle %d: the fresh daemon quarantined %r, restarted were %r"
            "\n%s" % (cyc, seen, killed, _explain(r)))
    assert r["holds"] >= r["cycles"] * 7, _explain(r)


def test_fresh_daemon_slow_old_nodes():
    """Three of five nodes restart empty under A's lock, and the two older
    nodes that still hold it are paused while a fresh daemon B starts: the
    young three are a quorum by themselves, but B must refuse until the
    older nodes' first handshakes show them restarted, then quarantine
    them, and grant only once A's validity is over, with a higher fence."""
    r = _run("fresh-daemon-slow-old")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["b_won_during_a"] == 0, _explain(r)
    assert r["paused_granted"] == [0] * r["cycles"], _explain(r)
    assert all(n > 0 for n in r["paused_refused"]), _explain(r)
    for cyc, (seen, young) in enumerate(zip(r["fresh_seen"], r["killed"])):
        assert set(young) <= set(seen), (
            "cycle %d: the fresh daemon quarantined %r, restarted were %r"
            "\n%s" % (cyc, seen, young, _explain(r)))
    assert r["holds"] == r["cycles"] * 4, _explain(r)


def test_fresh_daemon_uptime_rounding():
    """The same with the restart late in a wall-clock second: INFO uptime
    reads 1 a tenth of a second later, and a quarantine dated from now -
    uptime ended up to a second before A's validity (granted through the
    restarted nodes while A held). Dated from the latest start the uptime
    allows, it outlasts A's validity."""
    r = _run("fresh-daemon-uptime")
    bad = nemesis.verdict(r)
    assert not bad, "; ".join(bad) + "\n" + _explain(r)
    assert r["b_won_during_a"] == 0, _explain(r)
    assert r["paused_granted"] == [0] * r["cycles"], _explain(r)
    for cyc, (seen, young) in enumerate(zip(r["fresh_seen"], r["killed"])):
        assert set(young) <= set(seen), (
            "cycle %d: the fresh daemon quarantined %r, restarted were %r"
            "\n%s" % (cyc, seen, young, _explain(r)))
