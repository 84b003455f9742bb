"""test_redlockctl.py: redlockctl against a real redlockd and real
redis-servers.

Run from the repo root after `meson setup build && ninja -C build`:

    /usr/bin/python3 -m pytest clients/redlockctl/tests -q

Environment: REDLOCKCTL_BIN (default <repo>/build/clients/redlockctl/
redlockctl), REDLOCKD_BIN (default <repo>/build/sidecar/redlockd),
REDIS_SERVER (default redis-server), REDLOCKCTL_KEEP_TMP=1 keeps the temp
dir (node logs, daemon stderr).

Every test gets five redis-servers on unix sockets under a fresh temp dir and
a daemon started against them (not --dev, so that nodes can be paused or
killed). Module-scoped fixtures serve the tests that only read; the tests
that pause, kill or stop something get their own. Every wait is bounded in
time and every child is killed at teardown.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "harness"))

import rl  # noqa: E402  (the harness every Python suite shares)

CTL = Path(os.environ.get("REDLOCKCTL_BIN", str(
    REPO / "build" / "clients" / "redlockctl" / "redlockctl")))
DAEMON = Path(os.environ.get("REDLOCKD_BIN", str(
    REPO / "build" / "sidecar" / "redlockd")))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
KEEP_TMP = os.environ.get("REDLOCKCTL_KEEP_TMP", "") not in ("", "0")
PY = sys.executable or "/usr/bin/python3"
TOKEN_RE = re.compile(r"^[0-9a-f]{32}$")

RC_FAIL = 1
RC_USAGE = 2
RC_UNAVAILABLE = 69
RC_LOST = 75

pytestmark = pytest.mark.skipif(
    not CTL.exists() or not DAEMON.exists()
    or shutil.which(REDIS_SERVER) is None,
    reason="build redlockctl and redlockd first; needs redis-server")


def rname(tag="r"):
    """A fresh resource name, so tests sharing a daemon never collide."""
    return "%s-%s" % (tag, uuid.uuid4().hex[:12])


def wait_for(fn, timeout, interval=0.02):
    """Calls fn() until it returns a truthy value or timeout seconds pass;
    returns the last value."""
    deadline = time.monotonic() + timeout
    val = fn()
    for _ in range(100000):
        if val or time.monotonic() >= deadline:
            break
        time.sleep(interval)
        val = fn()
    return val


def stop_proc(p, sig=signal.SIGTERM, timeout=5.0):
    """Sends sig to p (resuming it first), then SIGKILL if it lingers.
    Returns the exit code."""
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGCONT)
            p.send_signal(sig)
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=timeout)
    return p.returncode


class Cluster:
    """Five redis-servers (rl.Cluster, on DIR/nK.sock) and a redlockd on
    DIR/d.sock with its default flags and flags (rl.Daemon), in a temp
    dir."""

    def __init__(self, flags=()):
        self.dir = Path(tempfile.mkdtemp(prefix="rlctl-"))
        self.redis = rl.Cluster(5, self.dir)
        self.nodes = self.redis.nodes
        self.d = rl.Daemon(self.redis, name="d", flags=list(flags))
        self.sock = self.d.socket

    @property
    def daemon(self):
        """The daemon's Popen."""
        return self.d.proc

    def start(self):
        self.redis.start()
        self.d.start(timeout=10.0)
        return self

    def stderr_tail(self, n=40):
        return self.d.stderr_tail(n) or "(no daemon stderr)"

    def stop(self):
        """Stops everything; the daemon's exit code after SIGTERM."""
        self.redis.resume_all()
        code, _ = self.d.stop()
        self.redis.stop()
        if not KEEP_TMP:
            shutil.rmtree(self.dir, ignore_errors=True)
        return code


@pytest.fixture(scope="module")
def shared_mod():
    c = Cluster()
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture
def shared(shared_mod):
    """The module's cluster, checked alive before and after each test so
    that a daemon death is pinned on the test that saw it."""
    d = shared_mod.daemon
    assert d.poll() is None, "shared redlockd exited %s earlier:\n%s" % (
        d.returncode, shared_mod.stderr_tail())
    yield shared_mod
    assert d.poll() is None, "shared redlockd exited %s during the test:" \
        "\n%s" % (d.returncode, shared_mod.stderr_tail())


@pytest.fixture
def own():
    c = Cluster()
    try:
        yield c.start()
    finally:
        c.stop()


def ctl_env(extra=None):
    env = dict(os.environ)
    for k in ("REDLOCKD_SOCKET", "REDLOCK_TOKEN", "REDLOCK_RESOURCE",
              "REDLOCK_FENCE"):
        env.pop(k, None)
    if extra:
        env.update(extra)
    return env


def ctl(cluster, *args, timeout=20.0, env=None, input=None, cwd=None):
    """Runs redlockctl --socket <cluster's> ARGS; returns CompletedProcess
    with text stdout and stderr."""
    argv = [str(CTL)]
    if cluster is not None:
        argv += ["--socket", str(cluster.sock)]
    argv += [str(a) for a in args]
    return subprocess.run(argv, capture_output=True, text=True,
                          timeout=timeout, env=ctl_env(env), input=input,
                          cwd=cwd)


def ctl_bg(cluster, *args, **kw):
    """Starts redlockctl in the background; stdout and stderr are pipes."""
    argv = [str(CTL), "--socket", str(cluster.sock)]
    argv += [str(a) for a in args]
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, text=True,
                            env=ctl_env(kw.pop("env", None)), **kw)


