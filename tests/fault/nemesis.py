#!/usr/bin/python3
"""nemesis.py: fault injection against redlockd, with a safety checker.

    /usr/bin/python3 tests/fault/nemesis.py [--long] [--only NAME[,NAME]]
                                            [--json out.json] [--list] [-v]

Each scenario starts its own world in a fresh temp dir: five real
redis-servers (TCP on 127.0.0.1:<free port> and a unix socket each), one
tests/fault/faultproxy per node in front of each TCP port, and two daemons
(three with --long): d1 reaches every node through its proxy, d2 through the
node's TCP port directly, d3 (--long) through its unix socket. Client threads
(and, for the client-kill nemesis, client processes) do fenced acquire / hold
/ release on a few resources through all daemons while one nemesis (or a mix)
runs; every hold is recorded: monotonic start (after the ok arrived), end
(before the release is sent), fence, validity_ms, daemon. Then the checker:

  (a) no two holds of one resource overlap within their validity: hold i is
      [start, min(end, start + validity_ms)];
  (b) fences strictly increase, per resource, in hold order;
  (c) once every fault is healed and the TTLs have run out, nothing is left
      under the prefix on any node but the <prefix>fence counter (SCAN);
  (d) each daemon's VmRSS stays flat (start/end reported; < +20 MB).

The semaphore workload (sem-NAME: nemesis NAME, clients on semaphores of
SEM_PERMITS permits, each permit a full mutex on its own slot key) checks
(a) and (b) per permit, i.e. per slot, and also that no more holds of one
semaphore overlap than it has permits; fences are promised per slot only
(the counter is shared, but holders of different permits overlap).

The restart-quarantine demonstration (quarantine-safe / quarantine-unsafe)
is a scripted scenario: a lock held through exactly three nodes, two of them
killed with -9 and restarted empty, then a second daemon asks for the same
resource. With the daemon's defaults it must not get it (and fences keep
increasing); with --unsafe-no-quarantine --unsafe-no-fence-repair it does,
and the checker sees the overlap and the fence inversion.

Standard library only (plus tests/harness/rl.py, the harness every Python
suite shares: nodes, daemons, clients, child registry). Every child process
is killed and every temp dir removed at exit, nft rules included. See
tests/fault/README.md.
"""

import argparse
import atexit
import collections
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))

import rl  # noqa: E402  (nodes, daemons, RESP/NDJSON clients, child registry)

PREFIX = "rlf:"
FENCE_KEY = PREFIX + "fence"
DATASET_KEY = PREFIX + "dataset"  # each node's data-set mark (100-year TTL)
NODE_TIMEOUT_MS = 150
QUARANTINE_MS = 2000          # = the largest TTL any client here asks for
TTL_CHOICES = (500, 800, 1000, 1500, 2000)
MAX_TTL = max(TTL_CHOICES)
RSS_LIMIT_KB = 20 * 1024
NFT_TABLE = "redlockd_fault"
SLOW = rl.SLOW

VERBOSE = False


def log(*a):
    if VERBOSE:
        print("  [%8.3f]" % (time.monotonic() % 100000), *a, flush=True)


# --------------------------------------------------------------------------
# tools: faultproxy and libclockshift.so, from the meson build or built here

_TOOLS = {}
_TOOL_DIR = []


def _tool_dir():
    if not _TOOL_DIR:
        d = tempfile.mkdtemp(prefix="rlfault-tools-")
        _TOOL_DIR.append(d)
        atexit.register(shutil.rmtree, d, True)
    return Path(_TOOL_DIR[0])


def _fresh(built, src):
    try:
        return built.stat().st_mtime >= src.stat().st_mtime
    except OSError:
        return False


def tool(name):
    """Path of 'faultproxy' or 'clockshift' (the .so): $FAULTPROXY_BIN /
    $CLOCKSHIFT_LIB, else the meson build's if newer than the source, else
    compiled here with gcc into a temp dir (removed at exit)."""
    if name in _TOOLS:
        return _TOOLS[name]
    if name == "faultproxy":
        env, src = "FAULTPROXY_BIN", HERE / "faultproxy.c"
        built = REPO / "build" / "tests" / "fault" / "faultproxy"
        out = _tool_dir() / "faultproxy"
        cmd = ["gcc", "-std=c11", "-O2", "-Wall", "-o", str(out), str(src),
               "-levent"]
    else:
        env, src = "CLOCKSHIFT_LIB", HERE / "clockshift.c"
        built = REPO / "build" / "tests" / "fault" / "libclockshift.so"
        out = _tool_dir() / "libclockshift.so"
        cmd = ["gcc", "-std=c11", "-O2", "-Wall", "-shared", "-fPIC", "-o",
               str(out), str(src)]
    if os.environ.get(env):
        path = Path(os.environ[env])
    elif _fresh(built, src):
        path = built
    else:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("cannot build %s: %s" % (name, r.stderr))
        path = out
    _TOOLS[name] = path
    return path


# --------------------------------------------------------------------------
# ports, nft

def nft_available():
    """(True, '') when running as root with a working nft, else (False,
    why)."""
    if os.geteuid() != 0:
        return False, "not root"
    nft = shutil.which("nft") or (
        "/usr/sbin/nft" if os.path.exists("/usr/sbin/nft") else None)
    if nft is None:
        return False, "nft not installed"
    try:
        r = subprocess.run([nft, "list", "tables"], capture_output=True,
                           text=True, timeout=10)
    except Exception as e:  # pragma: no cover
        return False, "nft: %s" % e
    if r.returncode != 0:
        return False, "nft list tables failed: %s" % r.stderr.strip()
    return True, nft


def nft_drop_port(port):
    """Drops loopback TCP to and from one port, in our own table."""
    ok, nft = nft_available()
    if not ok:
        raise RuntimeError(nft)
    nft_cleanup()  # a table left by a killed run would add up
    rules = ("table inet %s {\n"
             " chain output {\n"
             "  type filter hook output priority 0; policy accept;\n"
             "  oifname \"lo\" tcp dport %d drop\n"
             "  oifname \"lo\" tcp sport %d drop\n"
             " }\n"
             "}\n" % (NFT_TABLE, port, port))
    r = subprocess.run([nft, "-f", "-"], input=rules, capture_output=True,
                       text=True, timeout=10)
    if r.returncode != 0:
        raise RuntimeError("nft -f failed: %s" % r.stderr.strip())


def nft_cleanup():
    """Removes our table if it is there (idempotent; used at exit too)."""
    if os.geteuid() != 0:
        return
    nft = shutil.which("nft") or (
        "/usr/sbin/nft" if os.path.exists("/usr/sbin/nft") else None)
    if nft is None:
        return
    try:
        subprocess.run([nft, "delete", "table", "inet", NFT_TABLE],
                       capture_output=True, timeout=10)
    except Exception:
        pass


atexit.register(nft_cleanup)


# --------------------------------------------------------------------------
# the world: nodes, proxies, daemons

class Node(rl.RedisNode):
    """One redis-server: TCP 127.0.0.1:port and DIR/nK.sock, its files in
    DIR/nK/; optional AOF (appendfsync always) and the clock shim."""

    def __init__(self, world, k, port, aof=False, shim=False):
        data_dir = world.dir / ("n%d" % k)
        data_dir.mkdir()
        super().__init__(world.dir, k, tcp_port=port, aof=aof,
                         data_dir=data_dir)
        self.shim = shim
        self.clock = world.dir / ("n%d.clock" % k)
        self.clock_ms = 0
        self.max_shift_ms = 0   # the furthest this node's clock ran ahead
        if shim:
            self.env = dict(os.environ, LD_PRELOAD=str(tool("clockshift")),
                            CLOCKSHIFT_FILE=str(self.clock))

    def start(self, timeout=10.0, extra=()):
        return super().start(timeout=timeout * SLOW, extra=extra)

    def set_clock(self, ms):
        tmp = self.clock.with_suffix(".tmp")
        tmp.write_text("%d\n" % ms)
        os.replace(tmp, self.clock)
        self.clock_ms = ms
        self.max_shift_ms = max(self.max_shift_ms, ms)


class Proxy:
    """A faultproxy in front of one node's TCP port."""

    def __init__(self, world, node):
        self.world = world
        self.node = node
        self.ctl = world.dir / ("p%d.ctl" % node.k)
        self.proc = None
        self.port = None
        self.mode = "pass"

    def start(self):
        self.proc = rl.popen(
            [str(tool("faultproxy")), "--target",
             "127.0.0.1:%d" % self.node.port, "--listen", "127.0.0.1:0",
             "--control", str(self.ctl), "--seed", str(self.node.k)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)
        line = _readline_timeout(self.proc.stdout, 10.0)
        if not line.startswith(b"ready port="):
            raise RuntimeError("faultproxy did not start: %r" % line)
        self.port = int(line.split(b"=")[1])
        return self

    @property
    def uri(self):
        return "redis://127.0.0.1:%d" % self.port

    def cmd(self, line, timeout=5.0):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.ctl))
            s.sendall(line.encode() + b"\n")
            buf = b""
            for _ in range(100):
                d = s.recv(4096)
                if not d:
                    break
                buf += d
                if b"\n" in buf:
                    break
        ans = buf.decode(errors="replace").strip()
        if not ans.startswith("ok"):
            raise RuntimeError("faultproxy %r: %r" % (line, ans))
        self.mode = line.split()[0] if line.split()[0] != "status" \
            else self.mode
        return ans

    def stop(self):
        if self.proc is not None:
            rl.reap(self.proc)
            try:
                self.proc.stdout.close()
            except Exception:
                pass


def _readline_timeout(f, timeout):
    out = []

    def rd():
        try:
            out.append(f.readline())
        except Exception as e:  # pragma: no cover
            out.append(repr(e).encode())
    t = threading.Thread(target=rd, daemon=True)
    t.start()
    t.join(timeout)
    return out[0] if out else b""


class Daemon(rl.Daemon):
    """One redlockd; restartable (kill -9 and start again on the same
    socket, its stderr appended), with the VmRSS of each run."""

    stderr_mode = "ab"

    def __init__(self, world, name, uris, extra=()):
        node_args = []
        for u in uris:
            node_args += ["--node", u]
        super().__init__(world, name, extra=extra, node_args=node_args,
                         flags=["--prefix", PREFIX, "--node-timeout-ms",
                                str(int(NODE_TIMEOUT_MS * SLOW)),
                                "--log-level", "info"])
        self.runs = []   # {"pid", "rss_start_kb", "rss_end_kb", "rss_max_kb"}

    def start(self, wait_up=True, timeout=15.0):
        t0 = time.monotonic()
        super().start(wait_nodes=wait_up, timeout=timeout * SLOW)
        self.runs.append({"pid": self.proc.pid, "rss_start_kb": None,
                          "rss_end_kb": None, "rss_max_kb": 0, "t0": t0})
        self.sample_rss()
        return self

    def node_states(self):
        """[(up, quarantined)] per node, or None when unreachable."""
        try:
            h = self.health(timeout=1.0)
        except Exception:
            return None
        return [(bool(n.get("up")), bool(n.get("quarantined")))
                for n in h.get("nodes", [])]

    def sample_rss(self):
        if not self.alive() or not self.runs:
            return
        v = self.rss_kb()
        if v is None:
            return
        run = self.runs[-1]
        if run["rss_start_kb"] is None:
            run["rss_start_kb"] = v
        run["rss_end_kb"] = v
        run["rss_max_kb"] = max(run["rss_max_kb"], v)

    def kill9(self):
        self.sample_rss()
        self.kill()

    def restart(self):
        self.kill9()
        return self.start()

    def stop(self, timeout=5.0):
        """SIGTERM; returns the exit code (None if it had to be killed)."""
        self.sample_rss()
        code, _ = super().stop(timeout * SLOW)
        return code

    def stderr_grep(self, *words):
        return [ln for ln in self.stderr_text().splitlines()
                if any(w in ln for w in words)]


