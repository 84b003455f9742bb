#!/usr/bin/env python3
"""soak.py: a bounded soak of the daemon under mixed load, checking that
its memory does not grow.

Five real redis-servers and one daemon. For --seconds (default 60):
  - cyclers: acquire/release of distinct resources on long-lived NDJSON
    connections (the hot path);
  - renewers: sessions holding renewing locks with a short TTL (300 ms, so a
    renewal every ~100 ms), dropped and re-taken now and then;
  - waiters: contended acquires with wait_ms on a few resources (FIFO and
    wake-ups), some abandoned by closing the connection mid-wait;
  - HTTP: acquire, extend, complete and release over HTTP/1.1;
  - churn: connections that open, send half a line or garbage, and close;
  - reconnects: every few seconds one node is killed with -9 and restarted
    (URIs carry ?persistent=1 so the node counts again at once), or paused
    and resumed.
The daemon's RSS is sampled every second. After a warm-up (the first
third, while pools and malloc arenas fill), the median of the last third
must not exceed the largest sample of the middle third by more than
--max-growth-kb (default 4096). Prints a table.
Standard library only; run from the repository root:
    /usr/bin/python3 tests/soak/soak.py [--seconds N]
Exit status 0 when the RSS stayed flat and no unexpected error happened."""

import argparse
import json
import os
import random
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "harness"))

import rl  # noqa: E402  (the harness every Python suite shares)

EXPECTED = {"busy", "done", "not_held", "no_quorum", "shutting_down"}


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.unexpected = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def result(self, kind, rsp):
        code = rl.err_code(rsp) or "ok"
        self.add("%s:%s" % (kind, code))
        if code not in EXPECTED and code != "ok":
            with self.lock:
                if len(self.unexpected) < 20:
                    self.unexpected.append((kind, rsp))


def cycler(sock, stop, st, tag):
    with rl.Client(sock, timeout=10.0) as c:
        i = 0
        while not stop.is_set():
            i += 1
            r = c.call("acquire", resource="soak:%s:%d" % (tag, i % 1000),
                       ttl_ms=5000)
            st.result("acquire", r)
            if r.get("ok"):
                st.result("release", c.call("release", lock=r["lock"]))


def renewer(sock, stop, st, tag):
    while not stop.is_set():
        with rl.Client(sock, timeout=10.0) as c:
            held = []
            for k in range(20):
                r = c.call("acquire", resource="soak:renew:%s:%d" % (tag, k),
                           ttl_ms=300, renew=True)
                st.result("renew-acquire", r)
                if r.get("ok"):
                    held.append(r["lock"])
            # Keep them renewing for a while, then drop half explicitly and
            # the rest with the session.
            t_end = time.monotonic() + random.uniform(1.0, 3.0)
            while time.monotonic() < t_end and not stop.is_set():
                time.sleep(0.1)
            for tok in held[: len(held) // 2]:
                st.result("renew-release", c.call("release", lock=tok))
            st.add("lost-events", len(c.events))


def waiter(sock, stop, st, tag):
    while not stop.is_set():
        c = rl.Client(sock, timeout=10.0)
        try:
            res = "soak:hot:%d" % random.randrange(3)
            if random.random() < 0.2:
                # Abandon a wait: close while queued.
                c.send({"op": "acquire", "id": "w", "resource": res,
                        "wait_ms": 2000, "ttl_ms": 200})
                time.sleep(random.uniform(0, 0.05))
                st.add("waiter-abandoned")
                continue
            r = c.call("acquire", resource=res, wait_ms=1000, ttl_ms=2000)
            st.result("wait-acquire", r)
            if r.get("ok"):
                time.sleep(random.uniform(0, 0.02))
                if random.random() < 0.3:
                    st.result("complete", c.call("complete", lock=r["lock"],
                                                 keep_ms=50))
                else:
                    st.result("release", c.call("release", lock=r["lock"]))
        except (OSError, rl.Closed) as e:
            st.add("waiter-io-error")
            with st.lock:
                if len(st.unexpected) < 20:
                    st.unexpected.append(("waiter", repr(e)))
        finally:
            c.close()


def http_once(sock, method, path, body=b""):
    """One request on a fresh connection: (status, parsed JSON body)."""
    r = rl.http(sock, method, path, body, timeout=10.0)
    return r.status, (r.json() if r.body else {})


def http_worker(sock, stop, st, tag):
    i = 0
    while not stop.is_set():
        i += 1
        res = "soak:http:%s:%d" % (tag, i % 200)
        try:
            status, r = http_once(sock, "POST", "/v1/locks",
                                  json.dumps({"resource": res,
                                              "ttl_ms": 3000}).encode())
            st.result("http-acquire", r)
            if r.get("ok"):
                tok = r["lock"]
                _, r2 = http_once(sock, "POST", "/v1/locks/%s/extend" % tok,
                                  b'{"ttl_ms":4000}')
                st.result("http-extend", r2)
                _, r3 = http_once(sock, "DELETE", "/v1/locks/%s" % tok)
                st.result("http-release", r3)
        except (OSError, ValueError, AssertionError, rl.Closed) as e:
            st.add("http-io-error")
            with st.lock:
                if len(st.unexpected) < 20:
                    st.unexpected.append(("http", repr(e)))


def churner(sock, stop, st):
    junk = [b"", b'{"op":"ping"', b"\xff\xfe garbage\n", b'{"op":"acquire",',
            b"GET /v1/ping HTTP/1.1\r\n"]
    while not stop.is_set():
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2.0)
            s.connect(sock)
            s.sendall(random.choice(junk))
            s.close()
            st.add("churn")
        except OSError:
            st.add("churn-refused")
        time.sleep(0.005)


