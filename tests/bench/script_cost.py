#!/usr/bin/env python3
"""tests/bench/script_cost.py: what each of the daemon's compare-and-act
scripts costs Redis per key, measured in Redis itself.

Starts one throw-away redis-server (unix socket under a temp dir, no
persistence), loads the scripts from sidecar/scripts.c, and for each shape
runs the same work: set N keys, then release (or extend) every one with its
own token, in calls of K keys. It reads the time Redis spent in EVALSHA
(INFO commandstats, usec) and prints microseconds per key, the median and
the minimum over the repetitions (the minimum is the least disturbed by the
shared machine). Only Redis's command time is counted, not its network
reads and parsing; fewer arguments per key lower those too.

    tests/bench/script_cost.py [--reps 9] [--keys 20000] [--batch 1,8,25,64]

Shapes: the single-key release / extend script (one call per key, what the
limit and the client libraries do); SCRIPT_BATCH, the mixed batch; and the
release-only and extend-only batches the daemon sends when a node's turn
holds one kind. Every run is bounded (a fixed number of keys) and the
server is stopped on exit. Stdlib only.
"""

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def _c_strings(text, macros):
    """The concatenation of the C string literals and string macros in
    text, in order."""
    out = []
    for lit, name in re.findall(r'"((?:[^"\\]|\\.)*)"|\b([A-Z_]+)\b', text):
        if name:
            out.append(macros.get(name, ""))
        else:
            out.append(bytes(lit, "utf-8").decode("unicode_escape"))
    return "".join(out)


def scripts_from_source(path):
    """{name: lua source} for every [SCRIPT_X] = ... in scripts.c, its
    string macros (#define NAME "..." \\ ...) expanded."""
    src = open(path, encoding="utf-8").read()
    macros = {}
    for m in re.finditer(r"#define ([A-Z_]+)((?:[^\n]*\\\n)*[^\n]*)", src):
        macros[m.group(1)] = _c_strings(m.group(2), macros)
    body = src[src.index("script_source[SCRIPT__COUNT] = {"):]
    body = body[body.index("{") + 1:body.index("};")]
    out = {}
    parts = re.split(r"\[(SCRIPT_[A-Z_]+)\]\s*=", body)
    for name, text in zip(parts[1::2], parts[2::2]):
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        out[name] = _c_strings(text, macros)
    return out


class Redis:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(60)
        self.s.connect(path)
        self.f = self.s.makefile("rb")

    @staticmethod
    def enc(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)

    def pipeline(self, cmds):
        self.s.sendall(b"".join(cmds))
        return [self.read() for _ in cmds]

    def call(self, *args):
        return self.pipeline([self.enc(*args)])[0]


def evalsha_usec(r):
    info = r.call("INFO", "commandstats").decode()
    m = re.search(r"cmdstat_evalsha:calls=(\d+),usec=(\d+)", info)
    return int(m.group(2)) if m else 0


def commands(op, script, sha, keys, toks, batch):
    """The EVALSHA calls that release (op "r") or extend (op "e") every key
    with its token through script, batch keys a call."""
    ttl = 30000
    cmds = []
    for i in range(0, len(keys), batch):
        ks, ts = keys[i:i + batch], toks[i:i + batch]
        n = len(ks)
        if script in ("SCRIPT_RELEASE", "SCRIPT_EXTEND"):
            cmds += [Redis.enc("EVALSHA", sha, 1, k, t,
                               "" if op == "r" else ttl)
                     for k, t in zip(ks, ts)]
        elif script == "SCRIPT_BATCH":
            argv = []
            for t in ts:
                argv += [op, t, "" if op == "r" else ttl, ""]
            cmds.append(Redis.enc("EVALSHA", sha, n, *ks, *argv))
        elif script == "SCRIPT_BATCH_RELEASE":
            cmds.append(Redis.enc("EVALSHA", sha, n, *ks, *ts))
        else:
            cmds.append(Redis.enc("EVALSHA", sha, n, *ks, *ts, *([ttl] * n)))
    return cmds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--batch", default="1,8,25,64")
    ap.add_argument("--redis-server", default=shutil.which("redis-server"))
    a = ap.parse_args()
    if not a.redis_server:
        sys.exit("script_cost.py: redis-server not found on PATH")
    batches = [int(x) for x in a.batch.split(",")]
    src = scripts_from_source(os.path.join(ROOT, "sidecar", "scripts.c"))
    tmp = tempfile.mkdtemp(prefix="rl-script-cost-")
    path = os.path.join(tmp, "r.sock")
    srv = subprocess.Popen(
        [a.redis_server, "--port", "0", "--unixsocket", path, "--save", "",
         "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(path):
            if time.monotonic() > deadline or srv.poll() is not None:
                sys.exit("script_cost.py: redis-server did not start")
            time.sleep(0.02)
        r = Redis(path)
        sha = {n: r.call("SCRIPT", "LOAD", s).decode()
               for n, s in src.items()}
        shapes = [("release, one key per call", "SCRIPT_RELEASE", 1),
                  ("extend, one key per call", "SCRIPT_EXTEND", 1)]
        for b in batches:
            if b == 1:
                continue
            shapes += [
                ("release, SCRIPT_BATCH, %d keys" % b, "SCRIPT_BATCH", b),
                ("release, SCRIPT_BATCH_RELEASE, %d keys" % b,
                 "SCRIPT_BATCH_RELEASE", b),
                ("extend, SCRIPT_BATCH, %d keys" % b, "SCRIPT_BATCH", b),
                ("extend, SCRIPT_BATCH_EXTEND, %d keys" % b,
                 "SCRIPT_BATCH_EXTEND", b)]
        keys = ["redlock:cost:%d" % i for i in range(a.keys)]
        toks = ["%032x" % (i * 2654435761) for i in range(a.keys)]
        res = {s[0]: [] for s in shapes}
        for _ in range(a.reps):
            for shape, script, b in shapes:  # interleaved repetitions
                r.pipeline([Redis.enc("SET", k, t, "PX", 600000)
                            for k, t in zip(keys, toks)])
                r.call("CONFIG", "RESETSTAT")
                out = r.pipeline(commands(shape[0], script, sha[script], keys,
                                          toks, b))
                flat = [x for o in out
                        for x in (o if isinstance(o, list) else [o])]
                if flat != [b"1"] * a.keys:
                    sys.exit("script_cost.py: %s did not act on every key"
                             % shape)
                res[shape].append(evalsha_usec(r) / a.keys)
                r.call("FLUSHALL")
        print("| script, keys per call | Redis µs per key, median | min |")
        print("|---|---|---|")
        for shape, _, _ in shapes:
            v = res[shape]
            print("| %s | %.2f | %.2f |" % (shape, statistics.median(v),
                                            min(v)))
    finally:
        srv.terminate()
        srv.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
