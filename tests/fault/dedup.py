#!/usr/bin/python3
"""dedup.py: the "never handle the same update twice" promise under faults.

    /usr/bin/python3 tests/fault/dedup.py [--only NAME[,NAME]] [--seed N]
                                          [--long] [--json out.json] [-v]

The bot-fleet pattern of proto/README.md ("complete"): a worker acquires
`update:<id>` (fenced), handles the update, then sends `complete` with a
keep_ms longer than the scenario, which turns the lock into a done mark;
later acquires answer `done`. Every id is offered to several workers (as
when several bot instances receive the same update). The worlds and
nemeses are nemesis.py's own; only the workload and the checker are new.

Checker (per id):
  (a) once: a handling whose `complete` answered ok is the last one: no
      other handling starts after it began (while keep_ms lasts);
  (b) no two handlings overlap within validity (nemesis.check_holds);
  (c) fences strictly increase (nemesis.check_holds);
  (d) an acquire answered `done` is never followed by a won acquire
      within keep_ms when the id had a complete answered ok. A `done`
      seen through marks that no ok complete left (its complete answered
      no_quorum or never arrived) promises nothing: those are counted
      (`dw~`), not failed on. See tests/fault/README.md.
Overlaps and repeats that a forward clock jump explains are reported
apart, as nemesis.py does (Redlock assumes bounded clock drift).

The scripted pair dedup-safe / dedup-unsafe shows the checker failing:
a complete that reached three nodes, two of them restarted empty; with
--unsafe-no-quarantine --unsafe-no-fence-repair the update is handled again.
dedup-rolling restarts every node in turn within one quarantine period:
no sound read exists at the end, yet the marks must survive (each node
copies them at once from the nodes up); its repeats are not excused.
"""

import argparse
import collections
import contextlib
import datetime
import json
import random
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nemesis  # noqa: E402
import rl  # noqa: E402  (put on sys.path by nemesis)

KEEP_MS = 120000       # longer than any run, a 60 s clock jump included
COPIES = 3             # workers each update is offered to
RETRIES = 4            # re-offers of one id after busy / no_quorum / failure
TTL_CHOICES = (1000, 1500, 2000)   # <= nemesis.QUARANTINE_MS
CLIENT_ERRORS = (OSError, rl.Closed, socket.timeout)

# Which nemeses, and why the others are left out:
#   baseline: the contention-only control;
#   restart, restart-aof, flush: nodes lose (or keep) their marks: the
#     quarantine and the mark repair are what the promise rests on;
#   pause-minority, pause-majority: completes and acquires that see too few
#     nodes (no_quorum), marks on a minority;
#   proxy-partition: the daemons disagree about which nodes are up;
#   daemon-kill: workers lose their daemon between handling and complete;
#   clock-jump: marks expire early on one node (keep_ms is judged by the
#     node's clock); a 60 s jump is far inside KEEP_MS, so only Redlock's
#     own clock limit remains;
#   mixed: all of them in turn.
# Left out: client-kill (its killed processes hold plain locks, not
# updates: our crashing workers, who close the connection between handling
# and complete, stand for it), proxy-delay / -drop / -reset / -loss (the
# same "d1 reaches fewer nodes" as proxy-partition, with timing
# variations that the plain suite already covers), nft-drop (root only).
SCENARIOS = ["baseline", "restart", "restart-aof", "flush", "pause-minority",
             "pause-majority", "proxy-partition", "daemon-kill", "clock-jump",
             "mixed"]


class Feed:
    """The shared list of update deliveries: each new id is offered COPIES
    times in a row; an id that was busy, got no quorum or failed is offered
    again at the end (at most RETRIES times)."""

    def __init__(self, max_ids=100000):
        self.lock = threading.Lock()
        self.queue = collections.deque()
        self.next_id = 0
        self.max_ids = max_ids
        self.again_count = collections.Counter()

    def pop(self):
        with self.lock:
            if not self.queue and self.next_id < self.max_ids:
                self.queue.extend([self.next_id] * COPIES)
                self.next_id += 1
            return self.queue.popleft() if self.queue else None

    def again(self, uid):
        with self.lock:
            if self.again_count[uid] < RETRIES:
                self.again_count[uid] += 1
                self.queue.append(uid)