def acquire(cluster, resource, *opts):
    """acquire over redlockctl; returns (exit code, parsed JSON or None)."""
    r = ctl(cluster, "acquire", *opts, resource)
    try:
        return r.returncode, json.loads(r.stdout)
    except ValueError:
        return r.returncode, None


def is_busy(cluster, resource):
    """True when an acquire of resource answers busy right now; a lock it
    happens to get is given back at once. It competes for the lock, so use
    it only where nothing else is trying to take it; "CMD has started"
    (children_of) is the race-free sign that a `lock` holds its lock."""
    code, rsp = acquire(cluster, resource)
    if code == 0:
        ctl(cluster, "release", rsp["lock"], resource)
        return False
    assert rsp["error"]["code"] == "busy", rsp
    return True


def started(p, ready, timeout=10):
    """Waits until the file ready exists (CMD has started, so the lock is
    held); fails with redlockctl's output if it exits first."""
    ok = wait_for(lambda: ready.exists() or p.poll() is not None, timeout)
    if not ready.exists():
        stop_proc(p)
        out, err = p.communicate(timeout=5)
        pytest.fail("CMD did not start within %ss; redlockctl exit %r, "
                    "stdout %r, stderr %r" % (timeout, p.returncode, out,
                                              err))
    return ok


def children_of(pid):
    """Pids of the children of pid (Linux /proc)."""
    try:
        text = Path("/proc/%d/task/%d/children" % (pid, pid)).read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def pid_alive(pid):
    """True when pid exists and is not a zombie."""
    try:
        stat = Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


class FakeDaemon:
    """A stand-in for redlockd on a unix socket under dir_, for the few
    wire-level cases the real daemon cannot be made to produce on demand.
    serve(conn) handles each accepted connection in turn, at most conns of
    them; everything else in this file uses the real daemon."""

    def __init__(self, dir_, serve, conns):
        self.path = Path(dir_) / "fake.sock"
        self.serve = serve
        self.conns = conns
        self.errors = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(self.path))
        self.srv.listen(8)
        self.srv.settimeout(10)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        for _ in range(self.conns):
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            with c:
                c.settimeout(10)
                try:
                    self.serve(c)
                except OSError:
                    pass  # redlockctl went away: its exit tells the story
                except Exception as e:  # shown by __exit__
                    self.errors.append(e)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        try:
            self.srv.shutdown(socket.SHUT_RDWR)  # wakes a pending accept
        except OSError:
            pass
        self.srv.close()
        self.thread.join(timeout=15)
        if exc[0] is None:  # else the test's own failure says more
            assert not self.thread.is_alive(), "fake daemon did not stop"
            assert not self.errors, self.errors


def recv_request(c):
    """Reads one request from c: an NDJSON line, or an HTTP request with
    its body. Returns (kind, bytes) with kind "ndjson" or "http"."""
    buf = b""
    for _ in range(1000):
        if buf.startswith(b"{") and b"\n" in buf:
            return "ndjson", buf.split(b"\n", 1)[0]
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep:
            m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            if len(body) >= (int(m.group(1)) if m else 0):
                return "http", buf
        data = c.recv(65536)
        if not data:
            break
        buf += data
    raise AssertionError("no complete request: %r" % buf[:200])


def answer_until_closed(c, reply):
    """Answers each NDJSON request on c with reply % its id, until the
    peer closes."""
    buf = b""
    for _ in range(1000):
        data = c.recv(65536)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            c.sendall((reply % json.loads(line)["id"]).encode())


# ---------------------------------------------------------------------------
# lock: exit status, environment, stdio


def test_lock_exit_status(shared):
    r = rname()
    assert ctl(shared, "lock", r, "--", "true").returncode == 0
    assert ctl(shared, "lock", r, "--", "sh", "-c", "exit 3").returncode == 3
    res = ctl(shared, "lock", r, "--", "sh", "-c", "kill -9 $$")
    assert res.returncode == 128 + 9, res.stderr
    res = ctl(shared, "lock", r, "--", "sh", "-c", "kill -TERM $$")
    assert res.returncode == 128 + 15, res.stderr
    assert res.stderr == ""
    # Nothing is left behind: the lock is free again at once.
    assert not is_busy(shared, r)


def test_lock_environment_and_stdio(shared):
    r = rname("env")
    script = ('echo "tok=$REDLOCK_TOKEN res=$REDLOCK_RESOURCE '
              'fence=${REDLOCK_FENCE-unset}"; cat; echo err >&2')
    res = ctl(shared, "lock", r, "--", "sh", "-c", script,
              input="from stdin\n", env={"REDLOCK_FENCE": "stale"})
    assert res.returncode == 0, res.stderr
    first, rest = res.stdout.split("\n", 1)
    m = re.match(r"^tok=([0-9a-f]{32}) res=(\S+) fence=unset$", first)
    assert m, first
    assert m.group(2) == r
    assert rest == "from stdin\n"
    assert res.stderr == "err\n"

    res = ctl(shared, "lock", "--fence", r, "--", "sh", "-c",
              'echo "$REDLOCK_FENCE"')
    f1 = int(res.stdout)
    res = ctl(shared, "lock", "--fence", r, "--", "sh", "-c",
              'echo "$REDLOCK_FENCE"')
    assert int(res.stdout) > f1