def nemesis(cluster, stop, st, every):
    k = 0
    while not stop.wait(every):
        nd = cluster.nodes[k % len(cluster.nodes)]
        k += 1
        if k % 2:
            nd.kill9()
            nd.start()
            st.add("node-restarts")
        else:
            nd.pause()
            stop.wait(0.4)
            nd.resume()
            st.add("node-pauses")


def run(seconds, max_growth_kb, verbose=True):
    # AOF with appendfsync always: the only configuration ?persistent=1 is
    # for (the daemon quarantines a "persistent" node whose AOF is off).
    cluster = rl.Cluster(aof=True).start()
    daemon = None
    code = None
    stop = threading.Event()
    threads = []
    st = Stats()
    samples = []
    try:
        daemon = rl.Daemon(cluster, name="soak",
                           extra=["--log-level", "warn"])
        daemon.start()
        sock = str(daemon.socket)
        plan = ([(cycler, (sock, stop, st, "c%d" % i)) for i in range(4)] +
                [(renewer, (sock, stop, st, "r%d" % i)) for i in range(3)] +
                [(waiter, (sock, stop, st, "w%d" % i)) for i in range(4)] +
                [(http_worker, (sock, stop, st, "h%d" % i))
                 for i in range(2)] +
                [(churner, (sock, stop, st)),
                 (nemesis, (cluster, stop, st, 3.0))])
        for fn, args in plan:
            t = threading.Thread(target=fn, args=args, daemon=True)
            t.start()
            threads.append(t)
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            time.sleep(1.0)
            if not daemon.alive():
                raise RuntimeError("daemon died:\n" + daemon.stderr_tail())
            samples.append(daemon.rss_kb())
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        code = daemon.stop()[0] if daemon is not None else None
        cluster.stop()
    # Pools and malloc arenas fill in steps during the first part of a run;
    # after that, memory must stay flat: the last third's median against
    # the largest sample of the middle third.
    t = max(1, len(samples) // 3)
    early = max(samples[t:2 * t]) if len(samples) >= 3 else 0
    late = statistics.median(samples[-t:]) if samples else 0
    growth = late - early
    if verbose:
        print("soak: %d s, RSS samples (kB): start %d, middle third max "
              "%d, last third median %d, max %d: growth %+d kB (limit %d)"
              % (seconds, samples[0] if samples else 0, early, late,
                 max(samples) if samples else 0, growth, max_growth_kb))
        print("%-28s %10s" % ("what", "count"))
        for key in sorted(st.counts):
            print("%-28s %10d" % (key, st.counts[key]))
        for u in st.unexpected:
            print("unexpected:", u)
    return {"samples": samples, "growth_kb": growth, "counts": st.counts,
            "unexpected": st.unexpected, "exit_code": code}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--max-growth-kb", type=int, default=4096)
    a = ap.parse_args()
    r = run(a.seconds, a.max_growth_kb)
    ok = (r["growth_kb"] <= a.max_growth_kb and not r["unexpected"] and
          r["exit_code"] == 0)
    print("soak %s" % ("ok" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