class World:
    """Nodes, proxies and daemons of one scenario, in one temp dir;
    close() always heals every fault and removes everything."""

    def __init__(self, n_daemons=2, aof=False, shim=False, daemon_extra=(),
                 proxied=True):
        self.dir = Path(tempfile.mkdtemp(prefix="rlfault-"))
        self.nodes, self.proxies, self.daemons = [], [], []
        self.aof = aof
        self.shim = shim
        self.daemon_extra = list(daemon_extra)
        self.n_daemons = n_daemons
        self.proxied = proxied
        self.events = []
        self.t0 = time.monotonic()
        self.nft_on = False
        self.max_clock_ms = 0
        self.max_delay_ms = 0
        self.last_node_restart = -1e9
        self.clock_jumps = []   # monotonic times of forward clock jumps

    def event(self, text):
        self.events.append((round(time.monotonic() - self.t0, 3), text))
        log(text)

    def start(self):
        try:
            for k, port in enumerate(rl.free_tcp_ports(5), 1):
                nd = Node(self, k, port, aof=self.aof, shim=self.shim)
                if self.shim:
                    nd.set_clock(0)
                self.nodes.append(nd.start())
            if self.proxied:
                for nd in self.nodes:
                    self.proxies.append(Proxy(self, nd).start())
            specs = [("d1", [p.uri for p in self.proxies]
                      if self.proxied else [n.uri for n in self.nodes]),
                     ("d2", [n.uri for n in self.nodes]),
                     ("d3", ["unix://%s%s" % (n.path, "?persistent=1"
                                              if n.aof else "")
                             for n in self.nodes])]
            for name, uris in specs[:self.n_daemons]:
                d = Daemon(self, name, uris, self.daemon_extra)
                self.daemons.append(d)
                d.start()
        except BaseException:
            self.close()
            raise
        return self

    def daemon(self, name):
        return next(d for d in self.daemons if d.name == name)

    def heal(self):
        """Undo every fault: resume nodes, restart dead ones, proxies to
        pass, clocks to 0, nft rules away."""
        if self.nft_on:
            nft_cleanup()
            self.nft_on = False
        for nd in self.nodes:
            nd.resume()
            if nd.shim and nd.clock_ms:
                nd.set_clock(0)
        for nd in self.nodes:
            if nd.proc is None or nd.proc.poll() is not None:
                nd.start()
        for p in self.proxies:
            if p.mode != "pass":
                try:
                    p.cmd("pass")
                except Exception as e:
                    self.event("proxy %d heal failed: %s" % (p.node.k, e))

    def close(self):
        try:
            self.heal()
        except Exception:
            pass
        for d in self.daemons:
            try:
                d.kill9()
            except Exception:
                pass
        for p in self.proxies:
            p.stop()
        for nd in self.nodes:
            nd.stop()
        if not rl.KEEP_TMP:
            shutil.rmtree(self.dir, ignore_errors=True)

    def scan_prefix(self):
        """{node k: [(key, pttl)]} of every key under the prefix but the
        fence counter and the data-set mark; a node that cannot be asked
        maps to an error."""
        out = {}
        for nd in self.nodes:
            try:
                with rl.Resp(nd.path, timeout=3.0) as r:
                    cursor, keys = b"0", []
                    for _ in range(10000):
                        rep = r.cmd("SCAN", cursor, "MATCH", PREFIX + "*",
                                    "COUNT", 1000)
                        cursor, batch = rep[0], rep[1]
                        keys += batch
                        if cursor in (b"0", "0"):
                            break
                    left = []
                    for k in sorted(set(keys)):
                        if k.decode(errors="replace") in (FENCE_KEY,
                                                          DATASET_KEY):
                            continue
                        left.append((k.decode(errors="replace"),
                                     r.cmd("PTTL", k)))
                    out[nd.k] = left
            except Exception as e:
                out[nd.k] = "error: %s" % e
        return out


# --------------------------------------------------------------------------
# recording and checking

class Recorder:
    def __init__(self, permits=None):
        self.permits = permits  # the N of every semaphore hold, if any
        self.lock = threading.Lock()
        self.holds = []
        self.attempts = []     # (latency_ms, code)
        self.releases = collections.Counter()
        self.notes = []

    def hold(self, **h):
        with self.lock:
            self.holds.append(h)
        return h

    def attempt(self, latency_ms, code):
        with self.lock:
            self.attempts.append((latency_ms, code))

    def release(self, code):
        with self.lock:
            self.releases[code] += 1


def hold_interval(h):
    return h["start"], min(h["end"], h["start"] + h["validity_ms"] / 1000.0)


def hold_slot(h):
    """The mutex a hold is of: (resource, None) for a lock, (resource, k)
    for permit k of a semaphore, which is a full Redlock mutex on its own
    slot key (proto/README.md, "semaphores")."""
    return h["resource"], h.get("permit")


def check_holds(holds):
    """(overlaps, fence_violations): lists of (hold a, hold b) pairs.
    Overlap: b starts before a's end (end bounded by a's validity); fences:
    per mutex (a lock, or one permit of a semaphore: hold_slot), in order
    of start, each strictly above the one before."""
    by_res = collections.defaultdict(list)
    for h in holds:
        by_res[hold_slot(h)].append(h)
    overlaps, fences = [], []
    for res, hs in by_res.items():
        hs.sort(key=lambda h: h["start"])
        reach = None      # the hold whose interval reaches furthest so far
        prev = None
        for h in hs:
            s, e = hold_interval(h)
            if reach is not None and s < hold_interval(reach)[1]:
                overlaps.append((reach, h))
            if reach is None or e > hold_interval(reach)[1]:
                reach = h
            if prev is not None and not (h["fence"] > prev["fence"]):
                fences.append((prev, h))
            prev = h
    return overlaps, fences


def check_permits(holds, permits):
    """Semaphore check (a), independent of the per-slot one: per resource,
    never more than `permits` holds at once (hold_interval, ends before
    starts at one instant, as check_holds counts), and every permit in
    0..permits-1. Returns (excess, bad_permit, most): excess lists, per
    time more than `permits` were held, the holds held then (the newest
    last); bad_permit the holds with a permit out of range; most maps each
    resource to the most holds seen at once."""
    by_res = collections.defaultdict(list)
    bad_permit = []
    for h in holds:
        if h.get("permit") is None:
            continue
        by_res[h["resource"]].append(h)
        if not 0 <= h["permit"] < permits:
            bad_permit.append(h)
    excess, most = [], {}
    for res, hs in by_res.items():
        edges = []
        for i, h in enumerate(hs):
            s, e = hold_interval(h)
            edges += [(s, 1, i), (e, 0, i)]
        held, top = set(), 0
        for _, starts, i in sorted(edges):
            if not starts:
                held.discard(i)
                continue
            held.add(i)
            top = max(top, len(held))
            if len(held) > permits:
                excess.append(sorted((hs[j] for j in held),
                                     key=lambda h: h["start"]))
        most[res] = top
    return excess, bad_permit, most


def clock_explained(a, b, jumps):
    """True when the overlap of holds a, b is the one Redlock itself allows
    under a clock jump: a forward jump on one node drops a's key there, and
    when a held a bare quorum, b can form one with that node. So: a taken
    before a jump (the shim's 10 ms cache included), b within a TTL after
    it."""
    for t in jumps:
        if a["start"] <= t + 0.05 and t - 0.05 <= b["start"] <= \
                t + MAX_TTL / 1000.0 + 0.5:
            return True
    return False


def pct(vals, p):
    if not vals:
        return None
    v = sorted(vals)
    i = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[i]


def fmt_hold(h, t0):
    s, e = hold_interval(h)
    slot = "" if h.get("permit") is None else " permit %d" % h["permit"]
    return ("%s%s via %s fence=%s [%.3f, %.3f] validity=%dms%s" % (
        h["resource"], slot, h["daemon"], h["fence"], s - t0, e - t0,
        h["validity_ms"], " (%s)" % h["kind"] if h.get("kind") else ""))


# --------------------------------------------------------------------------
# clients

class Workers:
    """Client threads doing fenced acquire / hold / release until stopped.
    Every loop is bounded by count and by the stop time.

    With permits (the semaphore workload) each acquire takes one of that
    many permits, and a hold ends in one of four ways: released through
    the daemon that took it (by token), released through the next daemon
    (token, resource and permit: proto/README.md, "semaphores"), left to
    expire, recorded as held for its whole validity, or completed, held
    until the done mark expires (_complete)."""

    def __init__(self, world, rec, n_threads, resources, seed,
                 daemons=None, max_iter=100000, permits=None):
        self.permits = permits
        self.world = world
        self.rec = rec
        self.n = n_threads
        self.resources = resources
        self.seed = seed
        self.daemons = daemons or [d.name for d in world.daemons]
        self.stop_ev = threading.Event()
        self.threads = []
        self.max_iter = max_iter
        self.hard_stop = None
        self.others = {}   # thread -> (daemon name, client) for "other"

    def start(self, hard_seconds):
        self.hard_stop = time.monotonic() + hard_seconds
        for i in range(self.n):
            t = threading.Thread(target=self._run, args=(i,), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=15.0 * SLOW)
        alive = [t for t in self.threads if t.is_alive()]
        if alive:
            self.rec.notes.append("%d client threads did not stop" %
                                  len(alive))

    def _done(self):
        return self.stop_ev.is_set() or time.monotonic() > self.hard_stop

    def _run(self, i):
        rnd = random.Random(self.seed * 1000 + i)
        dname = self.daemons[i % len(self.daemons)]
        d = self.world.daemon(dname)
        c = None
        expiring = []  # holds left to expire on c: c's close ends them
        try:
            for _ in range(self.max_iter):
                if self._done():
                    break
                if c is None:
                    try:
                        c = rl.Client(d.socket, timeout=5.0)
                    except OSError:
                        self.rec.attempt(None, "connect")
                        time.sleep(0.05)
                        continue
                res = rnd.choice(self.resources)
                ttl = rnd.choice(TTL_CHOICES)
                wait = 0 if rnd.random() < 0.5 else rnd.choice((100, 300))
                t_send = time.monotonic()
                sem = {"permits": self.permits} if self.permits else {}
                try:
                    r = c.call("acquire", timeout=(ttl + wait) / 1000.0 +
                               5.0 * SLOW, resource=res, ttl_ms=ttl,
                               wait_ms=wait, fence=True, **sem)
                except (OSError, rl.Closed, socket.timeout) as e:
                    code = "timeout" if isinstance(e, socket.timeout) \
                        else "closed"
                    self.rec.attempt(None, code)
                    c = _drop(c, expiring)
                    time.sleep(0.05)
                    continue
                t_recv = time.monotonic()
                lat = (t_recv - t_send) * 1000.0
                code = rl.err_code(r)
                self.rec.attempt(lat, code or "ok")
                if code is not None:
                    time.sleep(rnd.uniform(0.005, 0.04))
                    continue
                # Mostly short holds; sometimes one near the validity.
                v = r["validity_ms"] / 1000.0
                hold = (rnd.uniform(0.01, 0.12) if rnd.random() < 0.93
                        else rnd.uniform(0.5, 0.9) * v)
                time.sleep(hold)
                t_end = time.monotonic()
                how = self._ending(rnd)
                h = self.rec.hold(
                    resource=res, start=t_recv,
                    end=t_recv + v if how == "expire" else t_end,
                    sent=t_send, fence=r.get("fence"),
                    validity_ms=r["validity_ms"], daemon=dname, ttl=ttl,
                    client="t%d" % i, permit=r.get("permit"))
                if how == "other":
                    self._release_other(i, r)
                    c.events.clear()  # the owner's "lost" events
                    continue
                if how == "expire":
                    expiring.append(h)
                    self.rec.release("expire")
                    continue
                try:
                    if how == "complete":
                        self._complete(c, r, h, rnd)
                        continue
                    rr = c.call("release", timeout=5.0 * SLOW,
                                lock=r["lock"])
                    self.rec.release(rl.err_code(rr) or "ok")
                except (OSError, rl.Closed, socket.timeout):
                    self.rec.release("closed")
                    c = _drop(c, expiring)
        except Exception:
            self.rec.notes.append("client t%d crashed: %s" % (
                i, traceback.format_exc()))
        finally:
            if c is not None:
                _drop(c, expiring)
            if self.others.get(i) is not None:
                self.others[i][1].close()

    def _ending(self, rnd):
        """How a hold ends: "self" (released through its daemon) for locks
        (no random draw, so lock runs keep their seeds' sequences); for
        permits also "other" (through the next daemon), "expire" or
        "complete"."""
        if not self.permits:
            return "self"
        x = rnd.random()
        if x < 0.06:
            return "expire"
        if x < 0.12:
            return "complete"
        if x < 0.34 and len(self.daemons) > 1:
            return "other"
        return "self"

    def _complete(self, c, r, h, rnd):
        """Completes permit r, held as h, keep_ms one of SEM_KEEP_CHOICES.
        Answered ok, a quorum holds the done mark and the slot counts as
        taken until it expires (proto/README.md, "complete" and
        "semaphores"): h then lasts until the mark's earliest expiry,
        keep_ms after the complete was sent less the drift margin a TTL
        gets."""
        keep = rnd.choice(SEM_KEEP_CHOICES)
        t_sent = time.monotonic()
        rr = c.call("complete", timeout=5.0 * SLOW, lock=r["lock"],
                    keep_ms=keep)
        code = rl.err_code(rr)
        self.rec.release("complete:" + (code or "ok"))
        if code is None:
            until = t_sent + (keep - keep * 0.01 - 2) / 1000.0
            h.update(end=max(h["end"], until), kind="done %dms" % keep,
                     validity_ms=max(h["validity_ms"],
                                     (until - h["start"]) * 1000.0))

    def _release_other(self, i, r):
        """Releases permit r through the daemon after thread i's own, on a
        connection of the thread's kept open for that (None once it
        failed: a killed daemon; the next call connects again)."""
        name = self.daemons[(i + 1) % len(self.daemons)]
        conn = self.others.get(i)
        try:
            if conn is None:
                conn = (name, rl.Client(self.world.daemon(name).socket,
                                        timeout=5.0))
                self.others[i] = conn
            rr = conn[1].call("release", timeout=5.0 * SLOW, lock=r["lock"],
                              resource=r["resource"], permit=r["permit"])
            self.rec.release("other:" + (rl.err_code(rr) or "ok"))
        except (OSError, rl.Closed, socket.timeout):
            self.rec.release("other:closed")
            if conn is not None:
                conn[1].close()
            self.others[i] = None