def test_lock_holds_and_renews(shared):
    """With --ttl 300 the lock outlives several ttls while CMD runs (the
    daemon renews it), others see busy, and it is free once CMD ends."""
    r = rname("hold")
    p = ctl_bg(shared, "lock", "--ttl", "300", r, "--", "sleep", "1.5")
    try:
        assert wait_for(lambda: children_of(p.pid), 5)
        time.sleep(1.0)  # > 3 ttls
        res = ctl(shared, "acquire", r)
        assert res.returncode == RC_FAIL
        assert res.stderr == "redlockctl: %s is busy\n" % r
        assert json.loads(res.stdout)["error"]["code"] == "busy"
        assert p.wait(timeout=10) == 0
    finally:
        stop_proc(p)
    assert not is_busy(shared, r)


def test_lock_busy_and_done(shared, tmp_path):
    r = rname("busy")
    code, held = acquire(shared, r, "--ttl", "10000")
    assert code == 0
    marker = tmp_path / "ran"
    res = ctl(shared, "lock", r, "--", "touch", marker)
    assert res.returncode == RC_FAIL
    assert res.stderr == "redlockctl: %s is busy\n" % r
    assert res.stdout == ""
    t0 = time.monotonic()
    res = ctl(shared, "lock", "--wait", "400", r, "--", "touch", marker)
    assert res.returncode == RC_FAIL
    assert time.monotonic() - t0 >= 0.35
    assert res.stderr == "redlockctl: %s is busy\n" % r
    assert not marker.exists()

    assert ctl(shared, "complete", held["lock"], r).returncode == 0
    res = ctl(shared, "lock", "--wait", "2000", r, "--", "touch", marker)
    assert res.returncode == RC_FAIL
    assert res.stderr.startswith("redlockctl: %s is done: " % r)
    assert not marker.exists()


def test_lock_waits_in_rounds(shared, tmp_path):
    """lock --wait has no 300000 cap: it waits in rounds (each a fresh
    acquire with wait_ms <= 300000, here shortened by the test knob
    REDLOCKCTL_WAIT_ROUND_MS) until the lock is free or the wait is over."""
    r = rname("rounds")
    code, held = acquire(shared, r, "--ttl", "20000")
    assert code == 0
    marker = tmp_path / "ran"
    rounds = {"REDLOCKCTL_WAIT_ROUND_MS": "150"}
    t0 = time.monotonic()
    res = ctl(shared, "lock", "--wait", "700", r, "--", "touch", marker,
              env=rounds)
    assert res.returncode == RC_FAIL, res.stderr
    assert time.monotonic() - t0 >= 0.65        # every round was waited
    assert res.stderr == "redlockctl: %s is busy\n" % r
    # A standby far past the old cap, in 150 ms rounds: it takes the lock
    # when the holder lets go, a few rounds in.
    p = ctl_bg(shared, "lock", "--wait", "3600000", r, "--", "touch", marker,
               env=rounds)
    try:
        time.sleep(0.8)
        assert p.poll() is None and not marker.exists()
        assert ctl(shared, "release", held["lock"], r).returncode == 0
        out, err = p.communicate(timeout=10)
    finally:
        stop_proc(p)
    assert p.returncode == 0, err
    assert marker.exists()
    # Without the knob, a wait above 300000 is accepted (one 300000 round
    # first): the lock is free, so it runs at once.
    res = ctl(shared, "lock", "--wait", "600000", r, "--", "true")
    assert res.returncode == 0, res.stderr


def test_lock_cannot_run(shared, tmp_path):
    r = rname("exec")
    res = ctl(shared, "lock", r, "--", str(tmp_path / "no-such-cmd"))
    assert res.returncode == 127
    assert "cannot run" in res.stderr
    f = tmp_path / "not-exec"
    f.write_text("#!/bin/sh\n")
    res = ctl(shared, "lock", r, "--", str(f))
    assert res.returncode == 126
    assert not is_busy(shared, r)


def test_mutual_exclusion(shared, tmp_path):
    """Concurrent locks on one resource never interleave; the later ones
    wait (--wait) and all run."""
    r = rname("mx")
    log = tmp_path / "log"
    script = 'echo start >> "$1"; sleep 0.3; echo end >> "$1"; echo done'
    procs = [ctl_bg(shared, "lock", "--wait", "15000", r, "--",
                    "sh", "-c", script, "sh", str(log)) for _ in range(4)]
    try:
        outs = [p.communicate(timeout=30) for p in procs]
    finally:
        for p in procs:
            stop_proc(p)
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out == "done\n"
    assert log.read_text().split() == ["start", "end"] * 4


def test_mutual_exclusion_stdout(shared):
    """The brief's case, literally: two `sh -c 'echo start; sleep 0.3;
    echo end'` on one resource; the second, started while the first runs,
    waits and starts only after the first ended."""
    r = rname("mx2")
    cmd = ["sh", "-c", "echo start; sleep 0.3; echo end"]
    a = ctl_bg(shared, "lock", r, "--", *cmd)
    try:
        # CMD runs only once the lock is held.
        assert wait_for(lambda: children_of(a.pid), 5)
        t_b = time.monotonic()
        b = ctl_bg(shared, "lock", "--wait", "10000", r, "--", *cmd)
        out_a, _ = a.communicate(timeout=10)
        t_a_end = time.monotonic()
        out_b, _ = b.communicate(timeout=10)
        t_b_end = time.monotonic()
    finally:
        stop_proc(a)
    assert a.returncode == 0 and b.returncode == 0
    assert out_a == out_b == "start\nend\n"
    assert t_b_end - t_a_end >= 0.25  # b's whole run came after a's
    assert t_b_end - t_b >= 0.3