class DedupRecorder(nemesis.Recorder):
    """nemesis.Recorder (for the mixed nemesis's killed clients) plus every
    acquire of an update and every handling with its complete."""

    def __init__(self):
        super().__init__()
        self.acquires = []    # {"id", "sent", "recv", "code", "daemon"}
        self.handlings = []   # hold fields + "id", "complete", "c_recv"

    def acquire(self, **a):
        with self.lock:
            self.acquires.append(a)

    def handling(self, **h):
        """A handling is a hold too: nemesis.finish() checks (b), (c)."""
        with self.lock:
            self.handlings.append(h)
            self.holds.append(h)


class DedupWorkers(nemesis.Workers):
    """Client threads pulling update ids from one Feed; nemesis.Workers
    gives the thread frame (start, stop, bounded loops)."""

    def __init__(self, world, rec, n_threads, seed, feed, keep_ms=KEEP_MS,
                 failing=True):
        super().__init__(world, rec, n_threads, [], seed)
        self.feed = feed
        self.keep_ms = keep_ms
        self.failing = failing   # some handlers crash or fail

    def _run(self, i):
        rnd = random.Random(self.seed * 1000 + i)
        dname = self.daemons[i % len(self.daemons)]
        sock = self.world.daemon(dname).socket
        c = None
        try:
            for _ in range(self.max_iter):
                if self._done():
                    break
                uid = self.feed.pop()
                if uid is None:
                    break
                if c is None:
                    try:
                        c = rl.Client(sock, timeout=5.0)
                    except OSError:
                        self.rec.attempt(None, "connect")
                        self.feed.again(uid)
                        time.sleep(0.05)
                        continue
                try:
                    c = self._one(rnd, c, uid, dname)
                except CLIENT_ERRORS as e:
                    self.rec.attempt(None, "timeout" if isinstance(
                        e, socket.timeout) else "closed")
                    self.feed.again(uid)
                    c.close()
                    c = None
                    time.sleep(0.05)
        except Exception:
            self.rec.notes.append("worker t%d crashed: %s" % (
                i, traceback.format_exc()))
        finally:
            if c is not None:
                c.close()

    def _one(self, rnd, c, uid, dname):
        """One delivery: acquire, handle, complete (or fail, or crash).
        Returns the connection to go on with (None after a crash)."""
        res = "update:%d" % uid
        ttl = rnd.choice(TTL_CHOICES)
        wait = rnd.choice((0, 0, 200, 600))
        t_send = time.monotonic()
        r = c.call("acquire", timeout=(ttl + wait) / 1000.0 + 5.0 * nemesis.SLOW,
                   resource=res, ttl_ms=ttl, wait_ms=wait, fence=True)
        t_recv = time.monotonic()
        code = rl.err_code(r)
        self.rec.attempt((t_recv - t_send) * 1000.0, code or "ok")
        self.rec.acquire(id=uid, sent=t_send, recv=t_recv, code=code or "ok",
                         daemon=dname)
        if code is not None:
            if code != "done":
                self.feed.again(uid)
            time.sleep(rnd.uniform(0.005, 0.03))
            return c
        v = r["validity_ms"] / 1000.0
        time.sleep(rnd.uniform(0.01, 0.08) if rnd.random() < 0.9
                   else rnd.uniform(0.3, 0.6) * v)
        h = dict(id=uid, resource=res, start=t_recv, sent=t_send,
                 end=time.monotonic(), fence=r.get("fence"),
                 validity_ms=r["validity_ms"], daemon=dname, ttl=ttl,
                 complete=None, c_recv=None)
        fate = rnd.random() if self.failing else 1.0
        if fate < 0.04:       # the worker dies before it can complete
            h["complete"] = "crashed"
            self.rec.handling(**h)
            self.feed.again(uid)
            c.close()
            return None
        op = "release" if fate < 0.08 else "complete"  # the handler failed
        kw = {"keep_ms": self.keep_ms} if op == "complete" else {}
        try:
            rr = c.call(op, timeout=5.0 * nemesis.SLOW, lock=r["lock"], **kw)
            h["complete"] = (op + ":" if op == "release" else "") + (
                rl.err_code(rr) or "ok")
        except CLIENT_ERRORS:
            h["complete"] = op + ":closed"
            raise
        finally:
            h["c_recv"] = time.monotonic()
            self.rec.handling(**h)
        if h["complete"] != "ok":
            self.feed.again(uid)
        return c


# --------------------------------------------------------------------------
# the checker

