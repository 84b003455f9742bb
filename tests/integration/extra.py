"""extra.py: private helpers and fixtures for test_long_held.py,
test_http.py, test_metrics_health.py, test_security.py and test_leader.py.

Standard library only (plus tests/harness/rl.py, used read-only, which holds
the HTTP client and the /metrics parser; the names are re-exported here for
the tests that import them from this module). It adds:
  - curl(): runs curl --unix-socket and parses what it printed;
  - XDaemon: a Daemon that can start with a umask, raised RLIMIT_NOFILE,
    a custom readiness check (--allow-uid refuses our own ping);
  - PwRedis: a redis-server with --requirepass, on a unix socket and/or a
    TCP port on 127.0.0.1;
  - fixtures: xdaemons (cleanup of XDaemons), pw_redis (password nodes).

Every loop is bounded and every socket has a timeout.
"""

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path

import rl
from rl import (LIVE_DAEMONS, SLOW, Client, Daemon,  # noqa: F401
                HttpConn, HttpResponse, RedisNode, _parse_head,
                free_tcp_port, http, metric, metric_sum, parse_metrics,
                parse_one, parse_responses, poll_until, pytest, scrape)

CURL = shutil.which("curl")
free_port = free_tcp_port


# --------------------------------------------------------------------------
# HTTP


def curl(sock, *args, timeout=15.0, verbose=False):
    """curl -s -i --unix-socket SOCK ARGS...; returns (responses, completed
    process). URLs are http://localhost/..."""
    if CURL is None:
        pytest.skip("curl not installed")
    argv = [CURL, "-s", "-i", "--max-time", str(int(timeout))]
    if verbose:
        argv.append("-v")
    if sock is not None:
        argv += ["--unix-socket", str(sock)]
    argv += list(args)
    p = subprocess.run(argv, capture_output=True, timeout=timeout + 5,
                       stdin=subprocess.DEVNULL)
    try:
        rs = parse_responses(p.stdout)
    except AssertionError as e:
        raise AssertionError("%s; curl %r rc=%d stderr=%r" % (
            e, args, p.returncode, p.stderr[-500:]))
    return rs, p


def curl1(sock, *args, **kw):
    """One final response (a 100 Continue before it is skipped)."""
    rs, p = curl(sock, *args, **kw)
    final = [r for r in rs if r.status >= 200]
    assert len(final) == 1, "expected one response from curl %r, got %r " \
        "(rc=%d, stderr %r)" % (args, rs, p.returncode, p.stderr[-300:])
    return final[0]


# --------------------------------------------------------------------------
# Metrics

def dev_health(sock):
    """The health answer of the daemon on sock when it has a quorum, else
    None (not listening yet, or no quorum)."""
    try:
        with Client(sock, timeout=1.0) as c:
            h = c.call("health")
            return h if h.get("ok") else None
    except OSError:
        return None


# --------------------------------------------------------------------------
# Daemons with a preexec hook


class XDaemon(Daemon):
    """A Daemon with umask / RLIMIT_NOFILE (a number for both limits, or a
    (soft, hard) pair) set in the child, and a custom readiness check.
    ready: None = ping over NDJSON (Daemon's), or a callable(daemon) -> bool
    polled until true."""

    def __init__(self, cluster, name="x", extra=(), node_args=None,
                 umask=None, nofile=None, ready=None, env=None,
                 socket_path=None):
        super().__init__(cluster, name=name, extra=extra,
                         node_args=node_args)
        if socket_path is not None:
            i = self.argv.index("--socket")
            self.argv[i + 1] = str(socket_path)
            self.socket = Path(socket_path)
        self.umask = umask
        self.nofile = nofile
        self.ready = ready
        self.env = env

    def _preexec(self):
        rl._die_with_parent()
        if self.umask is not None:
            os.umask(self.umask)
        if self.nofile is not None:
            lim = (self.nofile if isinstance(self.nofile, tuple)
                   else (self.nofile, self.nofile))
            resource.setrlimit(resource.RLIMIT_NOFILE, lim)

    def popen_kw(self):
        env = None
        if self.env is not None:
            env = dict(os.environ)
            env.update(self.env)
        return {"preexec_fn": self._preexec, "env": env}

    def wait_started(self, wait_nodes, timeout):
        if self.ready is None:
            return super().wait_started(wait_nodes, timeout)
        ok, _ = poll_until(lambda: (self.proc.poll() is not None or
                                    self.ready(self)), timeout, 0.05)
        if self.proc.poll() is not None:
            raise RuntimeError("redlockd exited %s at start:\n%s" % (
                self.proc.returncode, self.stderr_tail()))
        if not ok:
            raise RuntimeError("redlockd not ready:\n%s" % self.stderr_tail())