# ---------------------------------------------------------------------------
# lock: signals


def _default_signals():
    """For redlockctl's child: the dispositions of an interactive start. A
    shell runs background jobs with SIGINT and SIGQUIT ignored, and
    redlockctl rightly hands what it inherited on to CMD, which would then
    ignore the forwarded SIGINT (seen when CI itself ran in the
    background)."""
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def test_signals_forwarded(shared, tmp_path):
    r = rname("sig")
    ready = tmp_path / "ready"
    script = ('trap "echo got-TERM; exit 7" TERM; touch "$1"; '
              'while :; do sleep 0.05; done')
    p = ctl_bg(shared, "lock", r, "--", "sh", "-c", script, "sh", ready)
    try:
        started(p, ready)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=5)
    finally:
        stop_proc(p)
    assert p.returncode == 7, err
    assert out == "got-TERM\n"
    assert not is_busy(shared, r)

    p = ctl_bg(shared, "lock", r, "--", "sleep", "30",
               preexec_fn=_default_signals)
    try:
        assert wait_for(lambda: children_of(p.pid), 5)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=5)
    finally:
        stop_proc(p)
    assert p.returncode == 128 + signal.SIGINT
    assert not is_busy(shared, r)


def test_terminal_interrupt_not_doubled(shared):
    """^C on a terminal reaches the whole foreground process group, CMD
    included: redlockctl must not send CMD a second SIGINT."""
    import pty
    import select
    r = rname("tty")
    child = ("import signal, sys, time\n"
             "n = 0\n"
             "def h(s, f):\n"
             "    global n\n"
             "    n += 1\n"
             "signal.signal(signal.SIGINT, h)\n"
             "print('ready', flush=True)\n"
             "t = time.time() + 10\n"
             "while n == 0 and time.time() < t:\n"
             "    time.sleep(0.01)\n"
             "time.sleep(0.5)\n"
             "print('count', n, flush=True)\n"
             "sys.exit(40 + n)\n")
    argv = [str(CTL), "--socket", str(shared.sock), "lock", r, "--", PY,
            "-c", child]
    pid, fd = pty.fork()
    if pid == 0:  # the child: redlockctl on the pty, in the foreground
        try:
            os.execve(argv[0], argv, ctl_env())
        finally:
            os._exit(99)
    out = b""
    sent = False
    status = None
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(fd, 1024)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            if b"ready" in out and not sent:
                os.write(fd, b"\x03")
                sent = True
        _, st = os.waitpid(pid, 0)
        status = os.waitstatus_to_exitcode(st)
        pid = 0
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert b"count 1" in out, out
    assert status == 41


def test_signal_while_waiting(shared, tmp_path):
    """SIGTERM while the acquire waits: redlockctl gives up at once, CMD
    never runs, and the abandoned wait does not take the lock later."""
    r = rname("sigwait")
    code, held = acquire(shared, r, "--ttl", "10000")
    assert code == 0
    marker = tmp_path / "ran"
    p = ctl_bg(shared, "lock", "--wait", "20000", r, "--", "touch", marker)
    try:
        time.sleep(0.3)
        assert p.poll() is None
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=5)
        assert time.monotonic() - t0 < 2
    finally:
        stop_proc(p)
    assert p.returncode == 128 + signal.SIGTERM
    assert "interrupted" in err
    assert ctl(shared, "release", held["lock"], r).returncode == 0
    time.sleep(0.2)
    assert not marker.exists()
    assert not is_busy(shared, r)


# ---------------------------------------------------------------------------
# lock: the lock is lost while CMD runs


def test_lost_terminates_command(own):
    """Three of five nodes stop answering: the daemon cannot renew a --ttl
    600 lock, sends "lost", and redlockctl stops `sleep 30` and exits 75."""
    r = rname("lost")
    p = ctl_bg(own, "lock", "--ttl", "600", r, "--", "sleep", "30")
    try:
        assert wait_for(lambda: children_of(p.pid), 5)
        child = children_of(p.pid)[0]
        assert is_busy(own, r)  # CMD runs: the lock is held
        time.sleep(0.3)
        for n in own.nodes[:3]:
            n.pause()
        t0 = time.monotonic()
        _, err = p.communicate(timeout=15)
        took = time.monotonic() - t0
    finally:
        for n in own.nodes:
            n.resume()
        stop_proc(p)
    print("lost noticed and CMD stopped after %.3fs" % took)
    assert p.returncode == RC_LOST, err
    assert ("redlockctl: lock on %s lost: " % r) in err
    assert "SIGTERM" in err
    assert not pid_alive(child)
    assert took < 5