def check_dedup(handlings, acquires, keep_ms, jumps):
    """{"again": [(h, h2)], "again_clock": [...], "done_won": [(a, h2)],
    "done_won_free": [(a, h2)]}.

    again: h's complete answered ok, and h2, another handling of the id,
    started after h did, within keep_ms of h's complete. A complete ok
    means a quorum held the mark, each placed where h's token held; h2
    needed a quorum of its own SET NX, so one node saw h2's SET where h's
    token or mark had to be absent: either h's lock was gone there (then
    the mark was not placed there) or the mark was lost, which the
    quarantine and repair must undo. A repeat a clock jump explains goes
    to again_clock.

    done_won: an acquire answered `done`, then a won acquire (h2's) sent
    after that answer and within keep_ms, of an id with a complete answered
    ok by a handling that began before h2; done_won_free: the same where
    no such complete exists (the marks were a minority's: no promise)."""
    by_id = collections.defaultdict(list)
    for h in handlings:
        by_id[h["id"]].append(h)
    out = {"again": [], "again_clock": [], "done_won": [],
           "done_won_free": []}
    for hs in by_id.values():
        for h in hs:
            if h["complete"] != "ok":
                continue
            for h2 in hs:
                if h2 is h or h2["start"] <= h["start"] or \
                        h2["start"] > h["end"] + keep_ms / 1000.0:
                    continue
                key = "again_clock" if nemesis.clock_explained(
                    h, h2, jumps) else "again"
                out[key].append((h, h2))
    for a in acquires:
        if a["code"] != "done":
            continue
        for h2 in by_id.get(a["id"], ()):
            if not a["recv"] < h2["sent"] < a["recv"] + keep_ms / 1000.0:
                continue
            promised = any(h["complete"] == "ok" and h["start"] < h2["start"]
                           for h in by_id[a["id"]])
            out["done_won" if promised else "done_won_free"].append((a, h2))
    return out


def fmt_handling(h, t0):
    return "%s complete=%s%s" % (nemesis.fmt_hold(h, t0), h["complete"],
                                 "" if h["c_recv"] is None else
                                 " at %.3f" % (h["c_recv"] - t0))


def judge(w, rec, keep_ms=KEEP_MS):
    """The dedup checks (a) and (d), plus (b) and (c) over the handlings
    and nemesis.finish() over everything (killed clients' holds, RSS,
    exits). Done marks are expected to stay: no leftover check."""
    r = nemesis.finish(w, rec, wait_ttl=False)
    r.pop("leftovers", None)
    r["leftovers"] = {}
    hs = rec.handlings
    d = check_dedup(hs, rec.acquires, keep_ms, w.clock_jumps)
    r["handlings"] = len(hs)
    r["ids"] = len({h["id"] for h in hs})
    r["completes"] = dict(collections.Counter(h["complete"] for h in hs))
    r["dedup_codes"] = dict(collections.Counter(a["code"]
                                                for a in rec.acquires))
    be = best_effort_times(w)
    r["best_effort_repairs"] = len(be)
    ok_end = {}   # id -> the earliest end of a handling completed ok
    for h in hs:
        if h["complete"] == "ok":
            ok_end[h["id"]] = min(h["end"], ok_end.get(h["id"], h["end"]))
    for k in ("again", "done_won"):
        d[k], d[k + "_be"] = _split(d[k], lambda b: any(
            t is None or ok_end.get(b["id"], b["start"]) <= t <= b["start"]
            for t in be))
    for k, pairs in d.items():
        r[k] = len(pairs)
        r[k + "_examples"] = [
            ("done answered at %.3f via %s" % (a["recv"] - w.t0, a["daemon"])
             if "code" in a else fmt_handling(a, w.t0),
             fmt_handling(b, w.t0)) for a, b in pairs[:5]]
    return r


def _split(pairs, pred):
    """(pairs whose second item fails pred, pairs whose second passes)."""
    return ([p for p in pairs if not pred(p[1])],
            [p for p in pairs if pred(p[1])])


def best_effort_times(w):
    """Monotonic times of the daemons' best-effort repairs ("no sound read
    exists": done marks may be lost from then on); None for a line whose
    time cannot be read (it then excuses every repeat)."""
    off = time.time() - time.monotonic()
    out = []
    for dm in w.daemons:
        for ln in dm.stderr_grep("no sound read"):
            try:
                t = datetime.datetime.strptime(
                    ln.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                        tzinfo=datetime.timezone.utc).timestamp() - off
            except (ValueError, IndexError):
                t = None
            out.append(t)
    return out


