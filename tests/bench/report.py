#!/usr/bin/env python3
"""report.py: turns tests/bench/out/*.txt into BENCHMARKS.md and a PNG.

Used by run.sh; standard library only.

  report.py --out-dir DIR --md BENCHMARKS.md --png tests/bench/x.png --root .

BENCHMARKS.md is regenerated whole except the hand-written part between
<!-- analysis:begin --> and <!-- analysis:end -->, which is kept.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

IMPLS = [
    ("daemon", "redlockd (socket, NDJSON)"),
    ("limit", "in-process limit"),
    ("node-redlock", "node-redlock"),
    ("node-redlock-ap", "node-redlock + auto-pipelining"),
]

A_BEGIN = "<!-- analysis:begin -->"
A_END = "<!-- analysis:end -->"


# ---- parsing ---------------------------------------------------------------

def parse_results(path, kind="RESULT"):
    rows = []
    if not os.path.exists(path):
        return rows
    for line in open(path, encoding="utf-8", errors="replace"):
        if not line.startswith(kind + " "):
            continue
        d = {}
        for tok in line.split()[1:]:
            if "=" in tok:
                k, v = tok.split("=", 1)
                d[k] = v
        rows.append(d)
    return rows


def num(d, k, default=None):
    try:
        v = float(d.get(k, ""))
    except ValueError:
        return default
    return v


def med(vals):
    vals = [v for v in vals if v is not None and v >= 0]
    return statistics.median(vals) if vals else None


def fmt(v, nd=0, unit=""):
    if v is None:
        return "n/a"
    if nd == 0:
        return "{:,.0f}{}".format(v, unit)
    return "{:,.{}f}{}".format(v, nd, unit)


def ratio(a, b, nd=2):
    if a is None or b is None or b == 0:
        return "n/a"
    return "{:.{}f}".format(a / b, nd)


def read(path):
    if os.path.exists(path):
        return open(path, encoding="utf-8", errors="replace").read()
    return ""


# ---- tables -------------------------------------------------------------------

def group(rows, mode="cycle"):
    g = {}
    for r in rows:
        if r.get("mode") != mode:
            continue
        key = (r.get("impl"), int(num(r, "conc", 0)))
        g.setdefault(key, []).append(r)
    return g


def agg(g, impl, conc, key):
    return med([num(r, key) for r in g.get((impl, conc), [])])


def spread(g, impl, conc, key):
    vals = [num(r, key) for r in g.get((impl, conc), [])]
    vals = [v for v in vals if v is not None]
    if len(vals) < 2:
        return ""
    return " ({}–{})".format(fmt(min(vals)), fmt(max(vals)))


def paired_ratios(g, conc):
    """daemon / limit for each repetition that measured both (adjacent
    runs, so a slow drift of the machine cancels), in repetition order."""
    by_tag = {}
    for impl in ("daemon", "limit"):
        for r in g.get((impl, conc), []):
            by_tag.setdefault(r.get("tag"), {})[impl] = num(r, "cps")
    out = []
    for tag in sorted(by_tag, key=lambda t: int(re.sub(r"\D", "", t or "")
                                                or 0)):
        d, lim = by_tag[tag].get("daemon"), by_tag[tag].get("limit")
        if d and lim:
            out.append(d / lim)
    return out


def comparison_tables(rows):
    g = group(rows)
    concs = sorted({c for (_, c) in g})
    impls = [(i, n) for i, n in IMPLS if any((i, c) in g for c in concs)]
    if not concs:
        return "", {}
    reps = max(len(v) for v in g.values())
    out = []
    out.append("### Throughput (cycles/s: acquire + release), median of %d "
               "rep(s), (min–max)\n" % reps)
    hdr = ["clients"] + [n for _, n in impls]
    hdr += ["daemon / limit", "daemon / limit, paired", "daemon / node-redlock",
            "daemon / node-redlock-ap"]
    out.append("| " + " | ".join(hdr) + " |")
    out.append("|" + "---|" * len(hdr))
    summary = {}
    for c in concs:
        cells = [str(c)]
        for i, _ in impls:
            cells.append(fmt(agg(g, i, c, "cps")) + spread(g, i, c, "cps"))
        d = agg(g, "daemon", c, "cps")
        lim = agg(g, "limit", c, "cps")
        nr = agg(g, "node-redlock", c, "cps")
        nra = agg(g, "node-redlock-ap", c, "cps")
        per = paired_ratios(g, c)
        cells += [ratio(d, lim), fmt(med(per), 2) if per else "–",
                  ratio(d, nr, 1), ratio(d, nra, 1)]
        summary[c] = dict(daemon=d, limit=lim, nr=nr, nra=nra, paired=per)
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    out.append("### Latency (µs, medians over reps of each run's "
               "percentile)\n")
    hdr = ["clients", "implementation", "acquire p50", "acquire p99",
           "acquire p99.9", "cycle p50", "cycle p99", "errors (all reps)"]
    out.append("| " + " | ".join(hdr) + " |")
    out.append("|" + "---|" * len(hdr))
    for c in concs:
        for i, n in impls:
            rs = g.get((i, c), [])
            if not rs:
                continue
            errs = {}
            for r in rs:
                e = r.get("errs", "-")
                if e and e != "-":
                    for part in e.split(","):
                        k, _, v = part.partition(":")
                        errs[k] = errs.get(k, 0) + int(v or 0)
            es = ", ".join("%s %d" % kv for kv in sorted(errs.items())) \
                or "none"
            out.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (
                c, n, fmt(agg(g, i, c, "p50_us")), fmt(agg(g, i, c, "p99_us")),
                fmt(agg(g, i, c, "p999_us")), fmt(agg(g, i, c, "cyc_p50_us")),
                fmt(agg(g, i, c, "cyc_p99_us")), es))
            summary.setdefault(c, {})[i + "_p50"] = agg(g, i, c, "p50_us")
            summary[c][i + "_p99"] = agg(g, i, c, "cyc_p99_us")
    out.append("")
    out.append("### Where the CPU went (median % of one core during the "
               "measured window)\n")
    out.append("The machine is shared: *machine* is all CPU in use on it "
               "(200 = both cores busy), *other* is what processes outside "
               "the benchmark used (machine − daemon − redis − generator).\n")
    hdr = ["clients", "implementation", "daemon", "redis ×N", "generator",
           "machine", "other"]
    out.append("| " + " | ".join(hdr) + " |")
    out.append("|" + "---|" * len(hdr))
    for c in concs:
        for i, n in impls:
            rs = g.get((i, c), [])
            if not rs:
                continue
            dc = agg(g, i, c, "daemon_cpu")
            rc = agg(g, i, c, "redis_cpu")
            bc = agg(g, i, c, "bench_cpu")
            mc = agg(g, i, c, "machine_cpu")
            others = []
            for r in rs:
                m = num(r, "machine_cpu")
                if m is None or m < 0:
                    continue
                o = m - max(num(r, "daemon_cpu", 0), 0) - \
                    max(num(r, "redis_cpu", 0), 0) - \
                    max(num(r, "bench_cpu", 0), 0)
                others.append(max(o, 0))
            out.append("| %d | %s | %s | %s | %s | %s | %s |" % (
                c, n, fmt(dc), fmt(rc), fmt(bc), fmt(mc), fmt(med(others))))
    out.append("")
    uu = sorted({int(num(r, "conc", 0)) for r in rows
                 if r.get("impl") == "limit-uuid"})
    if uu:
        out.append("### The daemon's token source, priced in the limit\n")
        out.append("The limit normally takes its 128-bit tokens from "
                   "`getrandom()` (one call per 256 tokens). With "
                   "`--token uuid` it does what the daemon's "
                   "`locks_new_token()` does (one `uuid_generate_random()` "
                   "call per token), run right after the plain limit in "
                   "each repetition (medians; on this noisy machine the "
                   "difference is within the spread unless the table says "
                   "otherwise — the profile below is the sharper "
                   "measure):\n")
        out.append("| clients | limit, getrandom tokens (cycles/s) | limit, "
                   "libuuid tokens (cycles/s) | acquire p50 getrandom / "
                   "libuuid (µs) |")
        out.append("|---|---|---|---|")
        for c in uu:
            out.append("| %d | %s%s | %s%s | %s / %s |" % (
                c, fmt(agg(g, "limit", c, "cps")), spread(g, "limit", c, "cps"),
                fmt(agg(g, "limit-uuid", c, "cps")),
                spread(g, "limit-uuid", c, "cps"),
                fmt(agg(g, "limit", c, "p50_us")),
                fmt(agg(g, "limit-uuid", c, "p50_us"))))
        out.append("")
    return "\n".join(out), summary


def renew_timeline(samples):
    if not samples:
        return ""
    out = ["Per-second samples of the daemon during the hold (every 5th "
           "second):\n", "| t (s) | daemon CPU % | daemon RSS (MB) | lost "
           "events so far |", "|---|---|---|---|"]
    for r in samples:
        t = int(num(r, "t", 0))
        if t % 5 == 0 or t == 1:
            out.append("| %d | %s | %s | %s |" % (
                t, fmt(num(r, "cpu"), 1), fmt(num(r, "rss_kb", 0) / 1024, 1),
                fmt(num(r, "lost_events"))))
    return "\n".join(out) + "\n"


def renew_table(rows):
    rs = [r for r in rows if r.get("mode") == "renew"]
    if not rs:
        return "", None
    r = rs[-1]
    out = ["| measure | value |", "|---|---|"]
    items = [
        ("renewing locks asked / acquired", "%s / %s" % (
            r.get("locks"), r.get("acquired"))),
        ("ttl", "%s ms (renewed every ttl/3)" % r.get("ttl_ms")),
        ("acquisition", "%s s over %s connection(s) (ramp %s s)" % (
            r.get("acquire_s"), r.get("conns"), r.get("ramp_s", "0"))),
        ("held for", "%s s, then released (pipelined)" % r.get("secs")),
        ("daemon RSS before / while holding",
         "%s / %s kB (%s bytes per lock)" % (
             fmt(num(r, "rss_base_kb")), fmt(num(r, "rss_held_kb")),
             fmt(num(r, "bytes_per_lock")))),
        ("daemon RSS, median of the per-second samples",
         "%s kB" % fmt(num(r, "rss_p50_kb"))),
        ("daemon CPU while holding", "%s%% of one core on average, median "
         "%s%%, %s%% max over 1 s" % (r.get("cpu_pct"),
                                       r.get("cpu_p50_pct", "?"),
                                       r.get("cpu_max_pct"))),
        ("renewals ok / failed", "%s (%s/s) / %s" % (
            fmt(num(r, "renew_ok")), fmt(num(r, "renew_per_s")),
            fmt(num(r, "renew_failed")))),
        ("locks lost (metric / events)", "%s / %s" % (
            fmt(num(r, "lost")), fmt(num(r, "lost_events")))),
        ("released at the end", "%s in %s s (errors %s)" % (
            r.get("released"), r.get("release_s"), r.get("rel_errs"))),
        ("locks lost by the end of the release phase", "%s (%s lost "
         "events)" % (fmt(num(r, "lost_total")),
                      fmt(num(r, "lost_events_total")))),
    ]
    for k, v in items:
        out.append("| %s | %s |" % (k, v))
    return "\n".join(out) + "\n", r


def targets_table(summary, renew):
    out = ["| target | measured | met? |", "|---|---|---|"]

    def yes(b):
        return "n/a" if b is None else ("yes" if b else "**no**")

    for c in (64, 256):
        s = summary.get(c, {})
        d, lim = s.get("daemon"), s.get("limit")
        v = d / lim if d and lim else None
        # Two estimates: the ratio of the medians, and the median of each
        # repetition's ratio (its daemon and limit runs were adjacent, so a
        # drift of the shared machine between repetitions cancels).
        per = s.get("paired") or []
        pm = med(per) if len(per) > 1 else None
        per_md = ""
        if pm is not None:
            per_md = "; median of the per-repetition ratios %.2f (%s)" % (
                pm, ", ".join("%.2f" % x for x in per))
        met = yes(None if v is None else v >= 0.8)
        if pm is not None and v is not None and (pm >= 0.8) != (v >= 0.8):
            met = "%s by the ratio of medians, %s by the paired ratios" % (
                yes(v >= 0.8), yes(pm >= 0.8))
        out.append("| daemon ≥ 0.8 × in-process limit at %d clients | "
                   "ratio of medians %s (%s vs %s cycles/s)%s | %s |" % (
                       c, "n/a" if v is None else "%.3f" % v, fmt(d),
                       fmt(lim), per_md, met))
    s = summary.get(64, {})
    d, nr = s.get("daemon"), s.get("nr")
    v = d / nr if d and nr else None
    out.append("| daemon ≥ 8 × node-redlock at 64 clients | %s | %s |" % (
        "n/a" if v is None else "%.1f × (%s vs %s)" % (v, fmt(d), fmt(nr)),
        yes(None if v is None else v >= 8)))
    s = summary.get(1, {})
    dp, lp = s.get("daemon_p50"), s.get("limit_p50")
    diff = dp - lp if dp is not None and lp is not None else None
    out.append("| acquire p50, 1 client, within 50 µs of the limit's | %s "
               "(%s vs %s µs) | %s |" % (
                   "n/a" if diff is None else "+%.0f µs" % diff, fmt(dp),
                   fmt(lp), yes(None if diff is None else diff <= 50)))
    if renew:
        rss = num(renew, "rss_p50_kb", num(renew, "rss_held_kb"))
        rss_max = num(renew, "rss_held_kb")
        cpu = num(renew, "cpu_p50_pct", num(renew, "cpu_pct"))
        cpu_avg = num(renew, "cpu_pct")
        lost = num(renew, "lost_total", num(renew, "lost", 0))
        acq = num(renew, "acquired", 0)
        locks = num(renew, "locks", 0)
        out.append("| %s renewing locks at ttl %s ms: RSS < 100 MB | "
                   "median %s MB, max %s MB | %s |" % (
                       fmt(locks), renew.get("ttl_ms"),
                       fmt(rss / 1024 if rss else None, 1),
                       fmt(rss_max / 1024 if rss_max else None, 1),
                       yes(rss is not None and rss < 100 * 1024)))
        out.append("| … and CPU < 30%% of one core | median %s%%, average "
                   "%s%% | %s |" % (fmt(cpu, 1), fmt(cpu_avg, 1),
                                    yes(cpu is not None and cpu < 30)))
        out.append("| … with every lock kept (none lost, all acquired) | %s "
                   "lost, %s of %s acquired | %s |" % (
                       fmt(lost), fmt(acq), fmt(locks),
                       yes(lost == 0 and acq == locks)))
    return "\n".join(out) + "\n"


def scaling_tables(rows):
    if not rows:
        return ""
    out = []
    by_tag = {}
    for r in rows:
        by_tag.setdefault(r.get("tag", ""), []).append(r)

    def tagged(prefix):
        ts = [t for t in by_tag if t.startswith(prefix)]
        return sorted(ts, key=lambda t: int(re.sub(r"\D", "", t) or 0))

    ts = tagged("nodes")
    if ts:
        out.append("#### Node count (64 clients)\n")
        out.append("| nodes | quorum | daemon cycles/s | daemon cycle p99 "
                   "(µs) | limit cycles/s | limit cycle p99 (µs) | daemon / "
                   "limit | daemon CPU % | redis CPU % (all) |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for t in ts:
            n = int(t[5:])
            d = next((r for r in by_tag[t] if r.get("impl") == "daemon"), {})
            lm = next((r for r in by_tag[t] if r.get("impl") == "limit"), {})
            out.append("| %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                n, n // 2 + 1, fmt(num(d, "cps")), fmt(num(d, "cyc_p99_us")),
                fmt(num(lm, "cps")), fmt(num(lm, "cyc_p99_us")),
                ratio(num(d, "cps"), num(lm, "cps")),
                fmt(num(d, "daemon_cpu")), fmt(num(d, "redis_cpu"))))
        out.append("")
    ts = tagged("conns")
    if ts:
        out.append("#### Client connections (each one client with one "
                   "request in flight)\n")
        out.append("| connections | cycles/s | acquire p50 (µs) | cycle p99 "
                   "(µs) | daemon CPU % | daemon RSS (kB) | errors |")
        out.append("|---|---|---|---|---|---|---|")
        for t in ts:
            for r in by_tag[t]:
                if r.get("mode") != "cycle":
                    continue
                out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    r.get("conc"), fmt(num(r, "cps")), fmt(num(r, "p50_us")),
                    fmt(num(r, "cyc_p99_us")), fmt(num(r, "daemon_cpu")),
                    fmt(num(r, "rss_kb")), r.get("errs")))
        out.append("")
    ts = tagged("idle")
    if ts:
        out.append("#### Idle connections (each sent one ping) while 16 "
                   "clients cycle\n")
        out.append("| idle connections | daemon RSS before → after (kB) | "
                   "bytes per connection | cycles/s (16 clients) | cycle p99 "
                   "(µs) |")
        out.append("|---|---|---|---|---|")
        for t in ts:
            idle = next((r for r in by_tag[t] if r.get("mode") == "idle"), {})
            cyc = next((r for r in by_tag[t]
                        if r.get("mode") == "connections"), {})
            out.append("| %s | %s → %s | %s | %s | %s |" % (
                idle.get("idle", t[4:]), fmt(num(idle, "rss_base_kb")),
                fmt(num(idle, "rss_idle_kb")),
                fmt(num(idle, "bytes_per_conn")), fmt(num(cyc, "cps")),
                fmt(num(cyc, "cyc_p99_us"))))
        out.append("")
    ts = tagged("held")
    if ts:
        out.append("#### Held locks (not renewed, ttl 600 s) while 64 "
                   "clients cycle\n")
        out.append("| held locks | cycles/s | acquire p50 (µs) | cycle p99 "
                   "(µs) | daemon RSS (kB) |")
        out.append("|---|---|---|---|---|")
        for t in ts:
            for r in by_tag[t]:
                out.append("| %s | %s | %s | %s | %s |" % (
                    r.get("held"), fmt(num(r, "cps")), fmt(num(r, "p50_us")),
                    fmt(num(r, "cyc_p99_us")), fmt(num(r, "rss_kb"))))
        out.append("")
    return "\n".join(out)


# ---- plot ------------------------------------------------------------------

def plot(rows, png, out_dir):
    g = group(rows)
    concs = sorted({c for (_, c) in g})
    impls = [(i, n) for i, n in IMPLS if any((i, c) in g for c in concs)]
    if not concs or not impls:
        return False
    dat = os.path.join(out_dir, "plot.dat")
    with open(dat, "w") as f:
        f.write("# conc " + " ".join("%s_cps %s_p99" % (i, i)
                                     for i, _ in impls) + "\n")
        for c in concs:
            vals = []
            for i, _ in impls:
                cps = agg(g, i, c, "cps")
                p99 = agg(g, i, c, "cyc_p99_us")
                vals += ["NaN" if cps is None else "%.0f" % cps,
                         "NaN" if p99 is None else "%.3f" % (p99 / 1000)]
            f.write("%d %s\n" % (c, " ".join(vals)))
    lines = []
    for k, (i, n) in enumerate(impls):
        lines.append((2 + 2 * k, 3 + 2 * k, n))
    gp = [
        "set terminal pngcairo size 1100,460 font 'sans,10'"
        if has_cairo() else "set terminal png size 1100,460",
        "set output '%s'" % png,
        "set multiplot layout 1,2 title 'redlockd: acquire+release cycle, "
        "5 redis nodes on unix sockets (medians)'",
        "set logscale x 2", "set xrange [0.8:%g]" % (max(concs) * 1.25),
        "set xtics (%s)" % ", ".join(
            "'%d' %d" % (c, c) for c in concs),
        "set xlabel 'concurrent clients'", "set grid", "set key top left",
        "set ylabel 'cycles/s'", "set title 'Throughput'",
        "plot " + ", ".join("'%s' using 1:%d with linespoints lw 2 title '%s'"
                            % (dat, a, n) for a, _, n in lines),
        "set logscale y", "set ylabel 'ms'", "set title 'Cycle p99 latency'",
        "plot " + ", ".join("'%s' using 1:%d with linespoints lw 2 title '%s'"
                            % (dat, b, n) for _, b, n in lines),
        "unset multiplot",
    ]
    try:
        subprocess.run(["gnuplot"], input="\n".join(gp), text=True,
                       check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print("report.py: gnuplot failed: %s" % e, file=sys.stderr)
        return False
    return True


def has_cairo():
    try:
        r = subprocess.run(["gnuplot", "-e", "set terminal"],
                           capture_output=True, text=True, timeout=20)
        return "pngcairo" in (r.stdout + r.stderr)
    except (OSError, subprocess.SubprocessError):
        return False


# ---- the document ----------------------------------------------------------

DEFAULT_ANALYSIS = """## Analysis