def test_lost_in_same_read_as_acquire_answer(tmp_path):
    """A lost event that arrives in the same read as the acquire answer (the
    daemon failed the first renewal at once) must stop CMD too. Before the
    fix it stayed unread in the buffer: CMD ran to the end without the lock
    and redlockctl exited 0. A fake daemon, because only it can put the two
    lines into one write on demand."""
    marker = tmp_path / "ran"

    def serve(c):
        req = json.loads(recv_request(c)[1])
        c.sendall(('{"id":%d,"ok":true,"lock":"%s","resource":"r",'
                   '"validity_ms":600}\n'
                   '{"event":"lost","lock":"%s","resource":"r"}\n'
                   % (req["id"], TOK, TOK)).encode())
        # The daemon keeps the session open after "lost".
        answer_until_closed(c, '{"id":%d,"ok":false,"error":{"code":'
                            '"not_held","message":"unknown token"}}\n')

    code = ("import pathlib, sys, time\n"
            "time.sleep(3)\n"
            "pathlib.Path(sys.argv[1]).touch()\n")
    with FakeDaemon(tmp_path, serve, 1) as fake:
        t0 = time.monotonic()
        res = ctl(None, "--socket", fake.path, "lock", "--ttl", "600", "r",
                  "--", PY, "-c", code, marker)
        took = time.monotonic() - t0
    assert res.returncode == RC_LOST, (res.returncode, res.stderr)
    assert "redlockctl: lock on r lost: " in res.stderr
    assert "SIGTERM" in res.stderr
    assert not marker.exists(), "CMD ran to the end without the lock"
    assert took < 2.5


def test_lost_escalates_to_sigkill(own, tmp_path):
    """A CMD that ignores SIGTERM gets SIGKILL after --kill-after."""
    r = rname("lostkill")
    ready = tmp_path / "ready"
    code = ("import signal, time, pathlib, sys\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "pathlib.Path(sys.argv[1]).touch()\n"
            "time.sleep(30)\n")
    # ttl 1500, not 600: CMD must get to ignore SIGTERM before any loss,
    # even on a loaded machine.
    p = ctl_bg(own, "lock", "--ttl", "1500", "--kill-after", "700", r, "--",
               PY, "-c", code, ready)
    try:
        started(p, ready)
        child = children_of(p.pid)[0]
        for n in own.nodes[:3]:
            n.pause()
        t0 = time.monotonic()
        _, err = p.communicate(timeout=15)
        took = time.monotonic() - t0
    finally:
        for n in own.nodes:
            n.resume()
        stop_proc(p)
    assert p.returncode == RC_LOST, err
    assert "SIGKILL" in err
    assert not pid_alive(child)
    assert 0.6 < took < 6


def test_lock_standby_on_another_daemon_takes_over(own, tmp_path):
    """Leader election with lock: a standby waiting (in rounds, past the
    old 300000 cap) through a second daemon over the same nodes runs its
    command once the leader's redlockctl is killed, well within the ttl
    (its session closes, the release wakes the other daemon's waiter)."""
    r = rname("standby")
    sock2 = own.dir / "d2.sock"
    argv = [str(DAEMON), "--socket", str(sock2)]
    for n in own.nodes:
        argv += ["--node", "unix://%s" % n.path]
    with open(own.dir / "d2.stderr", "wb") as err:
        d2 = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=err)
    marker = tmp_path / "standby-ran"
    leader = ctl_bg(own, "lock", "--ttl", "3000", r, "--", "sleep", "30")
    standby = None
    try:
        assert wait_for(lambda: sock2.exists(), 10)
        assert wait_for(lambda: children_of(leader.pid), 5)
        cmd_pid = children_of(leader.pid)[0]
        standby = subprocess.Popen(
            [str(CTL), "--socket", str(sock2), "lock", "--ttl", "3000",
             "--wait", "3600000", r, "--", "touch", str(marker)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
            env=ctl_env({"REDLOCKCTL_WAIT_ROUND_MS": "200"}))
        time.sleep(0.7)
        assert standby.poll() is None and not marker.exists()
        t0 = time.monotonic()
        leader.kill()
        os.kill(cmd_pid, signal.SIGKILL)
        assert wait_for(marker.exists, 10)
        took = time.monotonic() - t0
        _, err = standby.communicate(timeout=10)
    finally:
        stop_proc(leader)
        if standby is not None:
            stop_proc(standby)
        code = stop_proc(d2)
    assert standby.returncode == 0, err
    assert took < 3.0, took
    assert code == 0


def test_connection_drop_is_lost(own, tmp_path):
    """The daemon dies (SIGKILL): the session is gone, so is the lock."""
    r = rname("drop")
    p = ctl_bg(own, "lock", r, "--", "sleep", "30")
    try:
        assert wait_for(lambda: children_of(p.pid), 5)
        assert is_busy(own, r)
        own.daemon.kill()
        own.daemon.wait(timeout=5)
        _, err = p.communicate(timeout=10)
    finally:
        stop_proc(p)
    assert p.returncode == RC_LOST
    assert ("redlockctl: lock on %s lost: the connection to redlockd "
            "closed" % r) in err


def test_daemon_shutdown_is_lost(own):
    """SIGTERM to the daemon releases every lock: the command must stop."""
    r = rname("shut")
    p = ctl_bg(own, "lock", r, "--", "sleep", "30")
    try:
        assert wait_for(lambda: children_of(p.pid), 5)
        assert is_busy(own, r)
        own.daemon.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=10)
    finally:
        stop_proc(p)
    assert p.returncode == RC_LOST, err
    assert own.daemon.wait(timeout=5) == 0


# ---------------------------------------------------------------------------
# script commands