def _drop(c, expiring):
    """Closes client c; returns None. Closing releases its session's locks
    at once, so the holds left to expire on it (appended to `expiring`)
    end now, not at their validity."""
    t = time.monotonic()
    for h in expiring:
        h["end"] = min(h["end"], t)
    expiring.clear()
    c.close()
    return None


def hold_client_main(argv):
    """--hold-client SOCKET RESOURCE TTL [PERMITS]: acquire (fenced,
    waiting; one of PERMITS permits if given), print one JSON line with the
    hold, then hold until killed (bounded)."""
    sock, res, ttl = argv[0], argv[1], int(argv[2])
    sem = {"permits": int(argv[3])} if len(argv) > 3 else {}
    out = {"ok": False}
    try:
        c = rl.Client(sock, timeout=10.0)
        t_send = time.monotonic()
        r = c.call("acquire", timeout=10.0, resource=res, ttl_ms=ttl,
                   wait_ms=1000, fence=True, **sem)
        t_recv = time.monotonic()
        out = {"ok": r.get("ok") is True, "start": t_recv, "sent": t_send,
               "fence": r.get("fence"), "validity_ms": r.get("validity_ms"),
               "permit": r.get("permit"), "code": rl.err_code(r)}
    except Exception as e:
        out = {"ok": False, "code": "client:%s" % type(e).__name__}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    time.sleep(min(30.0, ttl * 3 / 1000.0 + 2))
    return 0


def killed_client_round(world, rec, rnd, daemon, resource, ttl,
                        permits=None):
    """One client process that acquires (one of `permits` permits, if
    given) and is killed -9 while holding."""
    p = rl.popen([sys.executable, str(Path(__file__).resolve()),
                  "--hold-client", str(daemon.socket), resource, str(ttl)] +
                 ([str(permits)] if permits else []),
                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                 stderr=subprocess.DEVNULL)
    try:
        line = _readline_timeout(p.stdout, 15.0 * SLOW)
        try:
            info = json.loads(line)
        except ValueError:
            info = {"ok": False, "code": "client:noline"}
        if info.get("ok"):
            time.sleep(rnd.uniform(0.02, 0.3))
            t_kill = time.monotonic()
            p.send_signal(signal.SIGKILL)
            rec.hold(resource=resource, start=info["start"], end=t_kill,
                     sent=info["sent"], fence=info["fence"],
                     validity_ms=info["validity_ms"], daemon=daemon.name,
                     ttl=ttl, client="proc%d" % p.pid, kind="killed",
                     permit=info.get("permit"))
        rec.attempt(None, "killed-client:" + (info.get("code") or "ok"))
    finally:
        rl.reap(p)
        try:
            p.stdout.close()
        except Exception:
            pass


# --------------------------------------------------------------------------
# nemeses: each runs until `until` (monotonic), then leaves all healed

def _sleep_until(t, most):
    time.sleep(max(0.0, min(most, t - time.monotonic())))


def nem_none(w, rnd, until, ctx):
    _sleep_until(until, 1e9)


def _pause(w, rnd, until, count):
    for _ in range(1000):
        if time.monotonic() + 1.0 > until:
            break
        ks = rnd.sample(w.nodes, count)
        for nd in ks:
            nd.pause()
        w.event("SIGSTOP n%s" % ",".join(str(n.k) for n in ks))
        time.sleep(rnd.uniform(0.6, 1.5))
        for nd in ks:
            nd.resume()
        w.event("SIGCONT")
        time.sleep(rnd.uniform(0.4, 1.0))


def nem_pause_minority(w, rnd, until, ctx):
    _pause(w, rnd, until, 2)


def nem_pause_majority(w, rnd, until, ctx):
    _pause(w, rnd, until, 3)


def _restart_nodes(w, rnd, until, ctx, most):
    for _ in range(1000):
        if time.monotonic() + 1.0 > until:
            break
        ks = rnd.sample(w.nodes, rnd.randint(1, most))
        for nd in ks:
            nd.kill9()
        w.event("kill -9 n%s" % ",".join(str(n.k) for n in ks))
        time.sleep(rnd.uniform(0.05, 0.5))
        for nd in ks:
            nd.start()
        w.last_node_restart = time.monotonic()
        w.event("restarted n%s%s" % (",".join(str(n.k) for n in ks),
                                     " (AOF)" if w.aof else " (empty)"))
        time.sleep(rnd.uniform(0.8, 2.0))


def nem_restart(w, rnd, until, ctx):
    _restart_nodes(w, rnd, until, ctx, 2)


def nem_flush(w, rnd, until, ctx):
    """FLUSHALL of one or two nodes at a time under contention: each node
    loses its lock keys (and fence counter) under the same run_id, and
    must not vote before the daemons see its data-set mark gone (each
    write of acquires ends with a GET of it). The second holder that the
    check every second alone allowed is shown deterministically in
    tests/integration/test_node_dataset.py; this schedule checks flushes
    under contention: no overlap, no fence inversion."""
    for _ in range(1000):
        if time.monotonic() + 1.0 > until:
            break
        ks = rnd.sample(w.nodes, rnd.randint(1, 2))
        for nd in ks:
            try:
                nd.cmd("FLUSHALL")
            except OSError:
                pass
        w.event("FLUSHALL n%s" % ",".join(str(n.k) for n in ks))
        time.sleep(rnd.uniform(0.8, 2.0))


def nem_daemon_kill(w, rnd, until, ctx):
    for _ in range(1000):
        if time.monotonic() + 1.5 > until:
            break
        d = rnd.choice(w.daemons)
        d.kill9()
        w.event("kill -9 %s" % d.name)
        time.sleep(rnd.uniform(0.1, 0.6))
        d.start()
        w.event("%s restarted" % d.name)
        time.sleep(rnd.uniform(0.8, 1.5))


def nem_client_kill(w, rnd, until, ctx):
    n = 0
    for _ in range(1000):
        if time.monotonic() + 0.5 > until:
            break
        d = rnd.choice(w.daemons)
        killed_client_round(w, ctx["rec"], rnd, d,
                            rnd.choice(ctx["resources"]),
                            rnd.choice(TTL_CHOICES), ctx.get("permits"))
        n += 1
    w.event("%d client processes killed -9 while holding" % n)


def _proxy_cycle(w, rnd, until, make_cmd, most=3):
    for _ in range(1000):
        if time.monotonic() + 1.0 > until:
            break
        ps = rnd.sample(w.proxies, rnd.randint(1, most))
        cmd = make_cmd(rnd)
        for p in ps:
            p.cmd(cmd)
        w.event("d1 -> n%s: %s" % (",".join(str(p.node.k) for p in ps),
                                   cmd))
        time.sleep(rnd.uniform(0.8, 2.0))
        for p in ps:
            p.cmd("pass")
        w.event("d1 proxies: pass")
        time.sleep(rnd.uniform(0.3, 0.8))


def nem_proxy_delay(w, rnd, until, ctx):
    def mk(r):
        ms = r.choice((20, 60, 120, 250, 400))
        w.max_delay_ms = max(w.max_delay_ms, ms)
        return "delay %d" % ms
    _proxy_cycle(w, rnd, until, mk)


def nem_proxy_drop(w, rnd, until, ctx):
    _proxy_cycle(w, rnd, until, lambda r: "drop")


def nem_proxy_reset(w, rnd, until, ctx):
    _proxy_cycle(w, rnd, until, lambda r: "reset")


def nem_proxy_partition(w, rnd, until, ctx):
    _proxy_cycle(w, rnd, until, lambda r: "partition")


def nem_proxy_loss(w, rnd, until, ctx):
    def mk(r):
        w.max_delay_ms = max(w.max_delay_ms, 3000)
        return "loss %.2f %d" % (r.choice((0.1, 0.3, 0.5)),
                                 r.choice((100, 200, 400)))
    _proxy_cycle(w, rnd, until, mk)


def nem_nft_drop(w, rnd, until, ctx):
    for _ in range(1000):
        if time.monotonic() + 1.0 > until:
            break
        nd = rnd.choice(w.nodes)
        nft_drop_port(nd.port)
        w.nft_on = True
        w.event("nft: drop lo tcp port %d (n%d)" % (nd.port, nd.k))
        time.sleep(rnd.uniform(1.0, 2.0))
        nft_cleanup()
        w.nft_on = False
        w.event("nft: table removed")
        time.sleep(rnd.uniform(0.5, 1.0))


def nem_clock_jump(w, rnd, until, ctx):
    for _ in range(1000):
        if time.monotonic() + 1.0 > until:
            break
        nd = rnd.choice(w.nodes)
        ms = rnd.choice((MAX_TTL + 500, 2 * MAX_TTL, 60000))
        w.max_clock_ms = max(w.max_clock_ms, ms if ms < 60000 else 0)
        w.clock_jumps.append(time.monotonic())
        nd.set_clock(ms)
        w.event("n%d clock +%d ms" % (nd.k, ms))
        time.sleep(rnd.uniform(0.8, 1.5))
        nd.set_clock(0)
        w.event("n%d clock back" % nd.k)
        time.sleep(rnd.uniform(0.3, 0.8))


def nem_mixed(w, rnd, until, ctx):
    """Random faults, one after another, with a client-kill and proxy-delay
    background. Known limits are kept apart (see README): a daemon is not
    restarted within the quarantine after a node restart (a fresh daemon
    tells a restart only by start times more than 3 s apart, and these
    restarts come at random), and a clock jump never comes with
    another fault (Redlock assumes bounded clock drift)."""
    picks = [nem_pause_minority, nem_pause_majority, nem_restart,
             nem_daemon_kill, nem_proxy_drop, nem_proxy_reset,
             nem_proxy_partition, nem_proxy_loss, nem_clock_jump]
    if nft_available()[0]:
        picks.append(nem_nft_drop)
    stop_bg = threading.Event()

    def background():
        brnd = random.Random(rnd.random())
        for _ in range(1000):
            if stop_bg.is_set() or time.monotonic() + 0.5 > until:
                break
            killed_client_round(w, ctx["rec"], brnd,
                                brnd.choice([d for d in w.daemons
                                             if d.alive()] or w.daemons),
                                brnd.choice(ctx["resources"]),
                                brnd.choice(TTL_CHOICES), ctx.get("permits"))
            stop_bg.wait(brnd.uniform(0.2, 0.8))
    bg = threading.Thread(target=background, daemon=True)
    bg.start()
    try:
        for _ in range(1000):
            left = until - time.monotonic()
            if left < 2.0:
                break
            f = rnd.choice(picks)
            if f is nem_daemon_kill:
                wait = w.last_node_restart + QUARANTINE_MS / 1000.0 + 1.0 \
                    - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, left))
                    continue
            if f is nem_clock_jump and not w.shim:
                continue
            slot = min(left, rnd.uniform(2.5, 4.0))
            w.event("mixed: %s for %.1fs" % (f.__name__[4:], slot))
            f(w, rnd, time.monotonic() + slot, ctx)
            w.heal()
    finally:
        stop_bg.set()
        bg.join(timeout=30)


