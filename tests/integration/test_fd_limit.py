"""The file descriptor limit: at start the daemon raises its soft
RLIMIT_NOFILE to the hard limit and warns when even that cannot serve
--max-connections with its own descriptors; out of descriptors at accept,
its listeners pause (no spinning core, no log line per try), the clients it
holds keep working, and the waiting connections are served once
descriptors free."""

import os
import re
import socket
import time

from extra import free_port, metric, scrape, xdaemons  # noqa: F401
from rl import BIN, SLOW, assert_ok, poll_until, pytest, rname

TICK = os.sysconf("SC_CLK_TCK")
VALGRIND = "valgrind" in BIN.name


def cpu_seconds(pid):
    """utime + stime of pid, in seconds (/proc/<pid>/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(TICK)


def accept_lines(d):
    """The log's lines about accept (libevent's own warning included)."""
    return [ln for ln in d.stderr_text().splitlines() if "accept" in ln]


def open_files_limits(pid):
    """(soft, hard) of "Max open files" in /proc/<pid>/limits."""
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no Max open files line")


def test_out_of_descriptors_pauses_accepting(cluster, xdaemons):
    """RLIMIT_NOFILE 64 and 100 more clients than it can hold: the
    listeners (the lock socket and --metrics-listen) pause instead of
    calling accept in a loop, a held client's locks keep working, and once
    the extra connections close new clients are served again."""
    port = free_port()
    d = xdaemons.start(cluster, name="fd64", nofile=64,
                       extra=["--metrics-listen", "127.0.0.1:%d" % port])
    held = d.client(timeout=5.0 * SLOW)
    extra = []
    try:
        r = held.call("acquire", resource=rname("fd"), ttl_ms=30000)
        assert_ok(r)
        for _ in range(100):  # the listen backlog (1024) takes them all
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(str(d.socket))
            extra.append(s)
        for _ in range(3):
            t = socket.create_connection(("127.0.0.1", port), timeout=1.0)
            extra.append(t)

        def starved():
            return any("out of file descriptors" in ln or
                       "Too many open files" in ln for ln in accept_lines(d))
        ok, _ = poll_until(starved, 5.0 * SLOW, 0.05)
        assert ok, "never ran out of descriptors:\n%s" % d.stderr_tail(20)

        cpu0 = cpu_seconds(d.pid)
        time.sleep(2.0)
        cpu = cpu_seconds(d.pid) - cpu0
        n_lines = len(accept_lines(d))
        print("cpu %.2f s over 2 s starved; %d accept lines" % (cpu, n_lines))
        assert n_lines < 20, accept_lines(d)[:5]
        assert cpu < 0.5, "%.2f s of CPU in 2 s while starved" % cpu

        # the held connection is served throughout
        r2 = held.call("extend", lock=r["lock"], ttl_ms=30000)
        assert_ok(r2)
        assert_ok(held.call("release", lock=r["lock"]))
        r3 = held.call("acquire", resource=rname("fd2"), ttl_ms=5000)
        assert_ok(r3)
        assert_ok(held.call("release", lock=r3["lock"]))
    finally:
        for s in extra:
            s.close()
        held.close()

    def resumed():
        return any("accept: resumed after" in ln for ln in accept_lines(d))
    ok, _ = poll_until(resumed, 10.0 * SLOW, 0.05)
    assert ok, "no resumed line:\n%s" % d.stderr_tail(20)
    assert len(accept_lines(d)) < 20, accept_lines(d)[:5]
    with d.client() as c:
        assert_ok(c.call("ping"))
    m = scrape(("127.0.0.1", port))
    assert (metric(m, "redlockd_accept_deferred_total") or 0) >= 1, m


def test_soft_limit_raised_to_hard(cluster, xdaemons):
    if VALGRIND:
        pytest.skip("valgrind shows the daemon limits of its own, with "
                    "nothing above the soft one to raise it to")
    d = xdaemons.start(cluster, name="raise", nofile=(256, 4096))
    assert "file descriptor limit raised from 256 to 4096 (the hard limit)" \
        in d.stderr_text(), d.stderr_tail(20)
    assert open_files_limits(d.pid) == (4096, 4096)


def test_startup_warns_when_max_connections_cannot_be_served(cluster,
                                                             xdaemons):
    d = xdaemons.start(cluster, name="small", nofile=1024)
    m = re.search(r"file descriptor limit (\d+) is below the (\d+) that "
                  r"--max-connections 10240 needs with 5 node\(s\)",
                  d.stderr_text())
    assert m, d.stderr_tail(20)
    # (valgrind shows the daemon a limit a few descriptors lower)
    assert m.group(1) == "1024" or VALGRIND, m.group(0)
    assert int(m.group(1)) <= 1024 and int(m.group(2)) > 10240, m.group(0)
    # a --max-connections that fits: no warning
    d2 = xdaemons.start(cluster, name="fits", nofile=1024,
                        extra=["--max-connections", "500"])
    assert "file descriptor limit" not in d2.stderr_text(), \
        d2.stderr_tail(20)