def test_scripting_round_trip(shared):
    r = rname("script")
    code, a = acquire(shared, r, "--ttl", "5000", "--fence")
    assert code == 0
    assert a["ok"] is True and TOKEN_RE.match(a["lock"])
    assert a["resource"] == r and 0 < a["validity_ms"] <= 5000
    assert isinstance(a["fence"], int)
    tok = a["lock"]
    # The HTTP lock outlives the redlockctl that took it.
    assert is_busy(shared, r)

    res = ctl(shared, "extend", "--ttl", "20000", tok, r)
    assert res.returncode == 0, res.stderr
    e = json.loads(res.stdout)
    assert e["ok"] is True and 5000 < e["validity_ms"] <= 20000

    res = ctl(shared, "release", tok, r)
    assert res.returncode == 0 and json.loads(res.stdout) == {"ok": True}
    res = ctl(shared, "release", tok, r)
    assert res.returncode == RC_FAIL
    assert json.loads(res.stdout)["error"]["code"] == "not_held"
    assert res.stderr.startswith("redlockctl: release: not_held: ")
    res = ctl(shared, "extend", tok, r)
    assert res.returncode == RC_FAIL

    # --quiet: the token alone, or "TOKEN FENCE".
    res = ctl(shared, "-q", "acquire", r)
    assert res.returncode == 0 and TOKEN_RE.match(res.stdout.strip())
    tok = res.stdout.strip()
    res = ctl(shared, "acquire", "--quiet", r)
    assert res.returncode == RC_FAIL and res.stdout == ""
    assert res.stderr == "redlockctl: %s is busy\n" % r
    res = ctl(shared, "complete", "--keep", "1000", "-q", tok)
    assert res.returncode == 0 and res.stdout == ""
    res = ctl(shared, "acquire", r)
    assert res.returncode == RC_FAIL
    assert json.loads(res.stdout)["error"]["code"] == "done"
    time.sleep(1.2)  # the done mark expires
    res = ctl(shared, "acquire", "-q", "--fence", r)
    assert res.returncode == 0
    tok, fence = res.stdout.split()
    assert TOKEN_RE.match(tok) and int(fence) > 0
    assert ctl(shared, "release", "-q", tok).returncode == 0


@pytest.mark.parametrize("fence", [2**53 + 1, 2**63 - 1])
def test_fence_beyond_2_pow_53(tmp_path, fence):
    """Fences are printed and exported digit for digit: 2^53 + 1 and
    proto/vectors' 2^63 - 1 came out rounded (%.0f of a double) before the
    fix. A fake daemon, because no test can drive the real one's counter
    that far."""
    def serve(c):
        kind, req = recv_request(c)
        body = ('"ok":true,"lock":"%s","resource":"r","validity_ms":29000,'
                '"fence":%d}' % (TOK, fence))
        if kind == "http":
            body = "{" + body
            c.sendall(("HTTP/1.1 200 OK\r\nContent-Type: application/json"
                       "\r\nContent-Length: %d\r\nConnection: close\r\n"
                       "\r\n%s" % (len(body), body)).encode())
            return
        c.sendall(('{"id":%d,' % json.loads(req)["id"] + body
                   + "\n").encode())
        answer_until_closed(c, '{"id":%d,"ok":true}\n')

    with FakeDaemon(tmp_path, serve, 2) as fake:
        res = ctl(None, "--socket", fake.path, "-q", "acquire", "--fence",
                  "r")
        assert res.returncode == 0, res.stderr
        assert res.stdout == "%s %d\n" % (TOK, fence)
        res = ctl(None, "--socket", fake.path, "lock", "--fence", "r", "--",
                  "sh", "-c", 'printf %s "$REDLOCK_FENCE"')
        assert res.returncode == 0, res.stderr
        assert res.stdout == str(fence)


def test_acquire_wait(shared):
    r = rname("await")
    code, held = acquire(shared, r, "--ttl", "600")
    assert code == 0
    t0 = time.monotonic()
    code, got = acquire(shared, r, "--wait", "5000")
    assert code == 0 and got["ok"], got
    assert 0.3 < time.monotonic() - t0 < 3
    ctl(shared, "release", got["lock"], r)


def test_abandoned_http_wait_leaves_no_lock(shared):
    """An `acquire --wait` killed while it waits (^C, a timeout) must not
    win the lock later for nobody (the daemon tells a closed peer from a
    half-closed one since 7f7cbdc; before, the lock stayed held for its
    whole ttl)."""
    r = rname("orphan")
    code, held = acquire(shared, r, "--ttl", "20000")
    assert code == 0
    p = ctl_bg(shared, "acquire", "--wait", "10000", "--ttl", "20000", r)
    try:
        time.sleep(0.3)
        assert p.poll() is None
        p.kill()  # like ^C or curl --max-time giving up
        p.wait(timeout=5)
    finally:
        stop_proc(p)
    assert ctl(shared, "release", held["lock"], r).returncode == 0
    time.sleep(0.3)
    assert not is_busy(shared, r), \
        "%s still held after its only holder released it" % r


def test_health_ping_metrics(shared):
    res = ctl(shared, "health")
    assert res.returncode == 0
    h = json.loads(res.stdout)
    assert h["ok"] is True and h["quorum"] == 3 and len(h["nodes"]) == 5
    res = ctl(shared, "ping")
    assert res.returncode == 0 and json.loads(res.stdout) == {"ok": True}
    assert ctl(shared, "ping", "-q").stdout == ""
    res = ctl(shared, "metrics")
    assert res.returncode == 0 and "# TYPE redlockd_" in res.stdout