def socket_listening(d):
    """XDaemon ready= check with no side effect: d.socket is listening.
    The daemon binds, chmods, then listens, so the file alone (which exists
    from bind on) is not enough: a connect in between is refused, a window
    valgrind widens. /proc/net/unix shows the listening flag
    (__SO_ACCEPTCON, 0x10000) of every socket, without connecting (which
    would log a client, or a refusal under --allow-uid)."""
    path = str(d.socket)
    try:
        with open("/proc/net/unix") as f:
            next(f, None)  # the header
            for line in f:
                cols = line.split()
                if (len(cols) >= 8 and cols[7] == path and
                        int(cols[3], 16) & 0x10000):
                    return True
    except OSError:
        pass
    return False


class _XDaemons:
    def __init__(self):
        self.daemons = []

    def start(self, cluster, name="x", extra=(), **kw):
        d = XDaemon(cluster, name=name, extra=extra, **kw)
        self.daemons.append(d)
        return d.start(wait_nodes=kw.get("ready") is None)

    def teardown(self):
        errors = []
        for d in reversed(self.daemons):
            if d.proc is None or d.exit_code is not None:
                continue
            if d.proc.poll() is not None:
                code = d.proc.returncode
                d.kill()
                d.exit_code = code
                errors.append("daemon %s exited on its own (code %r); "
                              "stderr tail:\n%s" % (d.name, code,
                                                     d.stderr_tail(60)))
                continue
            code, secs = d.stop(5.0)
            if code != 0:
                errors.append("daemon %s: SIGTERM gave exit %r%s after "
                              "%.2fs; stderr tail:\n%s"
                              % (d.name, code, rl.exit_meaning(code), secs,
                                 d.stderr_tail(60)))
        return errors


@pytest.fixture
def xdaemons(cluster):
    f = _XDaemons()
    try:
        yield f
    finally:
        cluster.resume_all()
        errors = f.teardown()
    assert not errors, "\n".join(errors)


# --------------------------------------------------------------------------
# Password-protected redis


def PwRedis(dir_, name, password, tcp=False):
    """redis-server --requirepass PASSWORD on DIR/<name>.sock and, with
    tcp=True, on 127.0.0.1:<free port> (.port)."""
    return RedisNode(dir_, 0, password=password, name=name,
                     tcp_port="free" if tcp else 0)


# --------------------------------------------------------------------------
# Small helpers


def token_on_nodes(cluster, key):
    """GET key on every node."""
    return cluster.get_all(key)


def count_eq(values, want):
    return sum(1 for v in values if v == want)


def wait_metric(addr, name, want, timeout=3.0, **labels):
    """Polls /metrics until the sample equals want; returns (value, secs)."""
    last = [None]

    def check():
        last[0] = metric(scrape(addr), name, **labels)
        return last[0] == want

    ok, secs = poll_until(check, timeout, 0.05)
    return last[0], secs


def unique_pw():
    return "pw%s" % uuid.uuid4().hex


def mkdtemp_open():
    """A temp dir anyone may traverse (for sockets reached by other uids)."""
    d = tempfile.mkdtemp(prefix="rlxt-")
    os.chmod(d, 0o755)
    return Path(d)


def stop_signal(p, sig=signal.SIGKILL):
    if p.poll() is None:
        p.send_signal(sig)