def dedup_verdict(r, expect_violations=False):
    """nemesis.verdict (overlaps, fences, RSS, exits, notes) plus (a), (d).
    A repeat that started after a best-effort repair (a daemon logged that
    no sound read existed) logged after the id's first ok complete was sent
    is what the docs allow: counted apart (again_be, done_won_be), not
    failed on, except in the scenarios of STRICT."""
    bad = nemesis.verdict(r, expect_violations=expect_violations)
    if r.get("skipped") or r.get("error"):
        return bad
    seen = r["again"] + r["done_won"] + r["again_be"] + r["done_won_be"]
    if expect_violations:
        if not seen:
            bad.append("expected an update handled again, saw none")
        return [b for b in bad if not b.startswith("expected overlaps")]
    strict = r.get("name") in STRICT
    again = r["again"] + (r["again_be"] if strict else 0)
    won = r["done_won"] + (r["done_won_be"] if strict else 0)
    if again:
        bad.append("%d handlings after a complete ok" % again)
    if won:
        bad.append("%d acquires won after done" % won)
    return bad


# --------------------------------------------------------------------------
# running

def _sample_rss(w, stop):
    """Each daemon's VmRSS every 0.5 s until stop is set (bounded)."""
    for _ in range(100000):
        if stop.wait(0.5):
            return
        for d in w.daemons:
            d.sample_rss()


@contextlib.contextmanager
def _healed_after(w):
    """Every fault undone when the nemesis returns or raises."""
    try:
        yield
    finally:
        w.heal()
        w.event("healed")


def run_dedup(name, long=False, seed=None, keep_ms=KEEP_MS):
    fn, opts = nemesis.NEMESES[name]
    seed = seed if seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    duration = (40.0 if name == "mixed" else 20.0) if long else \
        (6.0 if name == "mixed" else 4.0)
    w = nemesis.World(n_daemons=3 if long else 2, daemon_extra=[
        "--quarantine-ms", str(nemesis.QUARANTINE_MS)], **opts)
    rec = DedupRecorder()
    ctx = {"rec": rec, "resources": ["bg-%d" % i for i in range(2)]}
    result = {"name": name, "seed": seed}
    workers = None
    with nemesis.scenario(w, result, lambda: workers and workers.stop()):
        workers = DedupWorkers(w, rec, 16 if long else 10, seed, Feed(),
                               keep_ms).start(duration + 60.0)
        sampling = threading.Event()
        threading.Thread(target=_sample_rss, args=(w, sampling),
                         daemon=True).start()
        time.sleep(0.3)
        until = time.monotonic() + duration
        with _healed_after(w):
            fn(w, rnd, until, ctx)
        # The rest of the slot, then a quiet tail: served again once healed.
        time.sleep(max(0.0, until - time.monotonic()) + 1.0)
        workers.stop()
        sampling.set()
        for d in (d for d in w.daemons if not d.alive()):
            d.start()
        result.update(judge(w, rec, keep_ms))
    return result


def run_scripted(unsafe, cycles=2, rolling=False):
    """A complete that reached exactly three nodes (d1's proxies partition
    the other two), then two of those three killed -9 and restarted empty,
    then a second worker asks d2 for the same update until the quarantine
    is over and the nodes are repaired. With the defaults d2 quarantines
    the two and copies the mark back from the third: `done`. With
    --unsafe-no-quarantine --unsafe-no-fence-repair one mark is left
    against four free nodes and the update is handled again.

    rolling: the defaults, no partition (the mark is on all five), and a
    rolling restart: each node in turn killed -9 and restarted empty,
    0.4 s apart, so that four are always up: every node restarted within
    one quarantine period, no sound read at its end, and the marks kept
    by the copy each node gets at once (README)."""
    extra = ["--quarantine-ms", str(nemesis.QUARANTINE_MS)]
    if unsafe:
        extra += ["--unsafe-no-quarantine", "--unsafe-no-fence-repair"]
    w = nemesis.World(n_daemons=2, daemon_extra=extra)
    rec = DedupRecorder()
    result = {"name": "dedup-rolling" if rolling else
              "dedup-unsafe" if unsafe else "dedup-safe", "seed": None}
    waves = tuple((j,) for j in range(5)) if rolling else ((0, 1),)
    with nemesis.scenario(w, result):
        for cyc in range(cycles):
            ks = [(cyc * 2 + j) % 5 for j in range(5)]
            cut = 5 if rolling else 3
            _scripted_cycle(w, rec, cyc, ks[:cut], ks[cut:], waves)
        result.update(judge(w, rec))
    return result