def test_health_without_quorum(own):
    for n in own.nodes[:3]:
        n.stop()

    def unhealthy():
        res = ctl(own, "health", timeout=10)
        return res if res.returncode != 0 else None

    res = wait_for(unhealthy, 10, interval=0.1)
    assert res and res.returncode == RC_FAIL
    h = json.loads(res.stdout)
    assert h["ok"] is False and h["error"]["code"] == "no_quorum"
    assert res.stderr.startswith("redlockctl: health: no_quorum: ")
    res = ctl(own, "lock", rname(), "--", "true")
    assert res.returncode == RC_FAIL
    assert "no_quorum" in res.stderr


def test_bad_request_from_daemon_is_usage(shared):
    res = ctl(shared, "acquire", "a\x01b")
    assert res.returncode == RC_USAGE
    assert res.stderr.startswith("redlockctl: acquire: bad_request: ")
    res = ctl(shared, "lock", "a\x7fb", "--", "true")
    assert res.returncode == RC_USAGE


# ---------------------------------------------------------------------------
# command line and an unreachable daemon

TOK = "0123456789abcdef0123456789abcdef"

USAGE_CASES = [
    [],
    ["bogus"],
    ["--nope", "ping"],
    ["-x", "ping"],
    ["lock"],
    ["lock", "r"],
    ["lock", "r", "--"],
    ["lock", "r", "true"],
    ["lock", "--", "true"],
    ["lock", "--ttl", "5", "r", "--", "true"],
    ["lock", "--ttl", "abc", "r", "--", "true"],
    ["lock", "--ttl", "-100", "r", "--", "true"],
    ["lock", "--wait", "9007199254740992", "r", "--", "true"],
    ["acquire", "--wait", "300001", "r"],
    ["lock", "--kill-after", "x", "r", "--", "true"],
    ["lock", "--keep", "10", "r", "--", "true"],
    ["--ttl", "100", "acquire", "r"],
    ["acquire"],
    ["acquire", "a", "b"],
    ["acquire", "--wait"],
    ["acquire", "--fence=yes", "r"],
    ["acquire", "--kill-after", "10", "r"],
    ["acquire", "x" * 513],
    ["release"],
    ["release", "xyz"],
    ["release", TOK.upper()],
    ["release", TOK, "r", "extra"],
    ["extend", "--keep", "5", TOK],
    ["complete", "--keep", "0", TOK],
    ["complete", "--ttl", "100", TOK],
    ["health", "extra"],
    ["ping", "--fence"],
    ["--timeout", "0", "ping"],
    ["--socket", "", "ping"],
    ["--socket", "/" + "s" * 200, "ping"],
]