# name -> (function, world options)
NEMESES = collections.OrderedDict([
    ("baseline", (nem_none, {})),
    ("pause-minority", (nem_pause_minority, {})),
    ("pause-majority", (nem_pause_majority, {})),
    ("restart", (nem_restart, {})),
    ("restart-aof", (nem_restart, {"aof": True})),
    ("flush", (nem_flush, {})),
    ("daemon-kill", (nem_daemon_kill, {})),
    ("client-kill", (nem_client_kill, {})),
    ("proxy-delay", (nem_proxy_delay, {})),
    ("proxy-drop", (nem_proxy_drop, {})),
    ("proxy-reset", (nem_proxy_reset, {})),
    ("proxy-partition", (nem_proxy_partition, {})),
    ("proxy-loss", (nem_proxy_loss, {})),
    ("nft-drop", (nem_nft_drop, {"needs_nft": True})),
    ("clock-jump", (nem_clock_jump, {"shim": True})),
    ("mixed", (nem_mixed, {"shim": True})),
])

# The semaphore workload: sem-NAME runs nemesis NAME with every client
# acquiring one of SEM_PERMITS permits (--long: SEM_PERMITS_LONG) of a
# couple of semaphores, fenced, released through its daemon or the next
# one, left to expire or completed. The nemeses that touch what a permit
# rests on: slot keys lost (restart, flush), daemons that disagree about
# nodes (proxy-partition), a holding daemon gone (daemon-kill), slow
# nodes (pause-minority), clocks (clock-jump), and all of them (mixed).
SEM_PERMITS = 2
SEM_PERMITS_LONG = 3
# complete's keep_ms: the longest outlasts QUARANTINE_MS, so that a mark
# on a restarted node must be copied back by the repair to stand.
SEM_KEEP_CHOICES = (300, 1000, 4000)
SEMAPHORES = collections.OrderedDict(
    ("sem-" + n, n) for n in ("baseline", "pause-minority", "restart",
                              "flush", "daemon-kill", "proxy-partition",
                              "clock-jump", "mixed"))


# --------------------------------------------------------------------------
# running a nemesis scenario

@contextlib.contextmanager
def scenario(w, result, on_error=None):
    """The frame of every scenario: starts the world w for the body; an
    exception in it becomes result["error"] (after on_error()); at the end,
    always, the events and each daemon's stderr tail go into result and
    the world is closed."""
    try:
        w.start()
        yield
    except Exception:
        result["error"] = traceback.format_exc()
        if on_error is not None:
            on_error()
    finally:
        result["events"] = w.events
        result["daemon_stderr"] = {d.name: d.stderr_tail(30)
                                   for d in w.daemons}
        w.close()


def run_nemesis(name, long=False, seed=None):
    """Runs one nemesis (sem-NAME: NAME under the semaphore workload);
    returns its result dict (see finish())."""
    base = SEMAPHORES.get(name, name)
    permits = None if base == name else \
        SEM_PERMITS_LONG if long else SEM_PERMITS
    fn, opts = NEMESES[base]
    opts = dict(opts)
    if opts.pop("needs_nft", False):
        ok, why = nft_available()
        if not ok:
            return {"name": name, "skipped": why}
    seed = seed if seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    duration = (40.0 if base == "mixed" else 20.0) if long else \
        (8.0 if base == "mixed" else 5.0)
    n_daemons = 3 if long else 2
    extra = ["--quarantine-ms", str(QUARANTINE_MS)]
    w = World(n_daemons=n_daemons, daemon_extra=extra, **opts)
    rec = Recorder(permits)
    if permits:
        resources = ["sem-%d" % i for i in range(2 if not long else 3)]
    else:
        resources = ["res-%d" % i for i in range(3 if not long else 5)]
    ctx = {"rec": rec, "resources": resources, "permits": permits}
    result = {"name": name, "seed": seed}
    workers = None
    with scenario(w, result, lambda: workers and workers.stop()):
        w.event("world up: nodes %s, proxies %s" % (
            [n.port for n in w.nodes], [p.port for p in w.proxies]))
        workers = Workers(w, rec, 10 if not long else 16, resources, seed,
                          permits=permits)
        workers.start(duration + 60.0)
        sampler_stop = threading.Event()

        def sampler():
            for _ in range(100000):
                if sampler_stop.wait(0.5):
                    break
                for d in w.daemons:
                    d.sample_rss()
        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        time.sleep(0.5)
        until = time.monotonic() + duration
        try:
            fn(w, rnd, until, ctx)
        finally:
            w.heal()
            w.event("healed")
        _sleep_until(until, 1e9)
        # A quiet tail: every daemon must serve again once healed.
        time.sleep(1.0)
        workers.stop()
        sampler_stop.set()
        st.join(timeout=5)
        for d in w.daemons:
            if not d.alive():
                d.start()
        result.update(finish(w, rec))
    return result


def finish(w, rec, wait_ttl=True):
    """The checker: holds, fences, leftovers, RSS, daemon exits."""
    out = {}
    overlaps, fences = check_holds(rec.holds)
    clock = [(a, b) for a, b in overlaps
             if clock_explained(a, b, w.clock_jumps)]
    overlaps = [(a, b) for a, b in overlaps
                if not clock_explained(a, b, w.clock_jumps)]
    out["holds"] = len(rec.holds)
    out["killed_holds"] = sum(1 for h in rec.holds
                              if h.get("kind") == "killed")
    out["overlaps"] = len(overlaps)
    out["overlaps_clock"] = len(clock)
    out["clock_overlap_examples"] = [(fmt_hold(a, w.t0), fmt_hold(b, w.t0))
                                     for a, b in clock[:5]]
    out["fence_violations"] = len(fences)
    out["overlap_examples"] = [(fmt_hold(a, w.t0), fmt_hold(b, w.t0))
                               for a, b in overlaps[:5]]
    out["fence_examples"] = [(fmt_hold(a, w.t0), fmt_hold(b, w.t0))
                             for a, b in fences[:5]]
    if rec.permits:
        out.update(finish_permits(w, rec))
    lats = [l for l, c in rec.attempts if l is not None and c == "ok"]
    out["acquire_ok_ms"] = {"p50": pct(lats, 50), "p99": pct(lats, 99),
                            "max": max(lats) if lats else None}
    codes = collections.Counter(c for _, c in rec.attempts)
    out["codes"] = dict(codes)
    out["releases"] = dict(rec.releases)
    out["notes"] = list(rec.notes)
    # (c) leftovers, after the TTLs (and any clock shift or delay) ran out.
    longest = max(MAX_TTL, max(SEM_KEEP_CHOICES) if rec.permits else 0)
    if wait_ttl:
        time.sleep((longest + w.max_clock_ms + w.max_delay_ms) / 1000.0 +
                   1.0)
    out["leftovers"], out["leftovers_clock"] = split_leftovers(
        w, w.scan_prefix(), longest)
    # (d) RSS, then a clean SIGTERM.
    rss = {}
    for d in w.daemons:
        d.sample_rss()
        code = d.stop()
        rss[d.name] = [{k: r[k] for k in ("pid", "rss_start_kb",
                                          "rss_end_kb", "rss_max_kb")}
                       for r in d.runs]
        out.setdefault("exit_codes", {})[d.name] = code
    out["rss"] = rss
    growth = 0
    for runs in rss.values():
        for r in runs:
            if r["rss_start_kb"] is not None and r["rss_end_kb"] is not None:
                growth = max(growth, r["rss_end_kb"] - r["rss_start_kb"])
    out["rss_growth_kb"] = growth
    return out


def finish_permits(w, rec):
    """The semaphore half of the checker (check_permits), with more than N
    holders right after a forward clock jump kept apart as clock_explained
    overlaps are: the newest holder came within a TTL of a jump that an
    older one was taken before."""
    excess, bad, most = check_permits(rec.holds, rec.permits)
    over, clock = [], []
    for g in excess:
        jumped = any(clock_explained(a, g[-1], w.clock_jumps)
                     for a in g[:-1])
        (clock if jumped else over).append(g)
    return {"permits": rec.permits, "over_n": len(over),
            "over_n_clock": len(clock),
            "over_n_examples": [[fmt_hold(h, w.t0) for h in g]
                                for g in over[:5]],
            "bad_permits": [fmt_hold(h, w.t0) for h in bad[:5]],
            "most_at_once": most}


def split_leftovers(w, left, longest):
    """(leftovers, explained), each {node k: [(key, pttl)]}. Redis keeps a
    key's expiry as an absolute time: a key a node set while its clock ran
    ahead (the 60 s jump is not waited out) and that nobody deleted (a
    permit left to expire) outlives the jump back by the shift. Such a
    key, on a node whose clock ran ahead, with a PTTL within that shift
    plus the longest TTL or keep_ms, is explained by the clock, not left
    by the daemon."""
    bad, clock = {}, {}
    for k, keys in left.items():
        if not keys:
            continue
        shift = w.nodes[k - 1].max_shift_ms
        if not shift or not isinstance(keys, list):  # or an error
            bad[k] = keys
            continue
        for key, pttl in keys:
            late = isinstance(pttl, int) and 0 < pttl <= shift + longest
            (clock if late else bad).setdefault(k, []).append((key, pttl))
    return bad, clock


def verdict(r, expect_violations=False):
    """List of failed checks (empty: pass)."""
    bad = []
    if r.get("skipped"):
        return bad
    if r.get("error"):
        return ["error: " + r["error"].strip().splitlines()[-1]]
    v = r["overlaps"] + r["fence_violations"] + r.get("over_n", 0)
    if expect_violations:
        if v == 0:
            bad.append("expected overlaps or fence inversions, saw none")
    else:
        if r["overlaps"]:
            bad.append("%d overlapping holds" % r["overlaps"])
        if r["fence_violations"]:
            bad.append("%d fence inversions" % r["fence_violations"])
        if r.get("over_n"):
            bad.append("%d times more than %d holders of a semaphore" % (
                r["over_n"], r["permits"]))
    if r.get("bad_permits"):
        bad.append("permits out of 0..%d: %s" % (r["permits"] - 1,
                                                  r["bad_permits"][0]))
    if r.get("name") == "clock-bare-quorum" and not r.get("overlaps_clock"):
        bad.append("the clock jump produced no overlap (B never formed a "
                   "quorum with the jumped node)")
    if r.get("name") == "fresh-daemon-slow-old":
        if any(r["paused_granted"]) or not all(r["paused_refused"]):
            bad.append("B while the older nodes slept: refused %r, granted "
                       "%r (per cycle)" % (r["paused_refused"],
                                           r["paused_granted"]))
        missed = [(y, s) for y, s in zip(r["killed"], r["fresh_seen"])
                  if not set(y) <= set(s)]
        if len(r["fresh_seen"]) != r["cycles"] or missed:
            bad.append("the fresh daemon quarantined %r, restarted were %r"
                       % (r["fresh_seen"], r["killed"]))
    if r["leftovers"]:
        bad.append("keys left: %r" % r["leftovers"])
    if r["rss_growth_kb"] > RSS_LIMIT_KB:
        bad.append("RSS grew %d kB" % r["rss_growth_kb"])
    if any(c != 0 for c in r.get("exit_codes", {}).values()):
        bad.append("daemon exit codes %r" % r["exit_codes"])
    if r.get("revived"):
        bad.append("%d times a lost lock was not given up: %s" % (
            len(r["revived"]), r["revived"][0]))
    if r.get("stale"):
        bad.append("%d keys kept on nodes that were up: %s" % (
            len(r["stale"]), r["stale"][0]))
    if r.get("counted_unmarked"):
        bad.append("%d times a node counted with no data-set mark: %s" % (
            len(r["counted_unmarked"]), r["counted_unmarked"][0]))
    if r.get("min_holds") is not None and r["holds"] < r["min_holds"]:
        bad.append("only %d holds" % r["holds"])
    if r["notes"]:
        bad.append("notes: %r" % r["notes"])
    return bad


# --------------------------------------------------------------------------
# the restart-quarantine demonstration

def _wait_states(d, want, timeout):
    """Polls d's health until want(states) is true; returns the states."""
    deadline = time.monotonic() + timeout * SLOW
    st = None
    for _ in range(10000):
        st = d.node_states()
        if st is not None and want(st):
            return st
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    raise RuntimeError("%s: node states %r never satisfied the wait" % (
        d.name, st))


def _acquire(c, res, ttl, rec, daemon, **kw):
    t_send = time.monotonic()
    r = c.call("acquire", timeout=10.0 * SLOW, resource=res, ttl_ms=ttl,
               fence=True, **kw)
    t_recv = time.monotonic()
    code = rl.err_code(r)
    rec.attempt((t_recv - t_send) * 1000.0, code or "ok")
    if code is None:
        return r, t_send, t_recv
    _acquire.last = r
    return None, t_send, t_recv


