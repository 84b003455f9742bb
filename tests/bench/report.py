#!/usr/bin/env python3
"""report.py: turns tests/bench/out/*.txt into BENCHMARKS.md and a PNG.

Used by run.sh; standard library only.

  report.py --out-dir DIR --md BENCHMARKS.md --png tests/bench/x.png --root .
  report.py ... --pin "before the change"

BENCHMARKS.md opens with the method ("How it is measured"), then "Current
measurements": the pinned sections (<!-- pinned:begin --> ...
<!-- pinned:end -->, newest first), then this run's tables. Then come the
hand-written part between <!-- analysis:begin --> and <!-- analysis:end -->.
The file is regenerated whole except the pinned and the hand-written parts,
which are kept as they are; superseded measurements are dropped (git keeps
them). --pin TITLE
leaves the rest of BENCHMARKS.md alone and adds this run's Redis-work tables
as a new pinned section at the top of "Current measurements": a record that
later runs do not overwrite. results-tls.txt (run.sh --tls) becomes the
table "TLS cost per cycle", results-servers.txt (run.sh --server) the
table "Per server kind".
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

IMPLS = [
    ("daemon", "redlockd (socket, NDJSON)"),
    ("daemon-shared", "redlockd, a connection per 16 clients"),
    ("floor", "floor sidecar (rlbench --serve)"),
    ("floor-shared", "floor sidecar, a connection per 16 clients"),
    ("limit", "minimal limit"),
    ("limit-scripts", "limit, daemon's scripts"),
    ("node-redlock", "node-redlock"),
    ("node-redlock-ap", "node-redlock + auto-pipelining"),
]

A_BEGIN = "<!-- analysis:begin -->"
A_END = "<!-- analysis:end -->"
P_BEGIN = "<!-- pinned:begin -->"
P_END = "<!-- pinned:end -->"

TITLE = "# redlockd benchmarks\n"
CURRENT = "## Current measurements"
CURRENT_INTRO = (
    "The newest measurement of each thing: first the kept sections, newest "
    "first, then the tables of the last full run for what they do not "
    "cover. Each says the commit and the date it was measured at; the "
    "method and the columns are those of *How it is measured* above.\n")

# The method, printed first in BENCHMARKS.md: what is measured and how. The
# machine's description (machine.txt of the run) goes between METHOD and
# METHOD_END.
METHOD = """\
## How it is measured

### The bench

`tests/bench/run.sh` builds an optimized daemon and the load generator \
`rlbench` (`--buildtype=release`, in `build-bench`), starts five throw-away \
redis-servers (no persistence), each on a random free TCP port of \
127.0.0.1 and on a unix socket, runs every measurement against them, stops \
every process it started, and writes this file with `tests/bench/report.py` \
from the `RESULT` line each run prints. The daemon, the limits and \
node-redlock reach the nodes over TCP loopback, as in production, unless a \
table says unix sockets. Every run is bounded in time.

The **cycle**: each client acquires its own resource (ttl 10 s), releases \
it and repeats, with one request in flight, at 1, 64 and 256 clients. A \
client has a connection of its own unless a row says *a connection per 16 \
clients* (64 clients on 4 connections, 256 on 16; requests pipelined and \
matched by id, as the client libraries talk). Throughput counts whole \
cycles; *acquire* latency runs from sending the acquire to its answer, \
*cycle* latency from sending the acquire to the release's answer.

### What is compared

- **redlockd**: `rlbench` driving the daemon over its unix socket \
(NDJSON). With a connection per client, every request costs the daemon a \
read and a write on its own socket, and the generator as much.
- **minimal limit**: `rlbench --inproc`, the cheapest correct Redlock \
cycle written as an expert would, in one process (hiredis async + \
libevent, one connection per node): `SET key token NX PX ttl` to all five \
nodes, decided at quorum (3 of 5) with the daemon's own validity rule \
(validity = ttl − elapsed − (ttl × 0.01 + 2 ms), from `sidecar/redlock.c`, \
linked in), a lost attempt's key deleted on the nodes that may hold it, \
then one compare-and-delete `EVALSHA` on all five nodes. No socket, no \
JSON. On shared connections the limit shares its node connections the same \
way. This is the bar the targets are set against.
- **limit, daemon's scripts**: `rlbench --inproc --limit scripts`, the same \
round running the daemon's own acquire and release Lua scripts \
(`sidecar/scripts.c`): the daemon's Redis work without its socket, JSON \
and bookkeeping.
- **floor sidecar**: `rlbench --serve`, the minimal limit's engine (the \
very same code) served in its own process over a unix socket, in the \
daemon's NDJSON, driven by the same generator command as redlockd: a lean \
server (every complete line of a read handled, one write per connection \
per loop turn, no JSON library) that trusts its input and does not renew, \
wait, fence or validate. The cheapest correct sidecar, so the bar for what \
a socket costs per request: **daemon / floor** is the daemon's own \
overhead, **floor / limit** what any sidecar pays on this machine. Not the \
product.
- **node-redlock**: `redlock@5.0.0-beta.2` on `ioredis`, \
`acquire([resource], ttl)` then `lock.release()`, retryCount 0, one client \
per node (`--node-ap` adds a run with `enableAutoPipelining`).

### Redis work per cycle

