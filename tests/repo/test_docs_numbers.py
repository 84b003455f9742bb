"""docs/operations.md quotes BENCHMARKS.md's measurements, not its own
older ones: the sizing table's rows marked BENCHMARKS.md carry the numbers
of the RESULT lines BENCHMARKS.md was generated from."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def result(tag, mode=None):
    text = (REPO / "BENCHMARKS.md").read_text()
    for line in text.splitlines():
        if line.startswith("RESULT ") and " tag=%s" % tag in line + " " \
                and (mode is None or " mode=%s " % mode in line):
            return dict(kv.split("=", 1) for kv in line.split()[1:]
                        if "=" in kv)
    raise AssertionError("no RESULT line tagged %s in BENCHMARKS.md" % tag)


def sizing_rows():
    text = (REPO / "docs" / "operations.md").read_text()
    sec = text.split("## Sizing", 1)[1].split("\n## ", 1)[0]
    return {cells[0]: cells[1] for cells in (
        [c.strip() for c in ln.strip("|").split("|")]
        for ln in sec.splitlines() if ln.startswith("| ")) if len(cells) > 2
        and cells[2] == "BENCHMARKS.md"}


def num(n):
    return "{:,}".format(int(round(float(n))))


def test_renewing_locks_row_matches_benchmarks():
    r = result("renew", "renew")
    row = [v for k, v in sizing_rows().items() if "renewing" in k]
    assert len(row) == 1, sizing_rows()
    row = row[0]
    assert "%d MB" % round(int(r["rss_held_kb"]) / 1024.0) in row, (row, r)
    assert "%s bytes per lock" % r["bytes_per_lock"] in row, (row, r)
    assert "%d %% of a core" % round(float(r["cpu_pct"])) in row, (row, r)
    assert "%s renewals/s" % num(r["renew_per_s"]) in row, (row, r)
    assert (r["lost"] == "0") == ("none lost" in row), (row, r)


def test_no_number_contradicts_benchmarks():
    # The figures of the old, failed run must not come back.
    text = (REPO / "docs" / "operations.md").read_text()
    for stale in ("346 MB", "84,816", "4 KB per"):
        assert stale not in text, stale