def _hold_release(c, r, res, t_send, t_recv, rec, daemon, hold=0.02,
                  kind=None):
    time.sleep(hold)
    t_end = time.monotonic()
    rec.hold(resource=res, start=t_recv, end=t_end, sent=t_send,
             fence=r.get("fence"), validity_ms=r["validity_ms"],
             daemon=daemon, ttl=None, client="script", kind=kind,
             permit=r.get("permit"))
    rr = c.call("release", timeout=5.0 * SLOW, lock=r["lock"])
    rec.release(rl.err_code(rr) or "ok")


def _wait_nodes_up_for(w, nodes, secs):
    """Until the oldest of nodes has been up secs (INFO uptime), bounded."""
    def oldest():
        best = 0
        for nd in nodes:
            info = nd.cmd("INFO", "server").decode()
            m = re.search(r"uptime_in_seconds:(\d+)", info)
            best = max(best, int(m.group(1)) if m else 0)
        return best
    deadline = time.monotonic() + secs + 10.0 * SLOW
    while oldest() < secs:
        if time.monotonic() > deadline:
            raise RuntimeError("no node up %ds: %r" % (secs, oldest()))
        time.sleep(0.1)


def _retire_fresh(w, db, log_from):
    """Kills the fresh daemon db; returns the nodes its log (from offset
    log_from: every run appends to one file) says it took for restarted."""
    seen = sorted(int(m.group(1)) for m in
                  (re.search(r"node (\d+): started \d+ s after another", ln)
                   for ln in db.stderr_text()[log_from:].splitlines()
                   if "after another node" in ln)
                  if m)
    db.kill9()
    w.daemons.remove(db)
    return seen


def _serve_again(w, rec, res, cyc, quarantine_ms, **kw):
    """The end of a restart cycle: once d1 and d2 count every node again
    (their own quarantine of the restarted nodes over), one hold of res
    through each (kw: more acquire fields, such as permits)."""
    for d in (w.daemon("d1"), w.daemon("d2")):
        _wait_states(d, lambda st: all(u and not q for u, q in st),
                     quarantine_ms / 1000.0 + 10.0)
    for d in (w.daemon("d2"), w.daemon("d1")):
        with rl.Client(d.socket, timeout=10.0) as c:
            r = None
            for _ in range(100):
                r, ts, tr = _acquire(c, res, 500, rec, d.name, wait_ms=2000,
                                     **kw)
                if r is not None:
                    break
                time.sleep(0.05)
            if r is None:
                raise RuntimeError("cycle %d: %s cannot acquire after "
                                   "healing" % (cyc, d.name))
            _hold_release(c, r, res, ts, tr, rec, d.name)


def run_quarantine(unsafe, long=False, fresh_daemon=False, settled=True,
                   permits=None):
    """Kill -9 and restart, empty, two of the three nodes a lock is held on,
    then ask another daemon for the same resource. Cycles rotate the nodes.

    Per cycle (A holds through d1; B asks through d2, or with fresh_daemon
    through a daemon started after the restart):
      1. d1's proxies partition the two nodes outside the trio, so that d1
         reaches the trio only;
      2. three fenced acquire/release through d1: the fence counter rises
         on the trio only;
      3. A acquires through d1 (ttl = quarantine): held on the trio only;
      4. kill -9 two trio nodes, restart them empty; heal d1's proxies;
      5. B tries every 30 ms through d2 until it gets the lock (bounded);
      6. A lets go (the connection closes) after B's attempts;
      7. once every daemon counts every node again, two more holds.
    Unsafe: B wins while A holds (overlap) with a fence from fresh counters
    (inversion). Safe: B wins only after A's validity and the quarantine,
    with a fence above A's.

    A fresh daemon tells a restart by start times alone (INFO uptime, one
    second resolution): settled, each cycle starts once a node that stays
    up has been up 5 s, past the 3 s a cluster started together may spread
    over, so the restart must be seen. Not settled (gap-fresh-daemon) the
    first restarts come within 3 s of the cluster's start: the README's
    documented limit, shown, not failed on.

    With permits (sem-quarantine-safe, sem-quarantine-unsafe) every acquire
    is of a semaphore of that many permits and A, in step 3, takes all of
    them: B, asking for one more, is a holder too many, and overlaps the A
    that holds its slot. Unsafe: more than N holders, a slot overlap and a
    slot fence inversion. Safe: B wins only once the first A's validity and
    the quarantine are over."""
    sem = {"permits": permits} if permits else {}
    if fresh_daemon:
        name = "fresh-daemon" if settled else "gap-fresh-daemon"
    elif permits:
        name = "sem-quarantine-unsafe" if unsafe else "sem-quarantine-safe"
    else:
        name = "quarantine-unsafe" if unsafe else "quarantine-safe"
    extra = ["--quarantine-ms", str(QUARANTINE_MS)]
    if unsafe:
        extra += ["--unsafe-no-quarantine", "--unsafe-no-fence-repair"]
    w = World(n_daemons=2, daemon_extra=extra)
    rec = Recorder(permits)
    res = "qres"
    result = {"name": name, "seed": None}
    cycles = 5 if long else 3
    b_won_during_a = 0
    fresh_seen = []  # per cycle, the nodes the fresh daemon quarantined
    lk = PREFIX + "lock:" + res
    with scenario(w, result):
        d1, d2 = w.daemon("d1"), w.daemon("d2")
        for cyc in range(cycles):
            trio = [w.nodes[(2 * cyc + j) % 5] for j in range(3)]
            outside = [nd for nd in w.nodes if nd not in trio]
            kill2 = trio[:2]
            if fresh_daemon and settled:
                _wait_nodes_up_for(w, [nd for nd in w.nodes
                                       if nd not in kill2], 5)
            # 1.
            for nd in outside:
                w.proxies[nd.k - 1].cmd("partition")
            ko = [nd.k - 1 for nd in outside]
            _wait_states(d1, lambda st: all(not st[i][0] for i in ko) and
                         all(st[nd.k - 1][0] and not st[nd.k - 1][1]
                             for nd in trio), 10.0)
            w.event("cycle %d: d1 reaches n%s only" % (
                cyc, ",".join(str(nd.k) for nd in trio)))
            with rl.Client(d1.socket, timeout=10.0) as c1:
                # 2.
                for _ in range(3):
                    # wait_ms: a key that an earlier release could not
                    # reach (see README, findings) may linger until its TTL.
                    r, ts, tr = _acquire(c1, res, 500, rec, "d1",
                                         wait_ms=QUARANTINE_MS + 1000, **sem)
                    if r is None:
                        raise RuntimeError("cycle %d: push acquire failed: "
                                           "%r; %r; keys %r" % (
                                               cyc, _acquire.last,
                                               d1.node_states(),
                                               [(nd.cmd("GET", lk),
                                                 nd.cmd("PTTL", lk))
                                                for nd in w.nodes]))
                    _hold_release(c1, r, res, ts, tr, rec, "d1")
                # 3. (every permit of a semaphore)
                held = []
                for _ in range(permits or 1):
                    a, a_send, a_recv = _acquire(c1, res, QUARANTINE_MS, rec,
                                                 "d1", **sem)
                    if a is None:
                        raise RuntimeError("cycle %d: A could not acquire" %
                                           cyc)
                    w.event("cycle %d: A holds %s%s fence %s validity %d" % (
                        cyc, res, "" if a.get("permit") is None else
                        " permit %d" % a["permit"], a["fence"],
                        a["validity_ms"]))
                    held.append((a, a_send, a_recv))
                a, a_send, a_recv = held[0]
                # 4.
                for nd in kill2:
                    nd.kill9()
                w.event("kill -9 n%s" % ",".join(str(nd.k) for nd in kill2))
                for nd in kill2:
                    nd.start()
                w.last_node_restart = time.monotonic()
                w.event("restarted n%s empty" % ",".join(
                    str(nd.k) for nd in kill2))
                for nd in outside:
                    w.proxies[nd.k - 1].cmd("pass")
                db = d2
                if fresh_daemon:
                    db = Daemon(w, "d3", [nd.uri for nd in w.nodes],
                                ["--quarantine-ms", str(QUARANTINE_MS)])
                    # Every cycle's d3 appends to the same log.
                    log_from = len(db.stderr_text())
                    w.daemons.append(db)
                    db.start(wait_up=True)
                    w.event("d3 started (fresh) after the restart")
                else:
                    kidx = [nd.k - 1 for nd in kill2]
                    _wait_states(db, lambda st: all(st[i][0] for i in kidx),
                                 10.0)
                    w.event("d2 sees n%s up again" % ",".join(
                        str(nd.k) for nd in kill2))
                # 5.
                a_valid_until = min(r_ + a_["validity_ms"] / 1000.0
                                    for a_, _, r_ in held)
                deadline = a_recv + (2 * QUARANTINE_MS + 4000) / 1000.0 \
                    * SLOW
                b = None
                with rl.Client(db.socket, timeout=10.0) as c2:
                    for _ in range(2000):
                        if time.monotonic() > deadline:
                            break
                        b, bs, br = _acquire(c2, res, 1000, rec, db.name,
                                             **sem)
                        if b is not None:
                            break
                        time.sleep(0.03)
                    if b is not None:
                        during = br < a_valid_until
                        b_won_during_a += during
                        w.event("cycle %d: B (%s) got %s fence %s %s A's "
                                "validity ended" % (
                                    cyc, db.name, res, b["fence"],
                                    "BEFORE" if during else "after"))
                        w.event("B token %s" % b["lock"])
                        _hold_release(c2, b, res, bs, br, rec, db.name,
                                      hold=0.05, kind="B")
                    else:
                        w.event("cycle %d: B never got the lock" % cyc)
                        rec.notes.append("cycle %d: B never acquired" % cyc)
                # 6. A lets go: its hold ends now (or at its validity).
                a_end = time.monotonic()
                for a, a_send, a_recv in held:
                    w.event("A token %s closes" % a["lock"])
                    rec.hold(resource=res, start=a_recv, end=a_end,
                             sent=a_send, fence=a["fence"],
                             validity_ms=a["validity_ms"], daemon="d1",
                             ttl=QUARANTINE_MS, client="A", kind="A",
                             permit=a.get("permit"))
            if fresh_daemon:
                # Which nodes the fresh daemon took for restarted.
                fresh_seen.append(_retire_fresh(w, db, log_from))
            # 7.
            _serve_again(w, rec, res, cyc, QUARANTINE_MS, **sem)
        result.update(finish(w, rec))
        result["b_won_during_a"] = b_won_during_a
        result["cycles"] = cycles
        result["fresh_seen"] = fresh_seen
        result["killed"] = [sorted((2 * cyc + j) % 5 + 1 for j in range(2))
                            for cyc in range(cycles)]
        result["quarantine_log"] = (d2.stderr_grep("quarantined", "repaired",
                                                   "unsafe", "WITHOUT")[-6:])
    return result


# The slow-older-nodes race (fresh-daemon-slow-old): A's TTL and every
# daemon's --quarantine-ms. Long enough that the pause below ends well
# inside it (the restarted nodes must still be young when the older ones
# answer), short enough for a cycle of about 7 s.
SLOW_OLD_QUARANTINE_MS = int(5000 * SLOW)
# B's node timeout: its connect timeout (10 x, here 5 s) bounds how long
# young nodes wait for an older node's first handshake, so the pause must
# end inside it; past it the young nodes count (README, "Restarts").
SLOW_OLD_B_NODE_TIMEOUT_MS = int(500 * SLOW)
SLOW_OLD_PAUSE_S = 1.0 * SLOW   # B's attempts while the older nodes sleep


def _sleep_to_second_frac(frac):
    """Until the wall clock's next second is `frac` (0..1) through: INFO
    uptime_in_seconds is a difference of whole wall-clock seconds."""
    time.sleep((frac - time.time() % 1.0) % 1.0)