def _scripted_cycle(w, rec, cyc, marked, apart, waves):
    """marked: the node indexes d1 reaches; apart: the others; waves: the
    positions in marked restarted together, 0.4 s apart."""
    for k in apart:
        w.proxies[k].cmd("partition")
    w.event("d1 reaches n%s only" % ",".join(str(k + 1) for k in marked))
    uid = 1000 + cyc
    worker = DedupWorkers(w, rec, 1, cyc, Feed(), failing=False)
    a = rl.Client(w.daemon("d1").socket, timeout=5.0)
    b = rl.Client(w.daemon("d2").socket, timeout=5.0)
    try:
        rnd = random.Random(cyc)
        for _ in range(20):   # the first try may meet the partition
            worker._one(rnd, a, uid, "d1")
            if rec.handlings and rec.handlings[-1]["id"] == uid and \
                    rec.handlings[-1]["complete"] == "ok":
                break
        for i, wave in enumerate(waves):
            time.sleep(0.4 if i else 0.0)
            for k in (marked[j] for j in wave):
                w.nodes[k].kill9()
                w.nodes[k].start()
            w.last_node_restart = time.monotonic()
            w.event("restarted n%s empty" % ",".join(
                str(marked[j] + 1) for j in wave))
        w.heal()
        # B asks until the last quarantine is over and the repair done.
        until = time.monotonic() + nemesis.QUARANTINE_MS / 1000.0 + 1.5
        for _ in range(400):
            if time.monotonic() > until:
                break
            worker._one(rnd, b, uid, "d2")
            time.sleep(0.03)
    finally:
        a.close()
        b.close()


SCRIPTED = collections.OrderedDict([
    ("dedup-safe", lambda cycles=3: run_scripted(False, cycles)),
    ("dedup-unsafe", lambda cycles=3: run_scripted(True, cycles)),
    ("dedup-rolling", lambda cycles=3: run_scripted(False, cycles, True)),
])
EXPECT_VIOLATIONS = {"dedup-unsafe"}
# Repeats after a best-effort repair fail these too: the marks must have
# been copied at once, before the next node went down.
STRICT = {"dedup-rolling"}


def run(name, long=False, seed=None):
    if name in SCRIPTED:
        return SCRIPTED[name](6 if long else 3)
    return run_dedup(name, long=long, seed=seed)


def print_row(r, out=sys.stdout):
    if r.get("skipped") or r.get("error"):
        nemesis.print_table([r], out=out)
        return
    print("%-16s seed=%-10s ids=%-4d handlings=%-4d again=%d clk=%d "
          "done-won=%d dw~=%d after-best-effort=%d ovlp=%d fence=%d "
          "best-effort=%d "
          "completes=%s acquires=%s" % (
              r["name"], r["seed"], r["ids"], r["handlings"], r["again"],
              r["again_clock"] + r["overlaps_clock"], r["done_won"],
              r["done_won_free"], r["again_be"] + r["done_won_be"],
              r["overlaps"], r["fence_violations"],
              r["best_effort_repairs"], r["completes"], r["dedup_codes"]),
          file=out)
    for k in ("again", "done_won", "done_won_free", "again_clock",
              "again_be", "done_won_be"):
        for a, b in r.get(k + "_examples", []):
            print("    %-13s %s\n                  then %s" % (k, a, b),
                  file=out)
    nemesis.print_details(r, out=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", action="store_true")
    ap.add_argument("--only", help="comma separated scenario names")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    nemesis.VERBOSE = a.verbose
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = SCENARIOS + list(SCRIPTED)
    if a.only:
        names = [s.strip() for s in a.only.split(",") if s.strip()]
    results, failed = [], []
    for n in names:
        t = time.monotonic()
        r = run(n, long=a.long, seed=a.seed)
        r["seconds"] = round(time.monotonic() - t, 1)
        results.append(r)
        print_row(r)
        bad = dedup_verdict(r, expect_violations=n in EXPECT_VIOLATIONS)
        if bad:
            failed.append(n)
            print("    FAIL: %s" % "; ".join(bad))
        for t_, e in r.get("events", []) if a.verbose else []:
            print("    %7.3f %s" % (t_, e))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    print("%d passed, %d failed" % (len(results) - len(failed), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