- **Redis cmds/cycle**: the nodes' `INFO commandstats` calls, summed over \
the five nodes, per completed cycle. Each run is counted whole, from idle \
nodes to idle nodes: `CONFIG RESETSTAT` on every node before the run's \
first request, read once its last cycle finished and the nodes' call \
counts stopped moving, divided by every cycle the run completed (warmup, \
measured interval, drain). Reading at the edges of the measured interval \
would miss the backlog of the slowest nodes, since a round is answered at \
quorum. Commands a script runs inside count as well as the `EVALSHA`; the \
bench's own `CONFIG` and `INFO`, and the daemon's `INFO` health checks, do \
not. Failed attempts and their rollbacks count (their work is real). The \
count is exact and reproducible.
- **Redis cmd µs/cycle**: the `usec` of the same commandstats (a script's \
usec includes the calls inside it, which count again on their own line).
- **Redis CPU µs/cycle**: the change of `used_cpu_sys + used_cpu_user` \
(`INFO cpu`, the whole redis-server process) over the same span, summed \
over the five nodes, per cycle: the fairest price of the Redis work. It \
falls as Redis's rate rises (more commands per read, fewer wake-ups), and \
at 1 client it is dominated by each node's per-wake-up cost.
- **sidecar process CPU µs/cycle** (and *daemon CPU µs/cycle*): the \
sidecar's CPU time (/proc, user + system) over the measured interval \
divided by the cycles in it.

### Repetitions, medians, paired ratios

The runs are interleaved: the daemon, the floor sidecar, the minimal \
limit, the daemon and the floor on shared connections, the scripts limit \
and node-redlock, then the next concurrency, then the next repetition; the \
daemon and the limits swap order every repetition, so that a drift of the \
shared machine hits all alike. By default 5 repetitions of 5 s (after 1 s \
of warmup). The tables show the median over the repetitions, with (min–max) \
for cycles/s. A **paired** ratio is taken within each repetition (the runs \
compared were adjacent), listed in repetition order; its median stands \
beside the ratio of the medians.

### The other measurements

- **Renewing locks** (`rlbench --mode renew`): 100,000 locks with ttl \
30 s, which the daemon renews every ttl/3, taken over 10 s on 4 \
connections so that their renewals spread out, held 45 s, then released \
pipelined. The daemon's RSS before and while holding, its CPU over each \
second from /proc, the renewals and the lost locks from its metrics.
- **Contention** (`rlbench --mode contended`): 64 clients share 4 \
resources and acquire with `wait_ms` 1000; a release wakes the next waiter \
of the daemon's FIFO queue at once.
- **TLS cost per cycle** (`run.sh --tls`): the daemon's cycle with the same \
five nodes reached over plain TCP (`redis://127.0.0.1:port`) and over TLS \
(`rediss://127.0.0.1:tls-port`, certificates verified against a throw-away \
CA with `--tls-ca-file`; one handshake per node connection at start, so the \
runs measure the steady state: record encryption, and the extra reads and \
writes of TLS). Each run has a freshly started daemon; the two alternate \
within every repetition (order swapped every repetition). The Redis CPU \
is that of the whole redis-server processes, so Redis's TLS work is in it. \
The **TLS / plain** row is the ratio of the medians, and in brackets the \
median of the paired per-repetition ratios. The limits and node-redlock \
are not run (hiredis 0.14 has no TLS).
- **Per server kind** (`run.sh --server redis-6.0,redis-7.0,...`): the \
daemon's cycle against five nodes of one server kind at a time, each run \
by `tests/compat/redis-server` from its Debian root \
([tests/compat/README.md](tests/compat/README.md)), with a fresh daemon \
per kind; the kinds run one after the other, not interleaved. Commands \
per cycle are exact (INFO commandstats); the Redis CPU per cycle (INFO \
cpu of the five processes) is indicative only.
- **How cost grows** (`run.sh --scaling`): single runs of 5 s, not \
medians: the node count (1, 3, 5, 7 at 64 clients), client connections (1 \
to 10,000, each one client with one request in flight), idle connections \
beside 16 cycling clients, and locks held (ttl 600 s, not renewed) beside \
64 cycling clients.
- **Profiles** (`run.sh --profile`): `perf record` (cpu-clock samples) and \
callgrind of the daemon under the cycle load at 64 clients, self time by \
function.

### The machine

Every table here comes from a KVM guest with **2 vCPUs shared with other \
work**, on which the five redis-servers, the load generator and the daemon \
all run at once. Every run keeps both cores busy, so throughput is the \
machine divided by what a cycle costs all the processes together, and the \
same binary under the same load gives cycles/s that differ by up to \
1.5 × from one minute to the next. Only interleaved runs and their paired \
ratios compare; the commands per cycle are exact. With the nodes on \
machines of their own the same code makes far more cycles/s. Each section \
below gives the machine's load at its start; the machine as the last full \
run recorded it:
"""

METHOD_END = """\
### Reproducing a table

| table | command |
|---|---|
| the lock cycle, Redis work per cycle, targets, renewing locks, \
contention | `tests/bench/run.sh` (`--no-node` without node-redlock; \
`--unix` adds the nodes over unix sockets) |
| renewing locks alone | `tests/bench/run.sh --renew` |
| TLS cost per cycle | `tests/bench/run.sh --tls` |
| per server kind | `tests/bench/run.sh --server redis-6.0,redis-7.0,\
redis-8.0,valkey-8.1` |
| how cost grows | `tests/bench/run.sh --scaling` |
| profiles | `tests/bench/run.sh --profile` |
| all of the above | `tests/bench/run.sh --all` |
| a section kept under *Current measurements* | the same command with \
`--pin TITLE` |

`tests/bench/run.sh --quick` is a two-minute smoke run that leaves this \
file alone; `BENCH_DURATION` and `BENCH_REPS` lengthen the runs \
(`tests/bench/run.sh --help`, `tests/bench/README.md`).

### What is not asserted

No test asserts a speed: the machines are shared and noisy, and CI does \
not run the bench. The **targets** in the tables are reported, not \
checked, all against the minimal limit: cycles/s at least 0.9 × the \
minimal limit's at 64 and 256 clients (and, as a stretch, above 1.0 × at \
256); Redis CPU per cycle within 10 % of the minimal limit's; Redis \
commands per cycle below the minimal limit's; acquire p50 with one client \
within 30 µs of the minimal limit's; at least 8 × node-redlock's cycles/s \
at 64 clients; and 100,000 renewing locks in less than 100 MB and 30 % of \
a core, none lost. The tests only check that `docs/operations.md` quotes \
the `RESULT` lines of this file.
"""


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

def md_table(hdr, rows=()):
    """A Markdown table as lines: the header cells, the separator, then a
    line per row (a list of cells). Every table of the report is printed
    here."""
    def line(cells):
        return "|" + "|".join(" %s " % c if c != "" else " "
                              for c in cells) + "|"
    return [line(hdr), "|" + "---|" * len(hdr)] + [line(r) for r in rows]


def group(rows, mode="cycle"):
    g = {}
    for r in rows:
        if r.get("mode") != mode:
            continue
        key = (r.get("impl"), int(num(r, "conc", 0)))
        g.setdefault(key, []).append(r)
    return g


def measured(g, concs, impls):
    """(conc, impl, name, runs) for each conc, then each impl, that has
    runs."""
    for c in concs:
        for i, n in impls:
            rs = g.get((i, c), [])
            if rs:
                yield c, i, n, rs


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


def paired(g, conc, a, b, key="cps"):
    """a / b of key for each repetition that measured both, in repetition
    order."""
    by_tag = {}
    for impl in (a, b):
        for r in g.get((impl, conc), []):
            v = num(r, key)
            if v is not None and v > 0:
                by_tag.setdefault(r.get("tag"), {})[impl] = v
    out = []
    for tag in sorted(by_tag, key=lambda t: int(re.sub(r"\D", "", t or "")
                                                or 0)):
        x, y = by_tag[tag].get(a), by_tag[tag].get(b)
        if x and y:
            out.append(x / y)
    return out


def ratio_cell(g, conc, a, b, key="cps", nd=2):
    """'ratio of medians (paired median: r1, r2, ...)' or 'n/a'."""
    x, y = agg(g, a, conc, key), agg(g, b, conc, key)
    if x is None or y is None or y <= 0:
        return "n/a"
    cell = "{:.{}f}".format(x / y, nd)
    per = paired(g, conc, a, b, key)
    if len(per) > 1:
        cell += " (paired {:.{}f}: {})".format(
            med(per), nd, ", ".join("{:.{}f}".format(v, nd) for v in per))
    return cell


def cmd_mix(g, impl, conc):
    """Median calls per cycle of each command, most first, as text."""
    per = {}
    for r in g.get((impl, conc), []):
        m = r.get("cmd_mix", "-")
        if not m or m == "-":
            continue
        for part in m.split(","):
            k, _, v = part.rpartition(":")
            try:
                per.setdefault(k, []).append(float(v))
            except ValueError:
                pass
    items = sorted(((med(v), k) for k, v in per.items()), reverse=True)
    # Below 0.005 per cycle is background (the daemon's health pings).
    return ", ".join("%s %.2f" % (k, v) for v, k in items
                     if v is not None and v >= 0.005)


def run_row(g, impl, conc, name, keys):
    """The cells of the runs of impl at conc: clients, name, cycles/s
    (min–max), acquire p50 / p99, the medians of keys, errors."""
    cells = [str(conc), name,
             fmt(agg(g, impl, conc, "cps")) + spread(g, impl, conc, "cps"),
             "%s / %s" % (fmt(agg(g, impl, conc, "p50_us")),
                          fmt(agg(g, impl, conc, "p99_us")))]
    cells += [fmt(agg(g, impl, conc, k), 1) for k in keys]
    cells.append(errors_of(g.get((impl, conc), [])))
    return cells


def work_tables(rows, where):
    """The Redis work per lock cycle: one table per transport."""
    for r in rows:
        v = daemon_us_per_cycle(r)
        r["daemon_us_per_cycle"] = "%.3f" % v if v is not None else "-1"
    g = group(rows)
    concs = sorted({c for (i, c) in g if i in ("daemon", "limit")})
    if not concs:
        return ""
    impls = [(i, n) for i, n in IMPLS if any((i, c) in g for c in concs)]
    reps = max(len(g.get((i, c), [])) for i, _ in impls for c in concs)
    out = ["#### Nodes over %s, median of %d repetition(s)\n" % (where, reps)]
    out += md_table(
        ["clients", "implementation", "cycles/s (min–max)",
         "acquire p50 / p99 (µs)", "Redis cmds/cycle", "Redis cmd µs/cycle",
         "Redis CPU µs/cycle", "errors"],
        [run_row(g, i, c, n, ["cmds_per_cycle", "cmd_us_per_cycle",
                              "cpu_us_per_cycle"])
         for c, i, n, _ in measured(g, concs, impls)])
    out.append("")
    out.append("Daemon against the limits: ratio of the medians, and in "
               "brackets the median of the paired per-repetition ratios "
               "with each of them.\n")
    shared = any(i == "daemon-shared" for (i, _) in g)
    floor = any(i == "floor" for (i, _) in g)
    hdr = ["clients", "daemon / minimal limit, cycles/s",
           "daemon / minimal limit, Redis cmds/cycle",
           "daemon / minimal limit, Redis CPU µs/cycle",
           "daemon / scripts limit, cycles/s",
           "daemon / node-redlock, cycles/s"]
    if shared:
        hdr[2:2] = ["shared connections / minimal limit, cycles/s",
                    "shared connections / minimal limit, Redis CPU "
                    "µs/cycle"]
    fcols = floor_columns(shared, True) if floor else []
    hdr += [h for h, _, _, _ in fcols]
    body = []
    for c in concs:
        cells = [c, ratio_cell(g, c, "daemon", "limit")]
        if shared:
            cells += [ratio_cell(g, c, "daemon-shared", "limit"),
                      ratio_cell(g, c, "daemon-shared", "limit",
                                 "cpu_us_per_cycle")]
        cells += [ratio_cell(g, c, "daemon", "limit", "cmds_per_cycle"),
                  ratio_cell(g, c, "daemon", "limit", "cpu_us_per_cycle"),
                  ratio_cell(g, c, "daemon", "limit-scripts"),
                  ratio_cell(g, c, "daemon", "node-redlock", nd=1)]
        cells += [ratio_cell(g, c, a, b, k) for _, a, b, k in fcols]
        body.append(cells)
    out += md_table(hdr, body)
    out.append("")
    c = 64 if 64 in concs else concs[-1]
    mixes = [(n, cmd_mix(g, i, c)) for i, n in impls]
    mixes = [(n, m) for n, m in mixes if m]
    if mixes:
        out.append("Commands per cycle at %d clients, summed over the five "
                   "nodes (median over the repetitions):\n" % c)
        out += md_table(["implementation", "commands per cycle"], mixes)
        out.append("")
    return "\n".join(out)


def floor_columns(shared, work):
    """The floor sidecar's ratio columns, as (header, a, b, key): a / b of
    key. daemon / floor is the daemon's own overhead over the cheapest
    correct sidecar's, floor / limit what a socket costs any sidecar; with
    shared, the same on shared connections. work adds the Redis CPU and
    the sidecar process's own CPU per cycle (the sharper measure of the
    daemon's overhead on a noisy machine: it does not depend on what else
    ran)."""
    cols = [("daemon / floor, cycles/s", "daemon", "floor", "cps"),
            ("floor / minimal limit, cycles/s", "floor", "limit", "cps")]
    if work:
        cols += [("daemon / floor, Redis CPU µs/cycle", "daemon", "floor",
                  "cpu_us_per_cycle"),
                 ("daemon / floor, sidecar process CPU µs/cycle", "daemon",
                  "floor", "daemon_us_per_cycle")]
    if shared:
        cols += [("shared connections: daemon / floor, cycles/s",
                  "daemon-shared", "floor-shared", "cps"),
                 ("shared connections: floor / minimal limit, cycles/s",
                  "floor-shared", "limit", "cps")]
        if work:
            cols.append(("shared connections: daemon / floor, sidecar "
                         "process CPU µs/cycle", "daemon-shared",
                         "floor-shared", "daemon_us_per_cycle"))
    return cols


def errors_of(rs):
    errs = {}
    for r in rs:
        e = r.get("errs", "-")
        if e and e != "-":
            for part in e.split(","):
                k, _, v = part.partition(":")
                errs[k] = errs.get(k, 0) + int(v or 0)
    return ", ".join("%s %d" % kv for kv in sorted(errs.items())) or "none"


def work_section(out_dir, rows, unix_rows):
    """The Redis-work tables of a run, TCP first, then unix sockets."""
    parts = []
    if rows:
        parts.append(work_tables(rows, "TCP loopback (127.0.0.1)"))
    if unix_rows:
        parts.append(work_tables(unix_rows, "unix sockets"))
    return "\n".join(p for p in parts if p)


def daemon_us_per_cycle(r):
    """The daemon's CPU µs per cycle of a run: daemon_cpu is its % of one
    core over the measured interval, cps the cycles/s over the same."""
    cpu, cps = num(r, "daemon_cpu"), num(r, "cps")
    if cpu is None or cpu < 0 or not cps:
        return None
    return cpu * 1e4 / cps


def tls_table(rows):
    """"TLS cost per cycle": the daemon over plain TCP vs over TLS."""
    for r in rows:
        v = daemon_us_per_cycle(r)
        r["daemon_us_per_cycle"] = "%.3f" % v if v is not None else "-1"
    g = group(rows)
    concs = sorted({c for (i, c) in g if i in ("daemon", "daemon-tls")})
    if not concs:
        return ""
    reps = max(len(v) for v in g.values())
    keys = ["cps", "p50_us", "p99_us", "cmds_per_cycle", "cpu_us_per_cycle",
            "daemon_us_per_cycle"]
    out = ["#### Daemon, nodes over plain TCP vs TLS (127.0.0.1), median of "
           "%d repetition(s)\n" % reps]
    table = []
    for c in concs:
        for i, n in (("daemon", "plain TCP"), ("daemon-tls", "TLS")):
            if g.get((i, c)):
                table.append(run_row(g, i, c, n, keys[3:]))
        cells = {}
        for k in keys:
            x, y = agg(g, "daemon-tls", c, k), agg(g, "daemon", c, k)
            if x is None or y is None or y <= 0:
                cells[k] = "n/a"
                continue
            cells[k] = "%.2f" % (x / y)
            per = paired(g, c, "daemon-tls", "daemon", k)
            if len(per) > 1:
                cells[k] += " (%.2f)" % med(per)
        table.append([c, "**TLS / plain**", cells["cps"],
                      "%s / %s" % (cells["p50_us"], cells["p99_us"]),
                      cells["cmds_per_cycle"], cells["cpu_us_per_cycle"],
                      cells["daemon_us_per_cycle"], ""])
    out += md_table(["clients", "nodes over", "cycles/s (min–max)",
                     "acquire p50 / p99 (µs)", "Redis cmds/cycle",
                     "Redis CPU µs/cycle", "daemon CPU µs/cycle", "errors"],
                    table)
    out.append("")
    return "\n".join(out)


def servers_table(rows):
    """"Per server kind": the daemon's cycle against five nodes of each
    kind (impl daemon@KIND), in the order the kinds ran."""
    g = group(rows)
    kinds = []
    for r in rows:
        i = r.get("impl", "")
        if i.startswith("daemon@") and i not in kinds:
            kinds.append(i)
    if not kinds:
        return ""
    concs = sorted({c for (i, c) in g if i in kinds})
    reps = max(len(v) for v in g.values())
    table = []
    for c in concs:
        for i in kinds:
            if not g.get((i, c)):
                continue
            table.append([c, "`%s`" % i.split("@", 1)[1],
                          fmt(agg(g, i, c, "cmds_per_cycle"), 2),
                          fmt(agg(g, i, c, "cpu_us_per_cycle"), 1),
                          cmd_mix(g, i, c),
                          errors_of(g.get((i, c), []))])
    out = ["#### Daemon, five nodes of each server kind (127.0.0.1), "
           "median of %d repetition(s)\n" % reps]
    out += md_table(["clients", "server", "Redis cmds/cycle",
                     "Redis CPU µs/cycle (indicative)",
                     "commands per cycle", "errors"], table)
    out.append("")
    return "\n".join(out)


def comparison_tables(rows):
    g = group(rows)
    concs = sorted({c for (_, c) in g})
    impls = [(i, n) for i, n in IMPLS if any((i, c) in g for c in concs)]
    if not concs:
        return "", {}
    reps = max(len(v) for v in g.values())
    out = []
    out.append("#### Throughput (cycles/s: acquire + release), median of %d "
               "rep(s), (min–max)\n" % reps)
    hdr = ["clients"] + [n for _, n in impls]
    hdr += ["daemon / limit", "daemon / limit, paired"]
    floor = any(i == "floor" for (i, _) in g)
    shared = any(i == "daemon-shared" for (i, _) in g)
    fcols = floor_columns(shared, False) if floor else []
    hdr += [h for h, _, _, _ in fcols]
    hdr += ["daemon / node-redlock", "daemon / node-redlock-ap"]
    table = []
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
        cells += [ratio(d, lim), fmt(med(per), 2) if per else "–"]
        cells += [ratio_cell(g, c, a, b, k) for _, a, b, k in fcols]
        cells += [ratio(d, nr, 1), ratio(d, nra, 1)]
        summary[c] = dict(daemon=d, limit=lim, nr=nr, nra=nra, paired=per)
        table.append(cells)
    out += md_table(hdr, table)
    out.append("")
    out.append("#### Latency (µs, medians over reps of each run's "
               "percentile)\n")
    table = []
    for c, i, n, rs in measured(g, concs, impls):
        table.append([c, n, fmt(agg(g, i, c, "p50_us")),
                      fmt(agg(g, i, c, "p99_us")),
                      fmt(agg(g, i, c, "p999_us")),
                      fmt(agg(g, i, c, "cyc_p50_us")),
                      fmt(agg(g, i, c, "cyc_p99_us")), errors_of(rs)])
        summary.setdefault(c, {})[i + "_p50"] = agg(g, i, c, "p50_us")
        summary[c][i + "_p99"] = agg(g, i, c, "cyc_p99_us")
    out += md_table(["clients", "implementation", "acquire p50",
                     "acquire p99", "acquire p99.9", "cycle p50", "cycle p99",
                     "errors (all reps)"], table)
    out.append("")
    out.append("#### Where the CPU went (median % of one core during the "
               "measured window)\n")
    out.append("The machine is shared: *machine* is all CPU in use on it "
               "(200 = both cores busy), *other* is what processes outside "
               "the benchmark used (machine − daemon − redis − generator). "
               "In the floor sidecar's rows, *daemon* is the floor's "
               "process.\n")
    table = []
    for c, i, n, rs in measured(g, concs, impls):
        others = []
        for r in rs:
            m = num(r, "machine_cpu")
            if m is None or m < 0:
                continue
            o = m - max(num(r, "daemon_cpu", 0), 0) - \
                max(num(r, "redis_cpu", 0), 0) - \
                max(num(r, "bench_cpu", 0), 0)
            others.append(max(o, 0))
        table.append([c, n] + [fmt(agg(g, i, c, k)) for k in (
            "daemon_cpu", "redis_cpu", "bench_cpu", "machine_cpu")] +
            [fmt(med(others))])
    out += md_table(["clients", "implementation", "daemon", "redis ×N",
                     "generator", "machine", "other"], table)
    out.append("")
    uu = sorted({int(num(r, "conc", 0)) for r in rows
                 if r.get("impl") == "limit-uuid"})
    if uu:
        out.append("#### The daemon's token source, priced in the limit\n")
        out.append("The limit normally takes its 128-bit tokens from "
                   "`getrandom()` (one call per 256 tokens). With "
                   "`--token uuid` it does what the daemon's "
                   "`locks_new_token()` does (one `uuid_generate_random()` "
                   "call per token), run right after the plain limit in "
                   "each repetition (medians; on this noisy machine the "
                   "difference is within the spread unless the table says "
                   "otherwise — the profile below is the sharper "
                   "measure):\n")
        out += md_table(
            ["clients", "limit, getrandom tokens (cycles/s)",
             "limit, libuuid tokens (cycles/s)",
             "acquire p50 getrandom / libuuid (µs)"],
            [[c, fmt(agg(g, "limit", c, "cps")) + spread(g, "limit", c, "cps"),
              fmt(agg(g, "limit-uuid", c, "cps")) +
              spread(g, "limit-uuid", c, "cps"),
              "%s / %s" % (fmt(agg(g, "limit", c, "p50_us")),
                           fmt(agg(g, "limit-uuid", c, "p50_us")))]
             for c in uu])
        out.append("")
    return "\n".join(out), summary


def renew_timeline(samples):
    if not samples:
        return ""
    table = []
    for r in samples:
        t = int(num(r, "t", 0))
        if t % 5 == 0 or t == 1:
            table.append([t, fmt(num(r, "cpu"), 1),
                          fmt(num(r, "rss_kb", 0) / 1024, 1),
                          fmt(num(r, "lost_events"))])
    out = ["Per-second samples of the daemon during the hold (every 5th "
           "second):\n"]
    out += md_table(["t (s)", "daemon CPU %", "daemon RSS (MB)",
                     "lost events so far"], table)
    return "\n".join(out) + "\n"


def renew_table(rows):
    rs = [r for r in rows if r.get("mode") == "renew"]
    if not rs:
        return "", None
    r = rs[-1]
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
    return "\n".join(md_table(["measure", "value"], items)) + "\n", r


def targets_table(summary, renew, g=None):
    """The cost targets (the lock cycle's and the renewals'), reported
    against the minimal limit; nothing here is asserted."""
    rows = []  # [target, measured, met?]
    g = g or {}

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
        met = yes(None if v is None else v >= 0.9)
        if pm is not None and v is not None and (pm >= 0.9) != (v >= 0.9):
            met = "%s by the ratio of medians, %s by the paired ratios" % (
                yes(v >= 0.9), yes(pm >= 0.9))
        rows.append(["daemon ≥ 0.9 × minimal limit at %d clients" % c,
                     "ratio of medians %s (%s vs %s cycles/s)%s" % (
                         "n/a" if v is None else "%.3f" % v, fmt(d),
                         fmt(lim), per_md), met])
    for c in (64, 256):
        dc = agg(g, "daemon", c, "cpu_us_per_cycle")
        lc = agg(g, "limit", c, "cpu_us_per_cycle")
        v = dc / lc if dc and lc else None
        rows.append(["Redis CPU per cycle within 10%% of the minimal limit's "
                     "at %d clients" % c, "%s (%s vs %s µs/cycle)" % (
                         "n/a" if v is None else "%.2f ×" % v, fmt(dc, 1),
                         fmt(lc, 1)),
                     yes(None if v is None else v <= 1.10)])
    # The same targets for clients sharing connections (as the client
    # libraries talk); rows of their own, beside the per-connection ones.
    for c in (64, 256):
        for key, what, ok in (("cps", "daemon ≥ 0.9 × minimal limit", 0.9),
                              ("cpu_us_per_cycle", "Redis CPU per cycle "
                               "within 10% of the minimal limit's", 1.10)):
            ds = agg(g, "daemon-shared", c, key)
            if ds is None:
                continue
            lv = agg(g, "limit", c, key)
            v = ds / lv if lv else None
            good = None if v is None else (v >= ok if key == "cps"
                                           else v <= ok)
            nd = 1 if key != "cps" else 0
            rows.append(["%s at %d clients, a connection per 16 clients" % (
                what, c), "%s (%s vs %s)" % (
                    "n/a" if v is None else "%.2f ×" % v, fmt(ds, nd),
                    fmt(lv, nd)), yes(good)])
    s = summary.get(256, {})
    d, lim = s.get("daemon"), s.get("limit")
    v = d / lim if d and lim else None
    rows.append(["stretch: daemon > 1.0 × minimal limit at 256 clients",
                 "n/a" if v is None else "%.3f" % v,
                 yes(None if v is None else v > 1.0)])
    s = summary.get(1, {})
    dp, lp = s.get("daemon_p50"), s.get("limit_p50")
    diff = dp - lp if dp is not None and lp is not None else None
    rows.append(["acquire p50, 1 client, within 30 µs of the minimal limit's",
                 "%s (%s vs %s µs)" % (
                     "n/a" if diff is None else "%+.0f µs" % diff, fmt(dp),
                     fmt(lp)), yes(None if diff is None else diff <= 30)])
    s = summary.get(64, {})
    d, nr = s.get("daemon"), s.get("nr")
    v = d / nr if d and nr else None
    rows.append(["daemon ≥ 8 × node-redlock at 64 clients",
                 "n/a" if v is None else "%.1f × (%s vs %s)" % (v, fmt(d),
                                                              fmt(nr)),
                 yes(None if v is None else v >= 8)])
    if renew:
        rss = num(renew, "rss_p50_kb", num(renew, "rss_held_kb"))
        rss_max = num(renew, "rss_held_kb")
        cpu = num(renew, "cpu_p50_pct", num(renew, "cpu_pct"))
        cpu_avg = num(renew, "cpu_pct")
        lost = num(renew, "lost_total", num(renew, "lost", 0))
        acq = num(renew, "acquired", 0)
        locks = num(renew, "locks", 0)
        rows.append(["%s renewing locks at ttl %s ms: RSS < 100 MB" % (
                         fmt(locks), renew.get("ttl_ms")),
                     "median %s MB, max %s MB" % (
                         fmt(rss / 1024 if rss else None, 1),
                         fmt(rss_max / 1024 if rss_max else None, 1)),
                     yes(rss is not None and rss < 100 * 1024)])
        rows.append(["… and CPU < 30% of one core",
                     "median %s%%, average %s%%" % (fmt(cpu, 1),
                                                    fmt(cpu_avg, 1)),
                     yes(cpu is not None and cpu < 30)])
        rows.append(["… with every lock kept (none lost, all acquired)",
                     "%s lost, %s of %s acquired" % (fmt(lost), fmt(acq),
                                                     fmt(locks)),
                     yes(lost == 0 and acq == locks)])
    return "\n".join(md_table(["target", "measured", "met?"], rows)) + "\n"


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
        table = []
        for t in ts:
            n = int(t[5:])
            d = next((r for r in by_tag[t] if r.get("impl") == "daemon"), {})
            lm = next((r for r in by_tag[t] if r.get("impl") == "limit"), {})
            table.append([n, n // 2 + 1, fmt(num(d, "cps")),
                          fmt(num(d, "cyc_p99_us")), fmt(num(lm, "cps")),
                          fmt(num(lm, "cyc_p99_us")),
                          ratio(num(d, "cps"), num(lm, "cps")),
                          fmt(num(d, "daemon_cpu")),
                          fmt(num(d, "redis_cpu"))])
        out += md_table(["nodes", "quorum", "daemon cycles/s",
                         "daemon cycle p99 (µs)", "limit cycles/s",
                         "limit cycle p99 (µs)", "daemon / limit",
                         "daemon CPU %", "redis CPU % (all)"], table)
        out.append("")
    ts = tagged("conns")
    if ts:
        out.append("#### Client connections (each one client with one "
                   "request in flight)\n")
        out += md_table(
            ["connections", "cycles/s", "acquire p50 (µs)",
             "cycle p99 (µs)", "daemon CPU %", "daemon RSS (kB)", "errors"],
            [[r.get("conc"), fmt(num(r, "cps")), fmt(num(r, "p50_us")),
              fmt(num(r, "cyc_p99_us")), fmt(num(r, "daemon_cpu")),
              fmt(num(r, "rss_kb")), r.get("errs")]
             for t in ts for r in by_tag[t] if r.get("mode") == "cycle"])
        out.append("")
    ts = tagged("idle")
    if ts:
        out.append("#### Idle connections (each sent one ping) while 16 "
                   "clients cycle\n")
        table = []
        for t in ts:
            idle = next((r for r in by_tag[t] if r.get("mode") == "idle"), {})
            cyc = next((r for r in by_tag[t]
                        if r.get("mode") == "connections"), {})
            table.append([idle.get("idle", t[4:]), "%s → %s" % (
                fmt(num(idle, "rss_base_kb")), fmt(num(idle, "rss_idle_kb"))),
                fmt(num(idle, "bytes_per_conn")), fmt(num(cyc, "cps")),
                fmt(num(cyc, "cyc_p99_us"))])
        out += md_table(["idle connections", "daemon RSS before → after (kB)",
                         "bytes per connection", "cycles/s (16 clients)",
                         "cycle p99 (µs)"], table)
        out.append("")
    ts = tagged("held")
    if ts:
        out.append("#### Held locks (not renewed, ttl 600 s) while 64 "
                   "clients cycle\n")
        out += md_table(
            ["held locks", "cycles/s", "acquire p50 (µs)", "cycle p99 (µs)",
             "daemon RSS (kB)"],
            [[r.get("held"), fmt(num(r, "cps")), fmt(num(r, "p50_us")),
              fmt(num(r, "cyc_p99_us")), fmt(num(r, "rss_kb"))]
             for t in ts for r in by_tag[t]])
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
                            % (dat, a, gq(n)) for a, _, n in lines),
        "set logscale y", "set ylabel 'ms'", "set title 'Cycle p99 latency'",
        "plot " + ", ".join("'%s' using 1:%d with linespoints lw 2 title '%s'"
                            % (dat, b, gq(n)) for _, b, n in lines),
        "unset multiplot",
    ]
    try:
        subprocess.run(["gnuplot"], input="\n".join(gp), text=True,
                       check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        print("report.py: gnuplot failed: %s" % e, file=sys.stderr)
        return False
    return True


def gq(text):
    """text inside a gnuplot single-quoted string."""
    return text.replace("'", "''")


def has_cairo():
    try:
        r = subprocess.run(["gnuplot", "-e", "set terminal"],
                           capture_output=True, text=True, timeout=20)
        return "pngcairo" in (r.stdout + r.stderr)
    except (OSError, subprocess.SubprocessError):
        return False


# ---- the document ----------------------------------------------------------

DEFAULT_ANALYSIS = """## What the tables show

