#!/usr/bin/env python3
"""tests/bench/native_cost.py: what an extend (or a release) costs a server
per key through its native compare-and-set (compare-and-delete) command,
against the daemon's scripts, measured in the server itself.

Starts one throw-away server (unix socket under a temp dir, no
persistence) and, for each shape, sets N keys and then extends (or
releases) every one with its own token, a turn of K keys at a time: the
K keys' commands written at once and their replies read before the next
turn, as the daemon writes one node's batch at the end of a loop turn.
It reads the server's whole CPU time over that work (INFO cpu,
used_cpu_user + used_cpu_sys: parsing and replies included) and the time
its commands took (INFO commandstats usec, summed), and prints
microseconds per key, the median and the minimum over the repetitions.

    tests/bench/native_cost.py --redis-server tests/compat/redis-server \\
        [--reps 7] [--keys 20000] [--batch 1,8,64] [--release MODULE.so]

The extend shapes run where COMMAND DOCS SET lists IFEQ (Valkey 8.1: run it with
REDLOCKD_COMPAT_SERVERS=valkey-8.1 and tests/compat/redis-server). With
--release, the server loads that module (tests/modules/delifeq.c) and the
release shapes run too: DELIFEQ per key against SCRIPT_RELEASE and
SCRIPT_BATCH_RELEASE. Bounded: a fixed number of keys, the server stopped
on exit. Stdlib only.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from script_cost import ROOT, Redis, scripts_from_source  # noqa: E402

TTL = 30000


def cpu_and_usec(r, shape):
    """The server's CPU time so far, and the usec of the shape's own
    command (a script's includes the calls inside it, which commandstats
    counts again on their own lines)."""
    cpu = r.call("INFO", "cpu").decode()
    secs = sum(float(v) for v in re.findall(
        r"used_cpu_(?:user|sys):([0-9.]+)", cpu))
    cmd = {"set-ifeq": "set", "delifeq": "delifeq"}.get(shape, "evalsha")
    stats = r.call("INFO", "commandstats").decode()
    m = re.search(r"cmdstat_%s:calls=\d+,usec=(\d+)," % cmd, stats)
    return secs * 1e6, int(m.group(1)) if m else 0


def turns(shape, sha, keys, toks, batch):
    """The turns (lists of commands) that extend or release every key."""
    out = []
    for i in range(0, len(keys), batch):
        ks, ts = keys[i:i + batch], toks[i:i + batch]
        n = len(ks)
        if shape == "set-ifeq":
            out.append([Redis.enc("SET", k, t, "IFEQ", t, "PX", TTL)
                        for k, t in zip(ks, ts)])
        elif shape == "delifeq":
            out.append([Redis.enc("DELIFEQ", k, t) for k, t in zip(ks, ts)])
        elif shape == "SCRIPT_EXTEND":
            out.append([Redis.enc("EVALSHA", sha, 1, k, t, TTL)
                        for k, t in zip(ks, ts)])
        elif shape == "SCRIPT_RELEASE":
            out.append([Redis.enc("EVALSHA", sha, 1, k, t, "")
                        for k, t in zip(ks, ts)])
        elif shape == "SCRIPT_BATCH_EXTEND":
            out.append([Redis.enc("EVALSHA", sha, n, *ks, *ts,
                                  *([TTL] * n))])
        else:
            out.append([Redis.enc("EVALSHA", sha, n, *ks, *ts)])
    return out


def acted(replies):
    flat = [x for o in replies for x in (o if isinstance(o, list) else [o])]
    return all(x in (b"1", b"OK") for x in flat), len(flat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--batch", default="1,8,64")
    ap.add_argument("--redis-server", default=shutil.which("redis-server"))
    ap.add_argument("--release", metavar="MODULE.so")
    ap.add_argument("--no-extend", action="store_true")
    a = ap.parse_args()
    batches = [int(x) for x in a.batch.split(",")]
    src = scripts_from_source(os.path.join(ROOT, "sidecar", "scripts.c"))
    tmp = tempfile.mkdtemp(prefix="rl-native-cost-")
    path = os.path.join(tmp, "n1.sock")
    argv = [a.redis_server, "--port", "0", "--unixsocket", path, "--save",
            "", "--appendonly", "no", "--dir", tmp]
    if a.release:
        argv += ["--loadmodule", os.path.abspath(a.release)]
    srv = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(path):
            if time.monotonic() > deadline or srv.poll() is not None:
                sys.exit("native_cost.py: the server did not start")
            time.sleep(0.02)
        time.sleep(0.1)
        r = Redis(path)
        sha = {n: r.call("SCRIPT", "LOAD", s).decode()
               for n, s in src.items()}
        shapes = []
        docs = r.call("COMMAND", "DOCS", "SET") if not a.no_extend else []
        for b in batches:
            if b"IFEQ" in repr(docs).encode():
                shapes += [("extend", "set-ifeq", b),
                           ("extend", "SCRIPT_EXTEND", b)]
                if b > 1:
                    shapes.append(("extend", "SCRIPT_BATCH_EXTEND", b))
            if a.release:
                shapes += [("release", "delifeq", b),
                           ("release", "SCRIPT_RELEASE", b)]
                if b > 1:
                    shapes.append(("release", "SCRIPT_BATCH_RELEASE", b))
        keys = ["redlock:cost:%d" % i for i in range(a.keys)]
        toks = ["%032x" % (i * 2654435761) for i in range(a.keys)]
        res = {s: ([], []) for s in shapes}
        for _ in range(a.reps):
            for s in shapes:  # interleaved repetitions
                _, shape, b = s
                r.pipeline([Redis.enc("SET", k, t, "PX", 600000)
                            for k, t in zip(keys, toks)])
                work = turns(shape, sha.get(shape), keys, toks, b)
                r.call("CONFIG", "RESETSTAT")
                cpu0, _ = cpu_and_usec(r, shape)
                replies = []
                for t in work:
                    replies += r.pipeline(t)
                cpu1, usec = cpu_and_usec(r, shape)
                ok, n = acted(replies)
                if not ok or n != a.keys:
                    sys.exit("native_cost.py: %s did not act on every key"
                             % (s,))
                res[s][0].append((cpu1 - cpu0) / a.keys)
                res[s][1].append(usec / a.keys)
                r.call("FLUSHALL")
        print("| op | form | keys per turn | server CPU µs per key, "
              "median (min) | command µs per key, median (min) |")
        print("|---|---|---|---|---|")
        for s in shapes:
            cpu, usec = res[s]
            print("| %s | %s | %d | %.2f (%.2f) | %.2f (%.2f) |" % (
                s[0], s[1], s[2], statistics.median(cpu), min(cpu),
                statistics.median(usec), min(usec)))
    finally:
        srv.terminate()
        srv.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
