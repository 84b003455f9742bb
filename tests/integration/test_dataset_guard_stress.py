"""The data-set guard under contention: many clients acquire a few locks
through two daemons (SET NX GET and the script) while nodes get FLUSHALL,
SCRIPT FLUSH (the NOSCRIPT recovery holds commands back while guards are
due) and CLIENT PAUSE around the node timeout (guarded replies time out
and are read ahead late). No two holds of one resource may overlap, and
the daemons must stay up and stop cleanly (under ASan: no report)."""

import collections
import os
import random
import threading
import time

from rl import SLOW, Client, Closed, err_code, rname

SECONDS = float(os.environ.get("GUARD_STRESS_SECONDS", "8"))
QUARANTINE_MS = 2000  # the largest TTL asked for


def _holds_overlap(holds):
    by_res = collections.defaultdict(list)
    for h in holds:
        by_res[h["res"]].append(h)
    bad = []
    for hs in by_res.values():
        hs.sort(key=lambda h: h["start"])
        reach = None
        for h in hs:
            if reach is not None and h["start"] < reach["end"]:
                bad.append((reach, h))
            if reach is None or h["end"] > reach["end"]:
                reach = h
    return bad


def _client(d, resources, seed, until, holds, notes, lock):
    rnd = random.Random(seed)
    c = None
    for _ in range(100000):
        if time.monotonic() > until:
            break
        try:
            if c is None:
                c = Client(d.socket, timeout=5.0 * SLOW)
            res = rnd.choice(resources)
            ttl = rnd.choice((500, 1000, 2000))
            fence = rnd.random() < 0.3
            sent = time.monotonic()
            r = c.call("acquire", timeout=5.0 * SLOW, resource=res,
                       ttl_ms=ttl, fence=fence,
                       wait_ms=0 if rnd.random() < 0.6 else 100)
            t0 = time.monotonic()
            if err_code(r) is not None:
                time.sleep(rnd.uniform(0.0, 0.01))
                continue
            time.sleep(rnd.uniform(0.0, 0.03))
            t1 = time.monotonic()
            # validity runs from the round's start, after `sent`
            end = min(t1, sent + r["validity_ms"] / 1000.0)
            with lock:
                holds.append({"res": res, "start": t0, "end": end,
                              "daemon": d.name, "lock": r["lock"]})
            c.call("release", timeout=5.0 * SLOW, lock=r["lock"])
        except (OSError, Closed) as e:
            with lock:
                notes.append("client %d: %r" % (seed, e))
            if c is not None:
                c.close()
            c = None
            time.sleep(0.05)
    if c is not None:
        c.close()


def _nemesis(cluster, seed, until, events):
    rnd = random.Random(seed)
    for _ in range(10000):
        if time.monotonic() + 0.3 > until:
            break
        nd = rnd.choice(cluster.nodes)
        what = rnd.random()
        try:
            if what < 0.1:
                nd.cmd("FLUSHALL")
                events.append("FLUSHALL n%d" % nd.k)
            elif what < 0.5:
                nd.cmd("SCRIPT", "FLUSH")
                events.append("SCRIPT FLUSH n%d" % nd.k)
            elif what < 0.9:
                ms = rnd.choice((20, 80, 150, 250, 400))
                nd.cmd("CLIENT", "PAUSE", str(ms))
                events.append("CLIENT PAUSE %d n%d" % (ms, nd.k))
            else:
                # SCRIPT FLUSH then FLUSHALL back to back: a NOSCRIPT
                # recovery and a lost mark in the same window
                nd.cmd("SCRIPT", "FLUSH")
                nd.cmd("FLUSHALL")
                events.append("SCRIPT FLUSH+FLUSHALL n%d" % nd.k)
        except OSError as e:
            events.append("n%d: %r" % (nd.k, e))
        time.sleep(rnd.uniform(0.02, 0.25))


def test_guard_under_flush_scriptflush_pause(cluster, daemon_factory):
    common = ["--quarantine-ms", str(QUARANTINE_MS),
              "--node-timeout-ms", str(int(150 * SLOW))]
    a = daemon_factory.start(cluster, name="gsa", extra=common)
    b = daemon_factory.start(cluster, name="gsb",
                             extra=common + ["--acquire-script"])
    resources = [rname("gs") for _ in range(3)]
    seed = int(os.environ.get("GUARD_STRESS_SEED", random.randrange(1 << 30)))
    until = time.monotonic() + SECONDS
    holds, notes, events = [], [], []
    lock = threading.Lock()
    threads = [threading.Thread(
        target=_client, daemon=True,
        args=(d, resources, seed + i, until, holds, notes, lock))
        for i, d in enumerate([a, b] * 4)]
    threads.append(threading.Thread(target=_nemesis, daemon=True,
                                    args=(cluster, seed, until, events)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 30.0 * SLOW)
    assert not any(t.is_alive() for t in threads), "threads stuck"
    bad = _holds_overlap(holds)
    assert not bad, ("seed %d: overlapping holds %r\nevents %r" %
                     (seed, bad[:5], events[-40:]))
    assert a.alive() and b.alive(), (seed, notes[:10])
    print("seed %d: %d holds, %d events, %d notes" %
          (seed, len(holds), len(events), len(notes)))
