"""Issue 15, item 4: the bench counts the Redis work of a lock cycle right.

Not a speed test: nothing here looks at cycles/s. rlbench (built with the
daemon, build/tests/bench/rlbench) runs short, bounded loads against real
redis-servers, and its accounting of the nodes' INFO commandstats must give
the exact command count of each cycle; report.py must keep pinned sections.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from rl import BIN, REPO, pytest

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


def _line(impl, conc, tag, cps, cmds, cpu):
    return ("RESULT mode=cycle impl=%s conc=%d secs=5 cycles=1 cps=%d "
            "p50_us=100 p99_us=200 p999_us=300 cyc_p50_us=1 cyc_p99_us=2 "
            "cyc_p999_us=3 errors=0 errs=- cmds_per_cycle=%.3f "
            "cmd_us_per_cycle=1.0 cpu_us_per_cycle=%.2f "
            "cmd_mix=set:5.00,get:5.00 tag=%s\n" % (impl, conc, cps, cmds,
                                                    cpu, tag))


def _report(out, md, *extra):
    p = subprocess.run([sys.executable, str(REPORT), "--out-dir", str(out),
                        "--md", str(md), "--png", str(out / "x.png")] +
                       list(extra), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return md.read_text()


def test_report_pins_sections_and_keeps_them(tmp_path):
    """--pin adds the Redis-work tables above the rest and changes nothing
    else; a later --pin goes on top; a full regeneration keeps both."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "commit-compare.txt").write_text(
        "abc1234 2026-12-01T00:00:00Z 98c0982\n")
    (out / "machine.txt").write_text("CPU(s): 2\nHypervisor vendor: KVM\n")
    res = "".join(_line("daemon", 64, "r%d" % k, 900, 35, 40) +
                  _line("limit", 64, "r%d" % k, 1000, 20, 20)
                  for k in (1, 2, 3))
    (out / "results.txt").write_text(res)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# redlockd benchmarks\n\nIntro.\n\n## Older\n\nkept\n")

    text = _report(out, md, "--pin", "Before")
    assert text.index("## Before") < text.index("## Older"), text
    assert text.endswith("## Older\n\nkept\n"), text
    assert "daemon sources (`sidecar/`) as of `98c0982`" in text
    assert "| 64 | 0.90 (paired 0.90: 0.90, 0.90, 0.90) | 1.75 " in text
    assert "/" + "work/" not in text and str(tmp_path) not in text

    text = _report(out, md, "--pin", "After")
    assert text.index("## After") < text.index("## Before") < \
        text.index("## Older"), text
    assert text.count("<!-- pinned:begin -->") == 2

    text = _report(out, md)
    assert text.count("<!-- pinned:begin -->") == 2, text
    assert re.search(r"## After.*## Before.*## What is measured", text,
                     re.S), text
    assert "## Older" not in text  # regenerated: only pinned parts stay


def test_report_shared_connections_row(tmp_path):
    """The daemon on shared connections gets its row and its own ratio
    columns beside the per-connection daemon's."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "commit-compare.txt").write_text(
        "abc1234 2026-12-01T00:00:00Z 98c0982\n")
    (out / "machine.txt").write_text("CPU(s): 2\n")
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