@pytest.mark.parametrize("argv", USAGE_CASES, ids=lambda a: " ".join(a))
def test_usage_errors(argv, tmp_path):
    marker = tmp_path / "ran"
    res = ctl(None, *argv, env={"REDLOCKD_SOCKET": str(tmp_path / "none")})
    assert res.returncode == RC_USAGE, (res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("redlockctl: "), lines
    assert not marker.exists()


def test_help_and_version():
    res = ctl(None, "--help")
    assert res.returncode == 0 and res.stdout.startswith("Usage: redlockctl")
    for word in ("lock", "acquire", "release", "extend", "complete",
                 "health", "ping", "--kill-after", "REDLOCK_TOKEN", "75"):
        assert word in res.stdout
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    assert ctl(None, "lock", "-h").returncode == 0
    res = ctl(None, "--version")
    assert res.returncode == 0 and res.stdout.startswith("redlockctl ")


def test_daemon_down(tmp_path):
    marker = tmp_path / "ran"
    missing = tmp_path / "missing.sock"
    for argv in (["ping"], ["health"], ["acquire", "r"], ["release", TOK],
                 ["lock", "r", "--", "touch", str(marker)]):
        res = ctl(None, "--socket", missing, *argv)
        assert res.returncode == RC_UNAVAILABLE, argv
        assert res.stdout == ""
        assert res.stderr.startswith(
            "redlockctl: ") and "cannot connect to redlockd at " \
            + str(missing) in res.stderr, res.stderr
        assert len(res.stderr.splitlines()) == 1
    assert not marker.exists()

    # A stale socket file: nobody listens.
    stale = tmp_path / "stale.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    res = ctl(None, "--socket", stale, "lock", "r", "--", "touch", marker)
    assert res.returncode == RC_UNAVAILABLE
    assert "Connection refused" in res.stderr
    assert not marker.exists()


def test_daemon_silent_or_closing(tmp_path):
    """A peer that accepts and never answers: --timeout bounds the wait. A
    peer that closes at once: unavailable too."""
    path = tmp_path / "silent.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(8)
    try:
        for argv in (["ping"], ["lock", "r", "--", "true"]):
            t0 = time.monotonic()
            res = ctl(None, "--socket", path, "--timeout", "300", *argv)
            assert res.returncode == RC_UNAVAILABLE
            assert "did not answer" in res.stderr
            assert time.monotonic() - t0 < 3
        srv.settimeout(0.5)
        for argv in (["ping"], ["lock", "r", "--", "true"]):
            p = subprocess.Popen([str(CTL), "--socket", str(path)] + argv,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 env=ctl_env())
            try:
                # Drain connections left over from the silent round too.
                for _ in range(4):
                    try:
                        c, _ = srv.accept()
                    except socket.timeout:
                        break
                    c.close()
                _, err = p.communicate(timeout=5)
            finally:
                stop_proc(p)
            assert p.returncode == RC_UNAVAILABLE, err
            # EOF, ECONNRESET or EPIPE, depending on the timing.
            assert ("closed the connection" in err
                    or "Connection reset" in err
                    or "Broken pipe" in err), err
    finally:
        srv.close()


def test_lock_refused_connection_says_why(tmp_path):
    """A daemon at --max-connections answers limit without an id (it read
    no request of this connection) and closes. lock dropped that line and
    said only "closed the connection before answering", exit 69, leaving
    the user to guess; the daemon's reason is the answer."""
    marker = tmp_path / "ran"
    c = Cluster(flags=["--max-connections", "1"])
    try:
        c.start()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hold:
            hold.settimeout(5)
            hold.connect(str(c.sock))
            hold.sendall(b'{"op":"ping","id":1}\n')
            assert b'"ok":true' in hold.recv(4096)  # the one connection
            res = ctl(c, "lock", "r", "--", "touch", marker)
    finally:
        c.stop()
    assert res.returncode == RC_FAIL, (res.returncode, res.stderr)
    assert res.stderr == "redlockctl: lock: limit: too many connections " \
        "(--max-connections)\n", res.stderr
    assert not marker.exists()


def test_socket_from_env_and_default(shared, tmp_path):
    res = ctl(None, "ping", env={"REDLOCKD_SOCKET": str(shared.sock)})
    assert res.returncode == 0
    # Default ./redlockd.sock, relative to the working directory.
    (tmp_path / "redlockd.sock").symlink_to(shared.sock)
    res = ctl(None, "ping", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    # --socket beats the environment.
    res = ctl(None, "--socket", shared.sock, "ping",
              env={"REDLOCKD_SOCKET": str(tmp_path / "none")})
    assert res.returncode == 0


def test_status_and_locks(shared):
    res_name = rname("st") + " a/b?c"  # needs escaping in the path
    r = ctl(shared, "status", res_name)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["state"] == "free"
    assert ctl(shared, "-q", "status", res_name).stdout == "free\n"
    code, a = acquire(shared, res_name, "--ttl", "20000", "--fence")
    assert code == 0, a
    r = ctl(shared, "status", "--fence", res_name)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["state"] == "held" and st["mine"] is True, st
    assert st["fence"] >= a["fence"] and 0 < st["pttl_ms"] <= 20000, st
    assert a["lock"] not in r.stdout
    assert ctl(shared, "-q", "status", res_name).stdout == "held\n"
    # locks: one object a line, every page, never a token.
    tag = rname("ls")
    toks = []
    for i in range(3):
        code, b = acquire(shared, "%s:%d" % (tag, i), "--ttl", "20000")
        assert code == 0, b
        toks.append(b["lock"])
    r = ctl(shared, "locks", tag + ":")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["resource"] for x in lines] == [
        "%s:%d" % (tag, i) for i in range(3)], lines
    assert all(x["owner"] == "http" for x in lines), lines
    assert not any(t in r.stdout for t in toks), r.stdout
    r = ctl(shared, "locks")
    assert r.returncode == 0 and res_name in r.stdout
    for i, t in enumerate(toks):
        assert ctl(shared, "release", t, "%s:%d" % (tag, i)).returncode == 0
    assert ctl(shared, "complete", a["lock"], res_name).returncode == 0
    assert ctl(shared, "-q", "status", res_name).stdout == "done\n"
    assert ctl(shared, "status").returncode == 2  # missing RESOURCE


def test_status_without_quorum(own):
    for n in own.nodes[:3]:
        n.pause()
    r = ctl(own, "status", rname(), timeout=10)
    assert r.returncode == RC_FAIL, (r.stdout, r.stderr)
    assert json.loads(r.stdout)["error"]["code"] == "no_quorum"
    assert "no_quorum" in r.stderr


def test_lock_permits(shared, tmp_path):
    """lock --permits 2 (consul lock -n): two commands at once, a third
    is busy, each knows its permit."""
    res = rname("perm")
    procs, readies = [], []
    for i in range(2):
        ready = tmp_path / ("ready%d" % i)
        readies.append(ready)
        procs.append(ctl_bg(shared, "lock", "--permits", "2", "--ttl",
                            "5000", res, "--", "sh", "-c",
                            'echo "$REDLOCK_PERMIT" > %s; sleep 30' % ready))
    try:
        for p, ready in zip(procs, readies):
            started(p, ready)
        permits = sorted(r.read_text().strip() for r in readies)
        assert permits == ["0", "1"], permits
        r = ctl(shared, "lock", "--permits", "2", res, "--", "true")
        assert r.returncode == RC_FAIL and "busy" in r.stderr, r.stderr
        r = ctl(shared, "locks", res)
        held = [json.loads(x) for x in r.stdout.splitlines()]
        assert sorted(e["permit"] for e in held) == [0, 1], held
        assert all(e["permits"] == 2 for e in held), held
        code, a = acquire(shared, res, "--permits", "3")
        assert code == 0 and a["permit"] == 2, a  # a third slot of 3
        assert ctl(shared, "release", a["lock"], res).returncode == 0
        assert ctl(shared, "acquire", "--permits", "1", res).returncode == 2
    finally:
        for p in procs:
            stop_proc(p)
    r = ctl(shared, "lock", "--permits", "2", res, "--", "sh", "-c",
            'echo "$REDLOCK_PERMIT"')
    assert r.returncode == 0 and r.stdout.strip() in ("0", "1"), r