def run_fresh_slow_old(long=False, uptime_gap=False):
    """Three nodes restart empty; the two older ones, which still hold A's
    lock, are slow (SIGSTOP) while a fresh daemon B starts and asks for the
    same resource. The three young nodes are a quorum by themselves, and B
    can only tell them restarted from the older nodes' start times, so it
    must not count them before the older nodes' first handshake (or its
    failure, after B's connect timeout) is in.

    Per cycle (the young trio rotates, cycle 0 shown):
      1. once an older node has been up 5 s, A acquires through d1 (all
         nodes up, ttl = the quarantine, 5 s): held on n1..n5;
      2. kill -9 n1, n2, n3, restart them empty; SIGSTOP n4, n5;
      3. B, a fresh daemon (connect timeout 5 s), starts; once it has n1,
         n2, n3 up it asks every 30 ms for 1 s: refused (no_quorum);
      4. SIGCONT n4, n5: B sees n1..n3 started over 3 s after them and
         quarantines them for the rest of the 5 s period;
      5. B asks every 30 ms until granted: only n4, n5 count until the
         quarantine ends, by when A's validity is over; its best-effort
         fence repair (three restarted leave two sound nodes) reads n4,
         n5, which A's fence reached, so B's fence is above A's;
      6. A lets go; d1, d2 count every node again; two more holds.
    Before 140db7c, B counted n1..n3 at once and won in step 3 while A
    held, with a fence from the fresh counters: overlap and inversion.

    Step 1 starts just after a wall-clock second begins, so that B's
    handshake with the young nodes comes in the second they started and
    their uptime (whole seconds) reads 0. uptime_gap
    (fresh-daemon-uptime) instead restarts them late in a second and
    starts B just after the next one begins: uptime reads 1 after a tenth
    of a second. A daemon that dated the start by now - uptime took them
    for started almost a second earlier than they did, and its quarantine
    ended that much before A's validity (overlap in every cycle under
    load); restart_started_us dates it by the latest start the uptime
    allows."""
    q_ms = SLOW_OLD_QUARANTINE_MS
    name = "fresh-daemon-uptime" if uptime_gap else \
        "fresh-daemon-slow-old"
    w = World(n_daemons=2, daemon_extra=["--quarantine-ms", str(q_ms)])
    rec = Recorder()
    res = "slowold"
    result = {"name": name, "seed": None}
    cycles = 5 if long else 3
    b_won_during_a = 0
    young_per_cycle, fresh_seen = [], []
    paused_refused, paused_granted = [], []
    b_extra = ["--quarantine-ms", str(q_ms), "--node-timeout-ms",
               str(SLOW_OLD_B_NODE_TIMEOUT_MS)]
    b_connect_s = max(1.0, SLOW_OLD_B_NODE_TIMEOUT_MS * 10 / 1000.0)
    with scenario(w, result):
        d1, d2 = w.daemon("d1"), w.daemon("d2")
        for cyc in range(cycles):
            young = [w.nodes[(3 * cyc + j) % 5] for j in range(3)]
            old = [nd for nd in w.nodes if nd not in young]
            young_per_cycle.append([nd.k for nd in young])
            yidx = [nd.k - 1 for nd in young]
            oidx = [nd.k - 1 for nd in old]
            _wait_nodes_up_for(w, old, 5)
            # 1.
            with rl.Client(d1.socket, timeout=10.0) as c1:
                _sleep_to_second_frac(0.8 if uptime_gap else 0.05)
                a, a_send, a_recv = _acquire(c1, res, q_ms, rec, "d1",
                                             wait_ms=q_ms + 1000)
                if a is None:
                    raise RuntimeError("cycle %d: A could not acquire: %r"
                                       % (cyc, _acquire.last))
                w.event("cycle %d: A holds %s fence %s validity %d" % (
                    cyc, res, a["fence"], a["validity_ms"]))
                # B's repair reads the older nodes' counters: A's fence
                # must be there (its write-back goes to every node).
                deadline = time.monotonic() + 2.0 * SLOW
                for _ in range(1000):
                    tops = [int(nd.cmd("GET", FENCE_KEY) or 0) for nd in old]
                    if max(tops) >= a["fence"] or \
                            time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                if max(tops) < a["fence"]:
                    raise RuntimeError("cycle %d: A's fence %s never reached "
                                       "n%s (counters %r)" % (
                                           cyc, a["fence"], ",".join(
                                               str(nd.k) for nd in old),
                                           tops))
                # 2.
                for nd in young:
                    nd.kill9()
                for nd in young:
                    nd.start()
                w.last_node_restart = time.monotonic()
                for nd in old:
                    nd.pause()
                w.event("restarted n%s empty; SIGSTOP n%s" % (
                    ",".join(str(nd.k) for nd in young),
                    ",".join(str(nd.k) for nd in old)))
                a_valid_until = a_recv + a["validity_ms"] / 1000.0
                b = None
                refused, granted = collections.Counter(), 0
                won_during_a = False
                try:
                    # 3.
                    if uptime_gap:
                        _sleep_to_second_frac(0.02)
                    db = Daemon(w, "d3", [nd.uri for nd in w.nodes], b_extra)
                    log_from = len(db.stderr_text())
                    w.daemons.append(db)
                    b_started = time.monotonic()
                    db.start(wait_up=False)
                    _wait_states(db, lambda st: all(st[i][0] for i in yidx),
                                 10.0)
                    w.event("d3 started (fresh), has n%s up: %r" % (
                        ",".join(str(nd.k) for nd in young),
                        db.node_states()))
                    with rl.Client(db.socket, timeout=10.0) as c2:
                        until = time.monotonic() + SLOW_OLD_PAUSE_S
                        for _ in range(1000):
                            if time.monotonic() > until:
                                break
                            b, bs, br = _acquire(c2, res, 1000, rec, "d3")
                            if b is not None:
                                granted += 1
                                won_during_a |= br < a_valid_until
                                w.event("cycle %d: B got %s fence %s while "
                                        "n%s were paused" % (
                                            cyc, res, b["fence"], ",".join(
                                                str(nd.k) for nd in old)))
                                _hold_release(c2, b, res, bs, br, rec, "d3",
                                              hold=0.05, kind="B")
                                break
                            refused[rl.err_code(_acquire.last)] += 1
                            time.sleep(0.03)
                finally:
                    # 4.
                    for nd in old:
                        nd.resume()
                resumed = time.monotonic()
                w.event("SIGCONT n%s; B refused %r, granted %d while they "
                        "slept" % (",".join(str(nd.k) for nd in old),
                                   dict(refused), granted))
                if resumed - b_started >= b_connect_s:
                    rec.notes.append("cycle %d: the pause outlasted B's "
                                     "connect timeout" % cyc)
                paused_refused.append(sum(refused.values()))
                paused_granted.append(granted)
                st = _wait_states(db, lambda st: all(
                    st[i][1] for i in yidx) and all(
                    st[i][0] and not st[i][1] for i in oidx), 10.0)
                w.event("d3: %r" % st)
                # 5.
                deadline = resumed + (q_ms + 5000) / 1000.0 * SLOW
                b = None
                with rl.Client(db.socket, timeout=10.0) as c2:
                    for _ in range(2000):
                        if time.monotonic() > deadline:
                            break
                        b, bs, br = _acquire(c2, res, 1000, rec, "d3")
                        if b is not None:
                            break
                        time.sleep(0.03)
                    if b is not None:
                        during = br < a_valid_until
                        won_during_a |= during
                        w.event("cycle %d: B got %s fence %s %s A's "
                                "validity ended" % (
                                    cyc, res, b["fence"],
                                    "BEFORE" if during else "after"))
                        _hold_release(c2, b, res, bs, br, rec, "d3",
                                      hold=0.05, kind="B")
                    else:
                        w.event("cycle %d: B never got the lock" % cyc)
                        rec.notes.append("cycle %d: B never acquired" % cyc)
                b_won_during_a += won_during_a
                # 6.
                rec.hold(resource=res, start=a_recv, end=time.monotonic(),
                         sent=a_send, fence=a["fence"],
                         validity_ms=a["validity_ms"], daemon="d1",
                         ttl=q_ms, client="A", kind="A")
            fresh_seen.append(_retire_fresh(w, db, log_from))
            _serve_again(w, rec, res, cyc, q_ms)
        result.update(finish(w, rec))
        result["cycles"] = cycles
        result["b_won_during_a"] = b_won_during_a
        result["fresh_seen"] = fresh_seen
        result["killed"] = young_per_cycle
        result["paused_refused"] = paused_refused
        result["paused_granted"] = paused_granted
    return result


def run_fence_late_answer(long=False):
    """A fenced acquisition whose main round is decided before a node with a
    higher counter answers: the daemon must answer with the value it wrote
    back to a quorum, not with a maximum that grew afterwards.

    Fence counters differ between nodes in normal operation (a lost or
    busy round INCRs only some nodes); here node 5's is raised by 1000.
    d1's proxies delay n3 by 30 ms, n5 by 45 ms and n4 by 70 ms, each way
    (round trips 60, 90, 140 ms; the node timeout is 150): the round is
    decided by n1, n2, n3 at 60 ms, the write-back of their maximum goes
    out and is decided at 120 ms; n5's answer (its counter + 1) arrives
    at 90 ms, in between. The lock is
    released; n5 is then cut off and the resource taken again: its fence
    must exceed the first one."""
    w = World(n_daemons=1, daemon_extra=["--quarantine-ms",
                                         str(QUARANTINE_MS)])
    rec = Recorder()
    res = "late"
    result = {"name": "fence-late-answer", "seed": None}
    with scenario(w, result):
        d1 = w.daemon("d1")
        rounds = 5 if long else 3
        with rl.Client(d1.socket, timeout=10.0) as c:
            for i in range(rounds):
                top = int(w.nodes[4].cmd("GET", FENCE_KEY) or 0)
                w.nodes[4].cmd("SET", FENCE_KEY, str(top + 1000))
                for k, ms in ((3, 30), (4, 70), (5, 45)):
                    w.proxies[k - 1].cmd("delay %d" % ms)
                w.event("round %d: n5 counter %d; d1 -> n3 +30ms, n5 +45ms, "
                        "n4 +70ms each way" % (i, top + 1000))
                r, ts, tr = _acquire(c, res, 2000, rec, "d1")
                if r is None:
                    raise RuntimeError("delayed acquire failed")
                w.event("round %d: fence %s; counters %s" % (
                    i, r["fence"], [nd.cmd("GET", FENCE_KEY)
                                    for nd in w.nodes]))
                _hold_release(c, r, res, ts, tr, rec, "d1")
                for p in w.proxies:
                    p.cmd("pass")
                w.proxies[4].cmd("partition")
                _wait_states(d1, lambda st: not st[4][0], 10.0)
                r, ts, tr = _acquire(c, res, 2000, rec, "d1")
                if r is None:
                    raise RuntimeError("acquire without n5 failed")
                w.event("round %d: without n5, fence %s" % (i, r["fence"]))
                _hold_release(c, r, res, ts, tr, rec, "d1")
                w.proxies[4].cmd("pass")
                _wait_states(d1, lambda st: st[4][0], 10.0)
        result.update(finish(w, rec))
    return result


def run_release_reach(long=False):
    """A release must reach every node that is up, even when fewer than a
    quorum are: a key it leaves behind blocks the resource on that node
    until its TTL (and with restarted nodes, the whole resource).

    d1 takes locks with ttl 20 s while every node is up, then its proxies
    cut a majority off, first n1-n3 (the start of the node list), then
    n3-n5 (the end). Each time one lock is released explicitly and another
    by closing its connection (session release). Checked: the nodes still
    up no longer hold those keys."""
    w = World(n_daemons=1, daemon_extra=["--quarantine-ms",
                                         str(QUARANTINE_MS)])
    rec = Recorder()
    result = {"name": "release-reach", "seed": None}
    stale = []
    with scenario(w, result):
        d1 = w.daemon("d1")
        for cut in ((1, 2, 3), (3, 4, 5)):
            up = [nd for nd in w.nodes if nd.k not in cut]
            c_rel = rl.Client(d1.socket, timeout=10.0)
            c_ses = rl.Client(d1.socket, timeout=10.0)
            try:
                tag = "".join(map(str, cut))
                locks = {}
                for c, how in ((c_rel, "release"), (c_ses, "session")):
                    res = "reach-%s-%s" % (tag, how)
                    r, ts, tr = _acquire(c, res, 20000, rec, "d1")
                    if r is None:
                        raise RuntimeError("acquire %s failed" % res)
                    locks[how] = (res, r)
                for k in cut:
                    w.proxies[k - 1].cmd("partition")
                idx = [k - 1 for k in cut]
                _wait_states(d1, lambda st: all(not st[i][0] for i in idx),
                             10.0)
                w.event("d1 cut off from n%s" % ",".join(map(str, cut)))
                res, r = locks["release"]
                rr = c_rel.call("release", timeout=10.0, lock=r["lock"])
                w.event("release while n%s unreachable: %r" % (
                    ",".join(map(str, cut)), rl.err_code(rr) or "ok"))
                c_ses.close()
                time.sleep(0.3)
                for how, (res, r) in locks.items():
                    key = PREFIX + "lock:" + res
                    for nd in up:
                        v = nd.cmd("GET", key)
                        if v is not None and v.decode() == r["lock"]:
                            stale.append("%s release: n%d keeps %s (pttl "
                                         "%s) though it was up" % (
                                             how, nd.k, key,
                                             nd.cmd("PTTL", key)))
            finally:
                c_rel.close()
                c_ses.close()
                for k in cut:
                    w.proxies[k - 1].cmd("pass")
            _wait_states(d1, lambda st: all(u for u, q in st), 15.0)
            # Clean up what a correct daemon would have left on the cut
            # nodes (it could not reach them) and anything stale.
            for nd in w.nodes:
                for how in ("release", "session"):
                    nd.cmd("DEL", PREFIX + "lock:reach-%s-%s" % (
                        "".join(map(str, cut)), how))
        result.update(finish(w, rec, wait_ttl=False))
        result["stale"] = stale
    return result