(Hand-written; kept by report.py when the tables are regenerated.)
"""


def stamp(out_dir, section):
    t = read(os.path.join(out_dir, "commit-%s.txt" % section)).split()
    if not t:
        return ""
    return "*Daemon at commit `%s`, run %s.*\n" % (t[0], t[1] if len(t) > 1
                                                   else "")


def build(args):
    out_dir = args.out_dir
    rows = parse_results(os.path.join(out_dir, "results.txt"))
    renew_rows = parse_results(os.path.join(out_dir, "renew.txt"))
    renew_samples = parse_results(os.path.join(out_dir, "renew.txt"),
                                  "SAMPLE")
    sc_rows = parse_results(os.path.join(out_dir, "scaling.txt"))
    machine = read(os.path.join(out_dir, "machine.txt")).strip()
    notes = read(os.path.join(out_dir, "notes.txt")).strip()

    analysis = DEFAULT_ANALYSIS
    if os.path.exists(args.md):
        old = read(args.md)
        i, j = old.find(A_BEGIN), old.find(A_END)
        if i >= 0 and j > i:
            analysis = old[i + len(A_BEGIN):j].strip("\n") + "\n"

    comp, summary = comparison_tables(rows)
    renew_md, renew = renew_table(renew_rows)
    cont = [r for r in rows if r.get("mode") == "contended"]
    cont_md = ""
    if cont:
        r = cont[-1]
        cont_md = (
            "| clients | resources | wait_ms | cycles/s | acquire p50 / p99 "
            "(µs) | cycle p99 (µs) | errors | daemon CPU %% |\n"
            "|---|---|---|---|---|---|---|---|\n"
            "| %s | 4 | 1000 | %s | %s / %s | %s | %s | %s |\n" % (
                r.get("conc"), fmt(num(r, "cps")), fmt(num(r, "p50_us")),
                fmt(num(r, "p99_us")), fmt(num(r, "cyc_p99_us")),
                r.get("errs"), fmt(num(r, "daemon_cpu"))))
    png_ok = plot(rows, args.png, out_dir) if rows else False

    doc = []
    doc.append("# redlockd benchmarks\n")
    doc.append("Generated by `tests/bench/run.sh` (tables) and written by "
               "hand (the analysis). Reproduce with `tests/bench/run.sh` "
               "(comparison + renew), `--scaling`, `--profile`, or `--all`; "
               "`--quick` is a two-minute smoke run. Speed is measured, "
               "never asserted in tests.\n")
    doc.append("## What is measured\n")
    doc.append(
        "- **cycle**: each client acquires its own resource (ttl 10 s), "
        "releases it, and repeats; one request in flight per client, one "
        "connection per client. Throughput counts whole cycles; *acquire* "
        "latency is request to answer, *cycle* latency is acquire sent to "
        "release answered.\n"
        "- **redlockd**: `rlbench` over the daemon's unix socket (NDJSON).\n"
        "- **in-process limit**: `rlbench --inproc`: the same Redlock round "
        "inside the generator (hiredis async + libevent, one connection per "
        "node), EVALSHA of the daemon's own acquire and release scripts "
        "(sidecar/scripts.c, linked into rlbench) to "
        "all nodes at once, answered at quorum (3 of 5) with the same "
        "validity rule; no socket and no JSON. The gap to it is what the "
        "daemon's socket, JSON and bookkeeping cost.\n"
        "- **node-redlock**: `redlock@5.0.0-beta.2` over `ioredis`, "
        "`acquire([resource], ttl)` then `lock.release()`, retryCount 0, "
        "N async workers, one ioredis client per node (also with "
        "`enableAutoPipelining`).\n"
        "- Runs are interleaved (daemon, limit, node-redlock, "
        "node-redlock-ap, then the next concurrency, then the next "
        "repetition) so that drifts of a shared machine hit all alike; "
        "tables show medians.\n")
    doc.append("## Machine\n")
    doc.append("```\n%s\n```\n" % (machine or "(not recorded)"))
    if summary:
        doc.append("## Targets (reported, not asserted)\n")
        doc.append(stamp(out_dir, "compare"))
        doc.append(targets_table(summary, renew))
    if comp:
        doc.append("## Daemon vs in-process limit vs node-redlock\n")
        doc.append(stamp(out_dir, "compare"))
        doc.append(comp)
        if png_ok:
            rel = os.path.relpath(args.png, os.path.dirname(
                os.path.abspath(args.md)))
            doc.append("![throughput and p99 vs concurrency](%s)\n" % rel)
    if cont_md:
        doc.append("## Contention (the daemon's FIFO wait queues)\n")
        doc.append("Clients share a few resources and acquire with "
                   "`wait_ms`; a release wakes the next waiter at once. "
                   "Acquire latency includes the wait.\n")
        doc.append(cont_md)
    if renew_md:
        doc.append("## Renewing locks\n")
        doc.append(stamp(out_dir, "renew"))
        doc.append(renew_md)
        doc.append(renew_timeline(renew_samples))
    sc = scaling_tables(sc_rows)
    if sc:
        doc.append("## How cost grows (measured)\n")
        doc.append(stamp(out_dir, "scaling"))
        doc.append("From `tests/bench/run.sh --scaling` (%s s per run; "
                   "single runs, not medians).\n" % (
                       sc_rows[0].get("secs", "?") if sc_rows else "?"))
        doc.append(sc)
    prof = os.path.join(out_dir, "profile")
    for name, title in [("perf-self.txt", "perf, cpu-clock samples, self "
                         "time by function (cycle load, 64 clients)"),
                        ("callgrind-self.txt", "callgrind, instructions, "
                         "self (cycle load, 64 clients)")]:
        txt = read(os.path.join(prof, name)).strip()
        if txt:
            # Only the per-function lines (callgrind_annotate adds a header).
            lines = [ln.strip() for ln in txt.splitlines()
                     if re.match(r"^\s*[\d,.]+%?\s", ln)][:40]
            doc.append("## Profile: %s\n" % title)
            doc.append(stamp(out_dir, "profile"))
            doc.append("```\n%s\n```\n" % "\n".join(lines))
    if notes:
        doc.append("## Notes from the run\n```\n%s\n```\n" % notes)
    doc.append(A_BEGIN)
    doc.append(analysis.rstrip("\n"))
    doc.append(A_END + "\n")
    raw = rows + renew_rows + sc_rows
    if raw:
        doc.append("<details><summary>Raw RESULT lines</summary>\n")
        doc.append("```")
        for path in ("results.txt", "renew.txt", "scaling.txt"):
            t = read(os.path.join(out_dir, path)).strip()
            if t:
                doc.append(t)
        doc.append("```\n</details>\n")
    with open(args.md, "w", encoding="utf-8") as f:
        f.write("\n".join(doc))
    print("report.py: wrote %s%s" % (args.md, " and " + args.png
                                     if png_ok else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out-dir")
    ap.add_argument("--md")
    ap.add_argument("--png")
    ap.add_argument("--root", default=".")
    args = ap.parse_args()
    if not (args.out_dir and args.md and args.png):
        ap.error("--out-dir, --md and --png are required")
    build(args)


if __name__ == "__main__":
    main()