(Hand-written; kept by report.py when the tables are regenerated.)
"""


def stamp(out_dir, section):
    t = read(os.path.join(out_dir, "commit-%s.txt" % section)).split()
    if not t:
        return ""
    src = ""
    if len(t) > 2 and t[2] != "none" and not t[0].startswith(t[2]):
        src = " (daemon sources, `sidecar/`, as of `%s`)" % t[2]
    return "*Daemon at commit `%s`%s, run %s.*\n" % (
        t[0], src, t[1] if len(t) > 1 else "")


def machine_kind(machine):
    """'2 cores, Intel(R) Xeon(R) Processor, KVM, 23.5 GiB' from
    machine.txt."""
    f = {}
    for line in machine.splitlines():
        k, _, v = line.partition(":")
        f[k.strip()] = v.strip()
    parts = []
    if f.get("CPU(s)"):
        parts.append("%s cores" % f["CPU(s)"])
    for k in ("Model name", "Hypervisor vendor", "memory"):
        if f.get(k):
            parts.append(f[k])
    text = ", ".join(parts) or "not recorded"
    if f.get("loadavg at start"):
        text += "; load average at the start %s" % " ".join(
            f["loadavg at start"].split()[:3])
    if f.get("redis"):
        text += "; %s" % " ".join(f["redis"].split()[:3])
    return text


def pinned_blocks(text):
    """The pinned sections of an existing BENCHMARKS.md, in order."""
    return re.findall(re.escape(P_BEGIN) + r".*?" + re.escape(P_END), text,
                      re.S)


def pin_block(args, rows, unix_rows, renew, tls_rows=(), server_rows=()):
    """A pinned section: this run's Redis-work tables (and its TLS cost
    table) under args.pin."""
    out_dir = args.out_dir
    t = read(os.path.join(out_dir, "commit-compare.txt")).split() or \
        read(os.path.join(out_dir, "commit-tls.txt")).split() or \
        read(os.path.join(out_dir, "commit-servers.txt")).split()
    machine = read(os.path.join(out_dir, "machine.txt"))
    doc = [P_BEGIN, "### %s\n" % args.pin]
    when = t[1] if len(t) > 1 else "?"
    doc.append("- **date**: %s" % when)
    if t:
        src = t[2] if len(t) > 2 and t[2] != "none" else t[0]
        doc.append("- **commit**: daemon sources (`sidecar/`) as of `%s`; "
                   "bench at `%s`" % (src, t[0]))
    doc.append("- **machine**: %s" % machine_kind(machine))
    if not rows and not unix_rows and not tls_rows:
        g = group(server_rows)
        reps = max([len(v) for v in g.values()] or [0])
        secs = med([num(r, "secs") for r in server_rows])
        kinds = []
        for r in server_rows:
            k = r.get("impl", "").partition("@")[2]
            if k and k not in kinds:
                kinds.append(k)
        doc.append("- **run**: `tests/bench/run.sh --server %s`, %d "
                   "repetition(s) of %s s per run, the kinds one after "
                   "the other, a fresh daemon and five fresh nodes for "
                   "each\n" % (",".join(kinds), reps,
                               fmt(secs, 1) if secs else "?"))
        doc[-1] = doc[-1].rstrip("\n")
        doc.append("- **servers**: %s\n" % "; ".join(
            ln.split(" sha=")[0][len("server "):]
            for ln in machine.splitlines() if ln.startswith("server ")))
        doc.append(servers_table(server_rows))
        doc.append(P_END)
        return "\n".join(doc)
    if not rows and not unix_rows:
        g = group(tls_rows)
        reps = max([len(v) for v in g.values()] or [0])
        secs = med([num(r, "secs") for r in tls_rows])
        doc.append("- **run**: `tests/bench/run.sh --tls`, %d repetition(s) "
                   "of %s s per run\n" % (reps, fmt(secs, 1) if secs
                                          else "?"))
        doc.append("#### TLS cost per cycle\n")
        doc.append(tls_table(tls_rows))
        doc.append(P_END)
        return "\n".join(doc)
    g = group(rows)
    reps = max([len(v) for v in g.values()] or [0])
    secs = med([num(r, "secs") for r in rows])
    doc.append("- **run**: `tests/bench/run.sh%s`, %d repetition(s) of %s s "
               "per run, daemon and limits interleaved (their order swapped "
               "every repetition)\n" % (
                   " --unix" if unix_rows else "", reps,
                   fmt(secs, 1) if secs else "?"))
    doc.append(work_section(out_dir, rows, unix_rows))
    _, summary = comparison_tables(rows)
    if summary:
        doc.append("#### Targets, nodes over %s (reported, not "
                   "asserted)\n" % ("TCP" if rows else "unix sockets"))
        doc.append(targets_table(summary, renew, group(rows)))
    if renew:
        doc.append("Renewing locks (daemon, TCP nodes): %s of %s locks at "
                   "ttl %s ms held %s s: RSS median %s MB, daemon CPU median "
                   "%s%% of one core, %s renewals/s, %s lost.\n" % (
                       renew.get("acquired"), renew.get("locks"),
                       renew.get("ttl_ms"), renew.get("secs"),
                       fmt(num(renew, "rss_p50_kb", 0) / 1024, 1),
                       renew.get("cpu_p50_pct"),
                       fmt(num(renew, "renew_per_s")),
                       fmt(num(renew, "lost_total", num(renew, "lost")))))
    if tls_rows:
        doc.append("#### TLS cost per cycle\n")
        doc.append(tls_table(tls_rows))
    if server_rows:
        doc.append("#### Per server kind\n")
        doc.append(servers_table(server_rows))
    doc.append(P_END)
    return "\n".join(doc)


def insert_pinned(text, blocks):
    """text with blocks placed at the top of its "Current measurements"
    section, below that heading's introduction, newest first. A text
    without that section gets one above its first "## " heading (or at its
    end)."""
    if not blocks:
        return text
    body = "\n\n".join(blocks) + "\n\n"
    i = text.find("\n" + CURRENT + "\n")
    if i < 0:
        body = CURRENT + "\n\n" + CURRENT_INTRO + "\n" + body
        i = text.find("\n## ")
        if i < 0:
            return text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
        return text[:i + 1] + body + text[i + 1:]
    # The introduction ends where the first subsection or section starts.
    start = i + len(CURRENT) + 2
    ends = [k for k in (text.find("\n### ", start), text.find("\n## ", start))
            if k >= 0]
    if not ends:
        return text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    k = min(ends)
    return text[:k + 1] + body + text[k + 1:]


def pin(args):
    """--pin: adds a pinned section to args.md, leaving the rest as is."""
    out_dir = args.out_dir
    rows = parse_results(os.path.join(out_dir, "results.txt"))
    unix_rows = parse_results(os.path.join(out_dir, "results-unix.txt"))
    tls_rows = parse_results(os.path.join(out_dir, "results-tls.txt"))
    server_rows = parse_results(os.path.join(out_dir,
                                             "results-servers.txt"))
    server_rows = parse_results(os.path.join(out_dir,
                                             "results-servers.txt"))
    _, renew = renew_table(parse_results(os.path.join(out_dir, "renew.txt")))
    if not rows and not unix_rows and not tls_rows and not server_rows:
        sys.exit("report.py: no results in %s to pin" % out_dir)
    rows = rows or unix_rows
    old = read(args.md) if os.path.exists(args.md) else TITLE
    blocks = pinned_blocks(old)
    for b in blocks:
        old = old.replace(b + "\n\n", "", 1).replace(b, "", 1)
    new = insert_pinned(old, [pin_block(args, rows, unix_rows, renew,
                                        tls_rows, server_rows)] +
                        blocks)
    with open(args.md, "w", encoding="utf-8") as f:
        f.write(new)
    print("report.py: pinned \"%s\" in %s" % (args.pin, args.md))


def build(args):
    out_dir = args.out_dir
    rows = parse_results(os.path.join(out_dir, "results.txt"))
    unix_rows = parse_results(os.path.join(out_dir, "results-unix.txt"))
    renew_rows = parse_results(os.path.join(out_dir, "renew.txt"))
    renew_samples = parse_results(os.path.join(out_dir, "renew.txt"),
                                  "SAMPLE")
    sc_rows = parse_results(os.path.join(out_dir, "scaling.txt"))
    tls_rows = parse_results(os.path.join(out_dir, "results-tls.txt"))
    server_rows = parse_results(os.path.join(out_dir,
                                             "results-servers.txt"))
    machine = read(os.path.join(out_dir, "machine.txt")).strip()
    notes = read(os.path.join(out_dir, "notes.txt")).strip()

    analysis = DEFAULT_ANALYSIS
    pinned = []
    if os.path.exists(args.md):
        old = read(args.md)
        i, j = old.find(A_BEGIN), old.find(A_END)
        if i >= 0 and j > i:
            analysis = old[i + len(A_BEGIN):j].strip("\n") + "\n"
        pinned = pinned_blocks(old)

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

    doc = [TITLE]
    doc.append("How fast redlockd takes and releases locks, what it asks of "
               "Redis for each, and what its locks cost in memory and CPU, "
               "against the cheapest correct Redlock client and "
               "node-redlock. First how it is measured, then the newest "
               "measurement of each thing, then what the changes to the "
               "lock path bought and what did not help. Generated by "
               "`tests/bench/run.sh`; the prose between the tables is "
               "written by hand.\n")
    doc.append(METHOD)
    doc.append("```\n%s\n```\n" % (machine or "(not recorded)"))
    doc.append(METHOD_END)
    doc.append(CURRENT + "\n")
    doc.append(CURRENT_INTRO)
    if pinned:
        doc.append("\n\n".join(pinned) + "\n")
    if summary:
        doc.append("### Targets (reported, not asserted)\n")
        doc.append(stamp(out_dir, "compare"))
        doc.append(targets_table(summary, renew, group(rows)))
    work = work_section(out_dir, rows, unix_rows)
    if work:
        doc.append("### Redis work per lock cycle\n")
        doc.append(stamp(out_dir, "compare"))
        doc.append(work)
    if comp:
        doc.append("### The lock cycle: daemon, limits and node-redlock\n")
        doc.append(stamp(out_dir, "compare"))
        doc.append(comp)
        if png_ok:
            rel = os.path.relpath(args.png, os.path.dirname(
                os.path.abspath(args.md)))
            doc.append("![throughput and p99 vs concurrency](%s)\n" % rel)
    if cont_md:
        doc.append("### Contention (the daemon's FIFO wait queues)\n")
        doc.append(stamp(out_dir, "compare"))
        doc.append("Acquire latency includes the wait.\n")
        doc.append(cont_md)
    if renew_md:
        doc.append("### Renewing locks\n")
        doc.append(stamp(out_dir, "renew"))
        doc.append(renew_md)
        doc.append(renew_timeline(renew_samples))
    tls = tls_table(tls_rows)
    if tls:
        doc.append("### TLS cost per cycle\n")
        doc.append(stamp(out_dir, "tls"))
        doc.append(tls)
    srv = servers_table(server_rows)
    if srv:
        doc.append("### Per server kind\n")
        doc.append(stamp(out_dir, "servers"))
        doc.append(srv)
    sc = scaling_tables(sc_rows)
    if sc:
        doc.append("### How cost grows\n")
        doc.append(stamp(out_dir, "scaling"))
        doc.append("Single runs of %s s, not medians.\n" % (
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
            # Paths relative to the repository: no machine's paths in it.
            root = os.path.abspath(args.root) + os.sep
            lines = [ln.replace(root, "") for ln in lines]
            doc.append("### Profile: %s\n" % title)
            doc.append(stamp(out_dir, "profile"))
            doc.append("```\n%s\n```\n" % "\n".join(lines))
    if notes:
        doc.append("### Notes from the run\n```\n%s\n```\n" % notes)
    doc.append(A_BEGIN)
    doc.append(analysis.rstrip("\n"))
    doc.append(A_END + "\n")
    raw = rows + unix_rows + renew_rows + sc_rows + tls_rows + server_rows
    if raw:
        doc.append("<details><summary>Raw RESULT lines</summary>\n")
        doc.append("```")
        for path in ("results.txt", "results-unix.txt", "renew.txt",
                     "scaling.txt", "results-tls.txt",
                     "results-servers.txt"):
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
    ap.add_argument("--pin", help="add this run's Redis-work tables to "
                    "--md as a kept section with this title, at the top of "
                    "its current measurements, and change nothing else")
    args = ap.parse_args()
    if not (args.out_dir and args.md and args.png):
        ap.error("--out-dir, --md and --png are required")
    if args.pin:
        pin(args)
    else:
        build(args)


if __name__ == "__main__":
    main()