def run_lost_complete(long=False):
    """A renewing lock given up while a majority of nodes is paused must
    stay given up once they run again: they then run the renewals that
    waited in their sockets, which start the key's TTL again, and a
    complete by token and resource could otherwise leave done marks on a
    quorum (the contract: after a lost event a complete marks nothing).

    Per cycle, rotating the nodes: A takes a renewing lock (ttl 6 s)
    through d2; three nodes are paused (SIGSTOP) until d2 gives the lock up
    (the lost event) with them dropped; they resume, both daemons
    reconnect. Checked: complete and extend through d2 answer not_held; d2
    deletes the key on the nodes it missed (it is gone from every node,
    before its TTL), so a complete through d1, which never knew the lock,
    answers not_held too; no node carries a done mark; B then takes the
    resource through d1. No node restarts, so the ttl above the
    quarantine period (QUARANTINE_MS) plays no part."""
    w = World(n_daemons=2)
    rec = Recorder()
    result = {"name": "lost-complete", "seed": None}
    revived = []
    cycles = 3 if long else 2
    ttl = 6000
    with scenario(w, result):
        # The losing daemon is d2, wired to the nodes directly (d1 reaches
        # them through proxies, which keep taking its writes while a node
        # is stopped): its sockets fill as a real daemon's would.
        loser, other = w.daemon("d2"), w.daemon("d1")
        for cyc in range(cycles):
            res = "lostc-%d" % cyc
            key = PREFIX + "lock:" + res
            trio = [w.nodes[(2 * cyc + j) % 5] for j in range(3)]
            idx = [nd.k - 1 for nd in trio]
            with rl.Client(loser.socket, timeout=20.0 * SLOW) as c1, \
                    rl.Client(other.socket, timeout=20.0 * SLOW) as c2:
                a, a_send, a_recv = _acquire(c1, res, ttl, rec, "d2",
                                             renew=True)
                if a is None:
                    raise RuntimeError("A could not acquire")
                token = a["lock"]
                try:
                    for nd in trio:
                        nd.pause()
                    w.event("cycle %d: A holds %s; SIGSTOP n%s" % (
                        cyc, token[:8], ",".join(str(n.k) for n in trio)))
                    _wait_states(loser, lambda st: all(not st[i][0]
                                                    for i in idx), 15.0)
                    ev = c1.wait_event(timeout=ttl / 1000.0 + 10.0 * SLOW)
                    if ev.get("event") != "lost" or ev.get("lock") != token:
                        raise RuntimeError("no lost event: %r" % (ev,))
                    rec.hold(resource=res, start=a_recv, end=time.monotonic(),
                             sent=a_send, fence=a.get("fence"),
                             validity_ms=a["validity_ms"], daemon="d2",
                             ttl=ttl, client="A", kind="A")
                    w.event("cycle %d: lost" % cyc)
                finally:
                    for nd in trio:
                        nd.resume()
                for d in (loser, other):
                    _wait_states(d, lambda st: all(u for u, q in st), 20.0)
                w.event("cycle %d: n%s back, daemons reconnected" % (
                    cyc, ",".join(str(n.k) for n in trio)))
                for op, extra in (("complete", {"keep_ms": 60000}),
                                  ("extend", {"ttl_ms": ttl})):
                    r = c1.call(op, timeout=10.0 * SLOW, lock=token,
                                resource=res, **extra)
                    if rl.err_code(r) != "not_held":
                        revived.append("cycle %d: %s through d2 after lost: "
                                       "%r" % (cyc, op, r))
                gone = False
                for _ in range(250):
                    vals = [nd.cmd("GET", key) for nd in w.nodes]
                    if all(v is None for v in vals):
                        gone = True
                        break
                    time.sleep(0.02)
                if not gone:
                    revived.append("cycle %d: the key stayed on the nodes "
                                   "after they were back: %r (pttl %r)" % (
                                       cyc, vals, [nd.cmd("PTTL", key)
                                                   for nd in w.nodes]))
                r = c2.call("complete", timeout=10.0 * SLOW, lock=token,
                            resource=res, keep_ms=60000)
                if rl.err_code(r) != "not_held":
                    revived.append("cycle %d: complete through d1 after "
                                   "lost: %r" % (cyc, r))
                marks = [nd.k for nd in w.nodes
                         if nd.cmd("GET", key) == ("done:" + token).encode()]
                if marks:
                    revived.append("cycle %d: done marks of a lost lock on "
                                   "n%s" % (cyc, marks))
                for nd in w.nodes:
                    nd.cmd("DEL", key)  # whatever a wrong answer left
                b, bs, br = _acquire(c2, res, 1000, rec, "d1")
                if b is None:
                    revived.append("cycle %d: B could not take the resource "
                                   "after the lost lock's release: %r" % (
                                       cyc, _acquire.last))
                else:
                    _hold_release(c2, b, res, bs, br, rec, "d1", kind="B")
        result.update(finish(w, rec, wait_ttl=False))
        result["revived"] = revived
        result["cycles"] = cycles
    return result


# refused-mark: A's TTL and the scenario daemon's --quarantine-ms. A flushed
# node sits out the quarantine, so it must outlast A's validity (the docs'
# advice: the largest TTL any client asks for); B asks 2.5 s after the
# flush, far inside it.
REFUSED_MARK_TTL_MS = 20000
REFUSED_MARK_B_AFTER_S = 2.5


def _mark_look(d, nd):
    """(counted, mark, health's entry) of node nd in d: counted is up, not
    quarantined and no not_counted. The mark is read from the node after
    health answered, so a node found counted with no mark had none when
    health answered either (nothing deletes the mark in between)."""
    n = d.health(timeout=2.0 * SLOW)["nodes"][nd.k - 1]
    mark = nd.cmd("GET", DATASET_KEY)
    counted = (n.get("up") is True and not n.get("quarantined") and
               "not_counted" not in n)
    return counted, mark, n


def run_refused_mark(long=False):
    """A node full (maxmemory 1, noeviction) while a daemon first connects
    answers the SET of its data-set mark with OOM and comes up without a
    mark, so nothing would show a flush of it. Once it takes writes again
    it must not vote until its mark stands, and once it has voted, a
    FLUSHALL of it must quarantine it.

    Per cycle, rotating the node K (the trio K, K+1, K+2):
      1. no daemon runs; the marks are deleted on every node, so the
         daemon meets a fresh cluster (K's mark, once set, is within 3 s of
         the others' and not quarantined: K votes in A's acquire), and K is
         made full;
      2. a fresh daemon starts through the proxies: K is up and its mark
         is not there (GET finds none);
      3. K takes writes again (maxmemory 0); at every look until health
         counts K (up, not quarantined, no not_counted), and once while K
         was full, K counted with no mark on it is recorded;
      4. the proxies partition K+3, K+4 off; A acquires R (ttl 20 s): held
         on the trio, K included; the partition is healed;
      5. FLUSHALL of K; 2.5 s later B asks for R, ten times 0.1 s apart,
         far inside A's validity: each must be refused (K quarantined; the
         trio's others are busy, K+3, K+4 no quorum);
      6. A releases; B must then get R (liveness); the daemon stops.
    A daemon that counted K at once, with no mark, would let B win
    through K, K+3, K+4 while A held (overlap and inversion)."""
    w = World(n_daemons=0)
    rec = Recorder()
    result = {"name": "refused-mark", "seed": None}
    cycles = 3 if long else 2
    counted_unmarked, not_counted, b_refused = [], [], []
    b_won_during_a = 0
    with scenario(w, result):
        for cyc in range(cycles):
            trio = [w.nodes[(2 * cyc + j) % 5] for j in range(3)]
            outside = [nd for nd in w.nodes if nd not in trio]
            nk = trio[0]
            res = "mark-%d" % cyc
            lk = PREFIX + "lock:" + res
            # 1.
            for nd in w.nodes:
                nd.cmd("DEL", DATASET_KEY)
            nk.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
            nk.cmd("CONFIG", "SET", "maxmemory", "1")
            try:
                # 2.
                dm = Daemon(w, "m%d" % cyc, [p.uri for p in w.proxies],
                            ["--quarantine-ms", str(REFUSED_MARK_TTL_MS)])
                w.daemons.append(dm)
                dm.start(wait_up=True)
                counted, mark, n = _mark_look(dm, nk)
                if mark is not None:
                    raise RuntimeError("cycle %d: n%d took a mark while "
                                       "full: %r" % (cyc, nk.k, mark))
                not_counted.append(n.get("not_counted"))
                w.event("cycle %d: %s up, n%d full without a mark: %r" % (
                    cyc, dm.name, nk.k, n))
                if counted:
                    counted_unmarked.append(
                        "cycle %d: n%d counted while full with no mark (%r)"
                        % (cyc, nk.k, n))
            finally:
                # 3.
                nk.cmd("CONFIG", "SET", "maxmemory", "0")
            w.event("cycle %d: n%d takes writes again" % (cyc, nk.k))
            deadline = time.monotonic() + \
                (REFUSED_MARK_TTL_MS / 1000.0 + 10.0) * SLOW
            for _ in range(100000):
                counted, mark, n = _mark_look(dm, nk)
                if counted and mark is None:
                    counted_unmarked.append(
                        "cycle %d: n%d counted with no mark after it took "
                        "writes (%r)" % (cyc, nk.k, n))
                if counted:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("cycle %d: n%d never counted: %r" % (
                        cyc, nk.k, n))
                time.sleep(0.02)
            w.event("cycle %d: n%d counted, mark %r" % (cyc, nk.k, mark))
            # 4.
            for nd in outside:
                w.proxies[nd.k - 1].cmd("partition")
            ko, ik = [nd.k - 1 for nd in outside], nk.k - 1
            _wait_states(dm, lambda st: all(not st[i][0] for i in ko) and
                         st[ik][0] and not st[ik][1], 10.0)
            w.event("cycle %d: %s reaches n%s only" % (
                cyc, dm.name, ",".join(str(nd.k) for nd in trio)))
            with rl.Client(dm.socket, timeout=10.0 * SLOW) as c1, \
                    rl.Client(dm.socket, timeout=10.0 * SLOW) as c2:
                a, a_send, a_recv = _acquire(c1, res, REFUSED_MARK_TTL_MS,
                                             rec, dm.name)
                if a is None:
                    raise RuntimeError("cycle %d: A could not acquire: %r" %
                                       (cyc, _acquire.last))
                on = [nd.k for nd in w.nodes if nd.cmd("GET", lk)]
                w.event("cycle %d: A holds %s on n%s, fence %s validity %d" %
                        (cyc, res, ",".join(map(str, on)), a["fence"],
                         a["validity_ms"]))
                if nk.k not in on:
                    raise RuntimeError("cycle %d: A's key is not on n%d: the "
                                       "flush would test nothing" %
                                       (cyc, nk.k))
                for nd in outside:
                    w.proxies[nd.k - 1].cmd("pass")
                _wait_states(dm, lambda st: all(u for u, q in st), 10.0)
                # 5.
                nk.cmd("FLUSHALL")
                t_flush = time.monotonic()
                w.event("cycle %d: FLUSHALL n%d" % (cyc, nk.k))
                time.sleep(REFUSED_MARK_B_AFTER_S)
                a_valid_until = a_recv + a["validity_ms"] / 1000.0
                codes = []
                for _ in range(10):
                    b, bs, br = _acquire(c2, res, 1000, rec, dm.name)
                    if b is not None:
                        during = br < a_valid_until
                        b_won_during_a += during
                        w.event("cycle %d: B got %s fence %s %.1f s after "
                                "the flush, %s A's validity ended, on n%s" % (
                                    cyc, res, b["fence"], br - t_flush,
                                    "BEFORE" if during else "after",
                                    ",".join(str(nd.k) for nd in w.nodes
                                             if nd.cmd("GET", lk) ==
                                             b["lock"].encode())))
                        _hold_release(c2, b, res, bs, br, rec, dm.name,
                                      kind="B")
                        break
                    codes.append(rl.err_code(_acquire.last))
                    time.sleep(0.1)
                b_refused.append(codes)
                w.event("cycle %d: B's tries refused: %r; n%d %r" % (
                    cyc, codes, nk.k, dm.health()["nodes"][nk.k - 1]))
                # 6.
                rec.hold(resource=res, start=a_recv, end=time.monotonic(),
                         sent=a_send, fence=a["fence"],
                         validity_ms=a["validity_ms"], daemon=dm.name,
                         ttl=REFUSED_MARK_TTL_MS, client="A", kind="A")
                rr = c1.call("release", timeout=10.0 * SLOW, lock=a["lock"])
                rec.release(rl.err_code(rr) or "ok")
                b = None
                deadline = time.monotonic() + 15.0 * SLOW
                for _ in range(20):
                    b, bs, br = _acquire(c2, res, 1000, rec, dm.name,
                                         wait_ms=2000)
                    if b is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
                if b is None:
                    rec.notes.append("cycle %d: B never acquired after A's "
                                     "release: %r" % (cyc, _acquire.last))
                else:
                    _hold_release(c2, b, res, bs, br, rec, dm.name, kind="B")
                    w.event("cycle %d: B got %s after A's release, fence %s"
                            % (cyc, res, b["fence"]))
            dm.stop()
        result.update(finish(w, rec), cycles=cycles,
                      b_won_during_a=b_won_during_a, b_refused=b_refused,
                      not_counted=not_counted,
                      counted_unmarked=counted_unmarked)
    return result


