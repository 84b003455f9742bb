"""The bench counts the Redis work of a lock cycle right.

Not a speed test: nothing here looks at cycles/s. rlbench (built with the
daemon, build/tests/bench/rlbench) runs short, bounded loads against real
redis-servers, and its accounting of the nodes' INFO commandstats must give
the exact command count of each cycle; report.py must keep pinned sections.
"""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from rl import (BIN, REPO, Client, lock_key, popen, pytest, reap, rname,
                wait_for)

RLBENCH = Path(os.environ.get("RLBENCH_BIN",
                              str(BIN.parents[1] / "tests" / "bench" /
                                  "rlbench")))
REPORT = REPO / "tests" / "bench" / "report.py"

pytestmark = pytest.mark.skipif(not RLBENCH.exists(),
                                reason="no rlbench at %s" % RLBENCH)


def _result(out):
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, out
    return dict(t.split("=", 1) for t in lines[0].split()[1:] if "=" in t)


def _rlbench(*args):
    p = subprocess.run([str(RLBENCH), "--mode", "cycle", "--duration", "0.5",
                        "--warmup", "0.2", "--drain", "5"] + list(args),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return _result(p.stdout)


def _mix(r):
    return {k: float(v) for k, _, v in
            (part.rpartition(":") for part in r["cmd_mix"].split(","))}


def _paths(cluster):
    return ",".join(str(nd.path) for nd in cluster.nodes)


@pytest.mark.parametrize("conc", [1, 16])
def test_minimal_limit_is_set_nx_then_compare_and_delete(cluster, conc):
    """Per cycle, each of the five nodes runs SET NX PX, then EVALSHA with
    its GET and DEL inside: 20 commands, counted to the last one even though
    each round is answered at quorum (the slow nodes' backlog is waited
    for)."""
    r = _rlbench("--inproc", "--redis", _paths(cluster), "--concurrency",
                 str(conc))
    assert r["impl"] == "limit", r
    assert r["errors"] == "0", r
    assert r["settled"] == "1", r
    assert int(r["work_cycles"]) >= int(r["cycles"]) > 0, r
    assert float(r["cmds_per_cycle"]) == pytest.approx(20.0, abs=0.005), r
    assert _mix(r) == {"set": 5.0, "evalsha": 5.0, "get": 5.0,
                       "del": 5.0}, r
    assert float(r["cpu_us_per_cycle"]) > 0, r
    assert float(r["cmd_us_per_cycle"]) > 0, r
    # Every lock was released: nothing is left on any node.
    for nd in cluster.nodes:
        assert nd.cmd("DBSIZE") == 0


def test_scripts_limit_runs_the_daemons_scripts(cluster):
    """The daemon's acquire script (GET, SET) and release script (GET, DEL,
    PUBLISH) behind one EVALSHA each: 35 commands per cycle."""
    r = _rlbench("--inproc", "--limit", "scripts", "--redis",
                 _paths(cluster), "--concurrency", "8")
    assert r["impl"] == "limit-scripts", r
    assert r["errors"] == "0" and r["settled"] == "1", r
    assert _mix(r) == {"evalsha": 10.0, "get": 10.0, "set": 5.0,
                       "del": 5.0, "publish": 5.0}, r


def test_daemon_run_reports_redis_work(cluster, daemon):
    """The daemon's row carries the same accounting; its numbers are the
    daemon's business, but every cycle costs each node at least one command
    to acquire and one to release."""
    r = _rlbench("--socket", str(daemon.socket), "--redis", _paths(cluster),
                 "--concurrency", "1")
    assert r["impl"] == "daemon" and r["errors"] == "0", r
    assert r["settled"] == "1" and r["stat_nodes"] == "5", r
    assert float(r["cmds_per_cycle"]) >= 10.0, r
    # A release announces on n - quorum + 1 nodes, not on all five.
    assert _mix(r).get("publish") == pytest.approx(3.0, abs=0.005), r


def test_no_redis_stats(cluster):
    r = _rlbench("--inproc", "--no-redis-stats", "--redis", _paths(cluster),
                 "--concurrency", "1")
    assert r["stat_nodes"] == "0" and r["cmds_per_cycle"] == "-1.000", r


def _line(impl, conc, tag, cps, cmds, cpu, daemon_cpu=-1):
    return ("RESULT mode=cycle impl=%s conc=%d secs=5 cycles=1 cps=%d "
            "p50_us=100 p99_us=200 p999_us=300 cyc_p50_us=1 cyc_p99_us=2 "
            "cyc_p999_us=3 errors=0 errs=- daemon_cpu=%.1f "
            "cmds_per_cycle=%.3f cmd_us_per_cycle=1.0 cpu_us_per_cycle=%.2f "
            "cmd_mix=set:5.00,get:5.00 tag=%s\n" % (impl, conc, cps,
                                                    daemon_cpu, cmds, cpu,
                                                    tag))


def _report(out, md, *extra):
    p = subprocess.run([sys.executable, str(REPORT), "--out-dir", str(out),
                        "--md", str(md), "--png", str(out / "x.png")] +
                       list(extra), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return md.read_text()


# ---- the floor sidecar (rlbench --serve) ----------------------------------


@pytest.fixture
def floor(cluster, tmp_path):
    """rlbench --serve on the cluster's five nodes; yields its socket path,
    and checks on the way out that SIGTERM ends it cleanly (exit 0, socket
    unlinked)."""
    sock = tmp_path / "floor.sock"
    p = popen([str(RLBENCH), "--serve", str(sock), "--redis",
               _paths(cluster), "--serve-max-s", "120"],
              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        r = subprocess.run([str(RLBENCH), "--socket", str(sock),
                            "--wait-ready", "10"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, (r.stderr, p.poll())
        yield sock
        p.terminate()
        _, err = p.communicate(timeout=10)
        assert p.returncode == 0, err
        assert not sock.exists()
    finally:
        reap(p)


@pytest.mark.parametrize("conns", [None, 2])
def test_floor_serves_the_cycle(cluster, floor, conns):
    """rlbench's cycle mode drives the floor exactly as it drives the
    daemon (one connection per client, or shared and pipelined), without
    an error, and every cycle costs the minimal limit's 20 commands: the
    floor runs that engine, not a copy of it."""
    extra = ["--conns", str(conns)] if conns else []
    p = subprocess.run([str(RLBENCH), "--socket", str(floor), "--redis",
                        _paths(cluster), "--mode", "cycle", "--concurrency",
                        "8", "--duration", "1", "--warmup", "0.2",
                        "--drain", "5", "--impl", "floor"] + extra,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    r = _result(p.stdout)
    assert r["impl"] == "floor" and r["conns"] == str(conns or 8), r
    assert r["errors"] == "0", r
    assert int(r["cycles"]) > 0, r
    assert r["settled"] == "1", r
    assert _mix(r) == {"set": 5.0, "evalsha": 5.0, "get": 5.0,
                       "del": 5.0}, r
    for nd in cluster.nodes:
        assert nd.cmd("DBSIZE") == 0


def test_floor_lock_is_on_a_majority(cluster, floor):
    """A lock the floor answers is on a majority of the nodes under the
    token it gave, with the ttl asked; a second acquire is busy; the
    release takes it off every node; the token is then not held."""
    res = rname("floor")
    key = lock_key(res)
    with Client(floor) as c:
        a = c.request({"id": 7, "op": "acquire", "resource": res,
                       "ttl_ms": 20000})
        assert a["id"] == 7 and a["ok"] is True, a
        tok = a["lock"]
        assert len(tok) == 32 and int(tok, 16) >= 0, a
        assert a["resource"] == res, a
        assert 0 < a["validity_ms"] <= 20000, a
        held = [v for v in cluster.get_all(key) if v == tok.encode()]
        assert len(held) >= 3, cluster.get_all(key)
        # The two slowest nodes answer soon after the quorum did.
        wait_for(lambda: cluster.get_all(key) == [tok.encode()] * 5, 5,
                 "the key on all five nodes")
        assert all(10000 < t <= 20000 for t in cluster.pttl_all(key))

        b = c.request({"id": "s", "op": "acquire", "resource": res,
                       "ttl_ms": 20000})
        assert b["id"] == "s" and b["ok"] is False, b
        assert b["error"]["code"] == "busy", b
        assert cluster.get_all(key) == [tok.encode()] * 5

        r = c.request({"id": 8, "op": "release", "lock": tok})
        assert r == {"id": 8, "ok": True}, r
        assert sum(v is None for v in cluster.get_all(key)) >= 3
        wait_for(lambda: cluster.get_all(key) == [None] * 5, 5,
                 "the key gone from all five nodes")
        again = c.request({"id": 9, "op": "release", "lock": tok})
        assert again["error"]["code"] == "not_held", again


def test_floor_refuses_what_it_does_not_do(floor):
    """The floor serves acquire, release, health and ping; anything else
    (another op, a wait, a fence) is a bad_request, never silently done
    differently."""
    with Client(floor) as c:
        for req in ({"op": "extend", "lock": "0" * 32},
                    {"op": "acquire", "resource": "x", "wait_ms": 100},
                    {"op": "acquire", "resource": "x", "fence": True},
                    {"op": "release", "lock": "short"}):
            r = c.request(req)
            assert r["ok"] is False, (req, r)
            assert r["error"]["code"] == "bad_request", (req, r)
        assert c.request({"op": "health"})["ok"] is True


def test_floor_is_bounded_and_owns_its_socket(cluster, floor, tmp_path):
    """A second floor on a live floor's socket refuses to start; one on a
    stale socket file takes it over; --serve-max-s ends it by itself, its
    socket unlinked."""
    p = subprocess.run([str(RLBENCH), "--serve", str(floor), "--redis",
                        _paths(cluster), "--serve-max-s", "5"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "in use by a live server" in p.stderr, p
    assert floor.exists()

    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # the file stays, nobody listens
    t0 = time.monotonic()
    p = subprocess.run([str(RLBENCH), "--serve", str(stale), "--redis",
                        _paths(cluster), "--serve-max-s", "0.5"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 20
    assert not stale.exists()


def test_serve_needs_redis(tmp_path):
    sock = tmp_path / "floor.sock"
    p = subprocess.run([str(RLBENCH), "--serve", str(sock)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "--serve needs --redis" in p.stderr, p.stderr
    assert not sock.exists()


def _out_dir(tmp_path, machine="CPU(s): 2\n"):
    """A run's out dir for report.py, without results yet."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "commit-compare.txt").write_text(
        "abc1234 2026-12-01T00:00:00Z 98c0982\n")
    (out / "machine.txt").write_text(machine)
    return out


def test_report_pins_sections_and_keeps_them(tmp_path):
    """--pin adds the Redis-work tables under the current-measurements
    heading and changes nothing else; a later --pin goes on top of it; a
    full regeneration writes the method first and keeps both under that
    heading."""
    out = _out_dir(tmp_path, machine="CPU(s): 2\nHypervisor vendor: KVM\n")
    res = "".join(_line("daemon", 64, "r%d" % k, 900, 35, 40) +
                  _line("limit", 64, "r%d" % k, 1000, 20, 20)
                  for k in (1, 2, 3))
    (out / "results.txt").write_text(res)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# redlockd benchmarks\n\nIntro.\n\n## Older\n\nkept\n")

    text = _report(out, md, "--pin", "Before")
    assert text.index("## Current measurements\n") < \
        text.index("### Before") < text.index("## Older"), text
    assert text.endswith("## Older\n\nkept\n"), text
    assert "daemon sources (`sidecar/`) as of `98c0982`" in text
    assert "| 64 | 0.90 (paired 0.90: 0.90, 0.90, 0.90) | 1.75 " in text
    assert "/" + "work/" not in text and str(tmp_path) not in text

    text = _report(out, md, "--pin", "After")
    assert text.count("## Current measurements\n") == 1, text
    assert text.index("### After") < text.index("### Before") < \
        text.index("## Older"), text
    assert text.count("<!-- pinned:begin -->") == 2

    text = _report(out, md)
    assert text.count("<!-- pinned:begin -->") == 2, text
    assert re.search(r"^## How it is measured.*^## Current measurements"
                     r".*^### After.*^### Before", text, re.S | re.M), text
    assert "## Older" not in text  # regenerated: only pinned parts stay


def test_report_pins_one_row_per_server_kind(tmp_path):
    """run.sh --server's results (impl daemon@KIND) become one pinned
    table, a row per kind in the order they ran, with the servers'
    versions from machine.txt, and the full report keeps it too."""
    out = _out_dir(tmp_path, machine="CPU(s): 2\nserver redis-6.0: Redis "
                   "server v=6.0.16 sha=0\nserver valkey-8.1: Valkey "
                   "server v=8.1.1 sha=0\n")
    (out / "commit-compare.txt").unlink()
    (out / "commit-servers.txt").write_text(
        "abc1234 2026-12-01T00:00:00Z 98c0982\n")
    res = "".join(_line("daemon@redis-6.0", 64, "r%d" % k, 900, 28.5, 130) +
                  _line("daemon@valkey-8.1", 64, "r%d" % k, 900, 18.6, 55)
                  for k in (1, 2, 3))
    (out / "results-servers.txt").write_text(res)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# redlockd benchmarks\n")
    text = _report(out, md, "--pin", "Servers")
    assert ("run.sh --server redis-6.0,valkey-8.1`, 3 repetition(s)"
            in text), text
    assert ("- **servers**: redis-6.0: Redis server v=6.0.16; valkey-8.1: "
            "Valkey server v=8.1.1") in text, text
    assert ("| 64 | `redis-6.0` | 28.50 | 130.0 | set 5.00, get 5.00 | "
            "none |") in text, text
    assert text.index("`redis-6.0`") < text.index("`valkey-8.1` | 18.60")
    assert "daemon sources (`sidecar/`) as of `98c0982`" in text
    text = _report(out, md)
    assert "### Per server kind" in text and "### Servers" in text, text


def test_report_shared_connections_row(tmp_path):
    """The daemon on shared connections gets its row and its own ratio
    columns beside the per-connection daemon's."""
    out = _out_dir(tmp_path)
    res = "".join(_line("daemon", 64, "r%d" % k, 500, 18, 30) +
                  _line("daemon-shared", 64, "r%d" % k, 950, 18, 19) +
                  _line("limit", 64, "r%d" % k, 1000, 20, 20)
                  for k in (1, 2, 3))
    (out / "results.txt").write_text(res)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# redlockd benchmarks\n")
    text = _report(out, md, "--pin", "Shared")
    assert ("| 64 | redlockd, a connection per 16 clients | 950 "
            "(950–950) |") in text, text
    assert ("| daemon ≥ 0.9 × minimal limit at 64 clients, a connection "
            "per 16 clients | 0.95 × (950 vs 1,000) | yes |") in text, text
    assert ("| Redis CPU per cycle within 10% of the minimal limit's at 64 "
            "clients, a connection per 16 clients | 0.95 × (19.0 vs 20.0) "
            "| yes |") in text, text
    assert ("| 64 | 0.50 (paired 0.50: 0.50, 0.50, 0.50) | 0.95 (paired "
            "0.95: 0.95, 0.95, 0.95) | 0.95 (paired 0.95: 0.95, 0.95, 0.95) "
            "| 0.90 ") in text, text


def test_report_floor_rows_and_ratios(tmp_path):
    """The floor sidecar gets its rows beside the daemon's, and daemon /
    floor and floor / limit columns beside daemon / limit, for one
    connection per client and for shared connections; the columns the
    report had stay."""
    out = _out_dir(tmp_path)
    # Sidecar process CPU per cycle (daemon_cpu % × 1e4 / cps): daemon
    # 1000 µs, floor 800, daemon-shared 500, floor-shared 600.
    res = "".join(_line("daemon", 64, "r%d" % k, 450, 18, 30, 45) +
                  _line("floor", 64, "r%d" % k, 500, 20, 25, 40) +
                  _line("daemon-shared", 64, "r%d" % k, 900, 18, 19, 45) +
                  _line("floor-shared", 64, "r%d" % k, 800, 20, 20, 48) +
                  _line("limit", 64, "r%d" % k, 1000, 20, 20)
                  for k in (1, 2, 3))
    (out / "results.txt").write_text(res)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# redlockd benchmarks\n")
    text = _report(out, md)
    assert ("| 64 | floor sidecar (rlbench --serve) | 500 (500–500) | "
            "100 / 200 | 20.0 | 1.0 | 25.0 | none |") in text, text
    assert "| 64 | floor sidecar, a connection per 16 clients | 800 " in text
    # Throughput: daemon / limit, paired, then daemon / floor, floor /
    # limit, and the same two on shared connections.
    assert ("| daemon / limit | daemon / limit, paired | daemon / floor, "
            "cycles/s | floor / minimal limit, cycles/s | shared "
            "connections: daemon / floor, cycles/s | shared connections: "
            "floor / minimal limit, cycles/s | daemon / node-redlock "
            "|") in text, text
    assert ("| 0.45 | 0.45 | 0.90 (paired 0.90: 0.90, 0.90, 0.90) | 0.50 "
            "(paired 0.50: 0.50, 0.50, 0.50) | 1.12 (paired 1.12: 1.12, "
            "1.12, 1.12) | 0.80 (paired 0.80: 0.80, 0.80, 0.80) | n/a "
            "|") in text, text
    # Redis work ratios: the old columns first, the floor's at the end.
    assert ("| 64 | 0.45 (paired 0.45: 0.45, 0.45, 0.45) | 0.90 (paired "
            "0.90: 0.90, 0.90, 0.90) | 0.95 (paired 0.95: 0.95, 0.95, 0.95) "
            "| 0.90 ") in text, text
    assert ("| 0.90 (paired 0.90: 0.90, 0.90, 0.90) | 0.50 (paired 0.50: "
            "0.50, 0.50, 0.50) | 1.20 (paired 1.20: 1.20, 1.20, 1.20) | "
            "1.25 (paired 1.25: 1.25, 1.25, 1.25) | "
            "1.12 (paired 1.12: 1.12, 1.12, 1.12) | 0.80 (paired 0.80: "
            "0.80, 0.80, 0.80) | 0.83 (paired 0.83: 0.83, 0.83, 0.83) "
            "|") in text, text
    assert "daemon / floor, sidecar process CPU µs/cycle" in text


def test_script_cost_prices_every_shape():
    """script_cost.py runs the daemon's scripts (read from scripts.c) on a
    redis-server of its own, checks that each shape acted on every key, and
    prints a row of Redis µs per key for each."""
    p = subprocess.run([sys.executable, str(REPO / "tests" / "bench" /
                                            "script_cost.py"),
                        "--reps", "1", "--keys", "300", "--batch", "1,8"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln for ln in p.stdout.splitlines()
            if ln.startswith("| ") and "µs" not in ln]
    names = [r.split("|")[1].strip() for r in rows]
    assert names == [
        "release, one key per call", "extend, one key per call",
        "release, SCRIPT_BATCH, 8 keys",
        "release, SCRIPT_BATCH_RELEASE, 8 keys",
        "extend, SCRIPT_BATCH, 8 keys",
        "extend, SCRIPT_BATCH_EXTEND, 8 keys"], p.stdout
    for r in rows:
        assert float(r.split("|")[2]) > 0, r