def run_clock_bare_quorum(long=False):
    """Redlock's documented limit, and what fencing does about it: A holds
    through exactly three nodes (d1's proxies cut the other two off), one of
    the three jumps its clock forward past A's TTL, so the key is gone
    there; B asks through d2 and gets the two free nodes plus the jumped
    one. The checker must see the overlap (Redlock assumes bounded clock
    drift; no daemon can tell), AND B's fence must still be above A's: the
    jumped node's counter saw A's write-back."""
    w = World(n_daemons=2, shim=True,
              daemon_extra=["--quarantine-ms", str(QUARANTINE_MS)])
    rec = Recorder()
    res = "clk"
    result = {"name": "clock-bare-quorum", "seed": None}
    cycles = 3 if long else 2
    with scenario(w, result):
        d1, d2 = w.daemon("d1"), w.daemon("d2")
        for cyc in range(cycles):
            trio = [w.nodes[(2 * cyc + j) % 5] for j in range(3)]
            outside = [nd for nd in w.nodes if nd not in trio]
            for nd in outside:
                w.proxies[nd.k - 1].cmd("partition")
            ko = [nd.k - 1 for nd in outside]
            _wait_states(d1, lambda st: all(not st[i][0] for i in ko), 10.0)
            with rl.Client(d1.socket, timeout=10.0) as c1:
                a, a_send, a_recv = _acquire(c1, res, MAX_TTL, rec, "d1",
                                             wait_ms=MAX_TTL + 1000)
                if a is None:
                    raise RuntimeError("A could not acquire")
                jumper = trio[0]
                time.sleep(0.02)  # past the shim's 10 ms re-read
                w.clock_jumps.append(time.monotonic())
                jumper.set_clock(60000)
                w.event("cycle %d: A holds via n%s, fence %s; n%d clock "
                        "+60 s" % (cyc, ",".join(str(n.k) for n in trio),
                                   a["fence"], jumper.k))
                time.sleep(0.05)
                with rl.Client(d2.socket, timeout=10.0) as c2:
                    b, bs, br = _acquire(c2, res, 1000, rec, "d2")
                    if b is not None:
                        w.event("cycle %d: B (d2) got it, fence %s" % (
                            cyc, b["fence"]))
                        _hold_release(c2, b, res, bs, br, rec, "d2",
                                      kind="B")
                    else:
                        w.event("cycle %d: B refused: %r" % (
                            cyc, _acquire.last))
                rec.hold(resource=res, start=a_recv, end=time.monotonic(),
                         sent=a_send, fence=a["fence"],
                         validity_ms=a["validity_ms"], daemon="d1",
                         ttl=MAX_TTL, client="A", kind="A")
                c1.call("release", timeout=10.0, lock=a["lock"])
            for nd in outside:
                w.proxies[nd.k - 1].cmd("pass")
            jumper.set_clock(0)
            w.max_clock_ms = max(w.max_clock_ms, MAX_TTL)
            _wait_states(d1, lambda st: all(u for u, q in st), 10.0)
        result.update(finish(w, rec))
        result["cycles"] = cycles
    return result


SCRIPTED = collections.OrderedDict([
    ("clock-bare-quorum", lambda long: run_clock_bare_quorum(long)),
    ("release-reach", lambda long: run_release_reach(long)),
    ("lost-complete", lambda long: run_lost_complete(long)),
    ("fence-late-answer", lambda long: run_fence_late_answer(long)),
    ("refused-mark", lambda long: run_refused_mark(long)),
    ("quarantine-safe", lambda long: run_quarantine(False, long)),
    ("quarantine-unsafe", lambda long: run_quarantine(True, long)),
    ("fresh-daemon", lambda long: run_quarantine(False, long,
                                                 fresh_daemon=True)),
    ("gap-fresh-daemon", lambda long: run_quarantine(False, long,
                                                     fresh_daemon=True,
                                                     settled=False)),
    ("fresh-daemon-slow-old", lambda long: run_fresh_slow_old(long)),
    ("fresh-daemon-uptime", lambda long: run_fresh_slow_old(
        long, uptime_gap=True)),
    ("sem-quarantine-safe", lambda long: run_quarantine(
        False, long, permits=SEM_PERMITS)),
    ("sem-quarantine-unsafe", lambda long: run_quarantine(
        True, long, permits=SEM_PERMITS)),
])

# Scenarios whose purpose is to show a violation.
EXPECT_VIOLATIONS = {"quarantine-unsafe", "sem-quarantine-unsafe"}
# Known daemon gaps, reported but not failed on (see README).
KNOWN_GAPS = {"gap-fresh-daemon"}


def describe(name):
    """--list's line for the semaphore scenarios ("" for the others: the
    README's tables describe them)."""
    if name in SEMAPHORES:
        return ("%s, clients on semaphores of %d permits (--long: %d)" % (
            SEMAPHORES[name], SEM_PERMITS, SEM_PERMITS_LONG))
    return {"sem-quarantine-safe": "quarantine-safe, A holding all %d "
            "permits: B waits" % SEM_PERMITS,
            "sem-quarantine-unsafe": "quarantine-unsafe, A holding all %d "
            "permits: B is a holder too many" % SEM_PERMITS}.get(name, "")


def run(name, long=False, seed=None):
    if name in SCRIPTED:
        return SCRIPTED[name](long)
    return run_nemesis(name, long=long, seed=seed)


# --------------------------------------------------------------------------
# output

def fmt_ms(v):
    return "-" if v is None else ("%.1f" % v)


def print_table(results, out=sys.stdout):
    hdr = ("%-23s %6s %5s %5s %5s %5s %5s %7s %7s %7s %7s  %s" % (
        "nemesis", "holds", "kill", "ovlp", "clk", "fence", "left", "p50ms",
        "p99ms", "maxms", "rss+kB", "acquire outcomes"))
    print(hdr, file=out)
    print("-" * len(hdr), file=out)
    for r in results:
        if r.get("skipped"):
            print("%-23s skipped: %s" % (r["name"], r["skipped"]), file=out)
            continue
        if r.get("error"):
            print("%-23s ERROR: %s" % (r["name"],
                                       r["error"].strip().splitlines()[-1]),
                  file=out)
            continue
        lat = r["acquire_ok_ms"]
        codes = " ".join("%s=%d" % kv for kv in sorted(r["codes"].items(),
                                                        key=lambda kv:
                                                        -kv[1]))
        nleft = sum(len(v) if isinstance(v, list) else 1
                    for v in r["leftovers"].values())
        print("%-23s %6d %5d %5d %5d %5d %5d %7s %7s %7s %7d  %s" % (
            r["name"], r["holds"], r["killed_holds"], r["overlaps"],
            r.get("overlaps_clock", 0), r["fence_violations"], nleft,
            fmt_ms(lat["p50"]),
            fmt_ms(lat["p99"]), fmt_ms(lat["max"]), r["rss_growth_kb"],
            codes), file=out)


def print_details(r, out=sys.stdout):
    if r.get("skipped"):
        return
    for a, b in r.get("overlap_examples", []):
        print("    OVERLAP  %s\n          vs %s" % (a, b), file=out)
    for a, b in r.get("clock_overlap_examples", []):
        print("    CLOCK    %s\n          vs %s  (after a clock jump: "
              "Redlock's own limit; fences still ordered)" % (a, b),
              file=out)
    for a, b in r.get("fence_examples", []):
        print("    FENCE    %s\n     then    %s" % (a, b), file=out)
    if r.get("permits"):
        print("    SEM      %d permits; most holders at once %s; over N %d "
              "(+%d after a clock jump); releases %s" % (
                  r["permits"], r["most_at_once"], r["over_n"],
                  r["over_n_clock"], r["releases"]), file=out)
    for g in r.get("over_n_examples", []):
        print("    OVER N   %s" % "\n          & ".join(g), file=out)
    if r.get("leftovers"):
        print("    LEFT     %r" % r["leftovers"], file=out)
    if r.get("leftovers_clock"):
        print("    LEFT     %r (set while the node's clock ran ahead: "
              "they expire that much later)" % r["leftovers_clock"],
              file=out)
    for st in r.get("stale", []):
        print("    STALE    %s" % st, file=out)
    for st in r.get("counted_unmarked", []):
        print("    UNMARKED %s" % st, file=out)
    if r.get("b_refused") is not None:
        print("    B while A held, after the flush: refused %r; health's "
              "not_counted while full %r (per cycle)" % (
                  r["b_refused"], r["not_counted"]), file=out)
    if "b_won_during_a" in r:
        print("    B won while A held: %d of %d cycles" % (
            r["b_won_during_a"], r["cycles"]), file=out)
    if r.get("paused_refused") is not None:
        print("    B while the older nodes slept: refused %r, granted %r "
              "(per cycle)" % (r["paused_refused"], r["paused_granted"]),
              file=out)
    if r.get("fresh_seen") is not None:
        print("    fresh daemon quarantined %s (restarted: %s)" % (
            r["fresh_seen"], r["killed"]), file=out)
    if r.get("rss"):
        print("    RSS kB   %s" % "  ".join(
            "%s:%s" % (name, ",".join("%s->%s" % (x["rss_start_kb"],
                                                  x["rss_end_kb"])
                                      for x in runs))
            for name, runs in r["rss"].items()), file=out)
    if r.get("error"):
        print("    %s" % r["error"].replace("\n", "\n    "), file=out)


def main(argv=None):
    global VERBOSE
    if argv and argv[0] == "--hold-client":
        return hold_client_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--long", action="store_true",
                    help="longer runs, three daemons, more clients")
    ap.add_argument("--only", help="comma separated scenario names")
    ap.add_argument("--json", help="write every result to this file")
    ap.add_argument("--seed", type=int, help="random seed (nemeses)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    VERBOSE = a.verbose
    # SIGTERM ends the run through the finally blocks and atexit: children
    # killed, temp dirs and the nft table removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    names = list(NEMESES) + list(SEMAPHORES) + list(SCRIPTED)
    if a.list:
        for n in names:
            print(("%-23s %s" % (n, describe(n))).rstrip())
        return 0
    if a.only:
        want = [s.strip() for s in a.only.split(",") if s.strip()]
        bad = [s for s in want if s not in names]
        if bad:
            print("unknown scenario(s): %s (see --list)" % ", ".join(bad),
                  file=sys.stderr)
            return 2
        names = want
    results, failed = [], []
    try:
        for n in names:
            t = time.monotonic()
            print("== %s" % n, flush=True)
            r = run(n, long=a.long, seed=a.seed)
            r["seconds"] = round(time.monotonic() - t, 1)
            results.append(r)
            print_table([r])
            print_details(r)
            bad = verdict(r, expect_violations=n in EXPECT_VIOLATIONS)
            if n in KNOWN_GAPS:
                if r.get("overlaps") or r.get("fence_violations"):
                    print("    known gap reproduced (see README)")
                bad = [b for b in bad if "overlap" not in b and
                       "fence" not in b]
            if bad:
                failed.append((n, bad))
                print("    FAIL: %s" % "; ".join(bad))
            for t_, e in r.get("events", [])[:60] if VERBOSE else []:
                print("    %7.3f %s" % (t_, e))
    finally:
        nft_cleanup()
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
    print("\nsummary")
    print_table(results)
    passed = len(results) - len(failed)
    print("%d passed, %d failed" % (passed, len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
